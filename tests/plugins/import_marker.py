"""A test plugin that records each process importing it; it registers ``marked-centroid``.

Importing it appends the process id to the file named by :data:`MARKER_ENV` (when set), so
a test can tell whether a worker process loaded the plugin.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from fewtrans_board import Adapter, hookimpl
from fewtrans_board.methods.adapters.prototypes import MeanCentroidAdapter

MARKER_ENV = "FEWTRANS_TEST_IMPORT_MARKER"

if os.environ.get(MARKER_ENV):
    with open(os.environ[MARKER_ENV], "a", encoding="utf-8") as marker:
        marker.write(f"{os.getpid()}\n")


class MarkedCentroid(MeanCentroidAdapter):
    """The nearest-centroid head under another name, provided by this plugin only."""

    name = "marked-centroid"


@hookimpl
def register_adapters(register: Callable[[type[Adapter]], None]) -> None:
    """Register ``marked-centroid``."""
    register(MarkedCentroid)
