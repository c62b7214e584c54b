"""Plugin loading and the registry built from it.

:mod:`.loading` finds entry points, applies allow-lists and builds the pluggy manager;
:mod:`.registry` holds the models, adapters and datasets the hooks declare.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any


def __getattr__(name: str) -> Any:
    # Release 0.1 had these names in the module ``fewtrans_board.registry``. Imported by name:
    # 'from fewtrans_board.registry import loading' would read this package's attribute, i.e.
    # call this function again, before the submodule is imported.
    loading = importlib.import_module("fewtrans_board.registry.manager")
    if name.startswith("__") or not hasattr(loading, name):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        f"fewtrans_board.registry.{name} moved to fewtrans_board.registry.manager.{name}",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(loading, name)
