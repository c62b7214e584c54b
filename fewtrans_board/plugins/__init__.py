"""Plugin loading and the registry built from it.

:mod:`.loading` finds entry points, applies allow-lists and builds the pluggy manager;
:mod:`.registry` holds the models, adapters and datasets the hooks declare.
"""

from __future__ import annotations

import warnings
from typing import Any


def __getattr__(name: str) -> Any:
    # Release 0.1 had these names in the module ``fewtrans_board.plugins``.
    import importlib

    # not 'from fewtrans_board.plugins import loading': before the submodule is imported that
    # reads this package's attribute, i.e. calls this function again
    loading = importlib.import_module("fewtrans_board.plugins.loading")

    if name.startswith("__") or not hasattr(loading, name):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        f"fewtrans_board.plugins.{name} moved to fewtrans_board.plugins.loading.{name}",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(loading, name)
