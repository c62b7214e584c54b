"""Import paths of release 0.1 that moved, kept working for one release with a warning.

Modules moved into the layered folders (``core``, ``api``, ``blocks``, ``methods``, ...).
Importing an old path, e.g. ``fewtrans_board.adapters.base``, returns the very module at its
new path (so classes, ``isinstance`` and monkeypatching stay one object) and warns with a
``DeprecationWarning`` that names the new path. The old paths go in the release after 0.2.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
import warnings
from collections.abc import Sequence

MOVED_MODULES = {
    "adapters.base": "api.adapter",
    "adapters.builtin.batched_heads": "blocks.batched_heads",
    "adapters.builtin.clip_common": "blocks.clip_common",
    "adapters.builtin.clip_prompts.prompter": "blocks.prompter",
    "adapters.builtin.clip_training": "blocks.clip_training",
    "adapters.builtin.deep_prompts": "blocks.deep_prompts",
    "adapters.builtin.finetune": "blocks.finetune",
    "adapters.builtin.layers": "blocks.layers",
    "adapters.builtin.training": "blocks.training",
    "adapters.builtin.unfuse": "blocks.unfuse",
    "adapters.builtin.vision_peft.bottleneck": "blocks.bottleneck",
    "adapters.builtin.vision_peft.common": "blocks.vit_hooks",
    "adapters.builtin.vit_parts": "blocks.vit_parts",
    "adapters.episode_data": "api.episode_data",
    "adapters.ranges": "api.ranges",
    "atomic": "core.atomic",
    "canonical": "core.canonical",
    "datasets.spec": "api.dataset_spec",
    "demo": "jobs.demo",
    "docs": "jobs.docs",
    "errors": "core.errors",
    "hookspecs": "api.hookspecs",
    "inductive_demo": "jobs.inductive_demo",
    "meta.episodes": "metatrain.episodes",
    "meta.train": "metatrain.train",
    "models.backbone": "api.backbone",
    "models.demo_clip": "methods.models.demo_clip",
    "models.demo_clip_train": "methods.models.demo_clip_train",
    "models.demo_cnn": "methods.models.demo_cnn",
    "models.spec": "api.model_spec",
    "plugin_calls": "core.plugin_calls",
    "preflight": "runner.preflight",
    "registry": "plugins.registry",
    "threads": "core.threads",
}
"""Old module path -> new module path, both relative to ``fewtrans_board``."""

MOVED_PACKAGES = {
    "adapters.builtin": "methods.adapters",
    "adapters.lockstep": "blocks.lockstep",
    "meta": "methods.meta",
    "sandbox": "core.sandbox",
}
"""Old package -> new package; every module below the old one moved along."""

EMPTIED_PACKAGES = frozenset({"adapters"})
"""Old packages whose contents went to several places: importable, empty, for submodules."""

PREFIX = "fewtrans_board."


def new_name(old: str) -> str | None:
    """The new absolute module name of an old absolute one, or ``None`` if it did not move.

    Args:
        old: an absolute module name such as ``fewtrans_board.adapters.base``.
    """
    if not old.startswith(PREFIX):
        return None
    relative = old[len(PREFIX) :]
    if relative in MOVED_MODULES:
        return PREFIX + MOVED_MODULES[relative]
    for package, target in MOVED_PACKAGES.items():
        if relative == package or relative.startswith(package + "."):
            return PREFIX + target + relative[len(package) :]
    return None


class _Alias(importlib.abc.Loader):
    """Loads an old name: the new module itself, or, for a package, a forwarding stand-in.

    A moved module takes the old name's place in ``sys.modules``, so both names are one
    object. A moved package cannot: ``from old.package import module`` imports
    ``<package __name__>.module``, which must stay an old name for modules that moved
    elsewhere. Its stand-in keeps the old name and forwards attribute reads to the new package.
    """

    def __init__(self, target: str | None) -> None:
        self.target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        target = self.target
        if target is None:  # an emptied package: a namespace for its old submodules
            module.__path__ = []
            return
        warnings.warn(
            f"{module.__name__} moved to {target}; import it from there "
            "(the old path goes in the release after 0.2)",
            DeprecationWarning,
            stacklevel=2,
        )
        new = importlib.import_module(target)
        if not hasattr(new, "__path__"):
            sys.modules[module.__name__] = new
            return

        def forward(name: str) -> object:
            return getattr(importlib.import_module(target), name)

        module.__path__ = []
        module.__getattr__ = forward  # type: ignore[method-assign]


class MovedModuleFinder(importlib.abc.MetaPathFinder):
    """Finds the old paths of moved modules (installed once by ``fewtrans_board``)."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: types.ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        """A spec that aliases ``fullname`` to its new module, or ``None`` if it did not move."""
        relative = fullname[len(PREFIX) :] if fullname.startswith(PREFIX) else None
        if relative in EMPTIED_PACKAGES:
            return importlib.machinery.ModuleSpec(fullname, _Alias(None), is_package=True)
        new = new_name(fullname)
        if new is None:
            return None
        found = importlib.util.find_spec(new)
        if found is None:  # a name that never existed fails as before, without a warning
            return None
        is_package = found.submodule_search_locations is not None
        return importlib.machinery.ModuleSpec(fullname, _Alias(new), is_package=is_package)


def install() -> None:
    """Put the finder first on ``sys.meta_path`` (idempotent)."""
    if not any(isinstance(finder, MovedModuleFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, MovedModuleFinder())
