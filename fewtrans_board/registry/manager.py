"""The plugin manager factory: built-in plugins, entry points, allow-list and checks.

There is no global plugin manager and nothing is loaded at import time. Call
:func:`get_plugin_manager` to get a fresh, fully checked manager; tests build their own.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.metadata
import os
import pickle
import sys
import types
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pluggy

from fewtrans_board.api import hookspecs
from fewtrans_board.core.errors import PluginError
from fewtrans_board.core.version import __version__

ENTRY_POINT_GROUP = "fewtrans_board"
"""Entry-point group third-party plugins declare in their ``pyproject.toml``."""

LOAD_PLUGINS_ENV = "FEWTRANS_BOARD_LOAD_PLUGINS"
"""Comma-separated allow-list of third-party plugins (entry-point or distribution names).

Unset: load every installed plugin. Empty: load none. Built-ins always load.
"""

TRACE_PLUGINS_ENV = "FEWTRANS_BOARD_TRACE_PLUGINS"
"""Set to ``1`` to print every hook call to stderr."""

DISTRIBUTION = "fewtrans-board"

DEFAULT_PLUGINS: tuple[str, ...] = (
    "fewtrans_board.default_plugins.commands",
    "fewtrans_board.default_plugins.datasets",
    "fewtrans_board.default_plugins.models",
    "fewtrans_board.default_plugins.smoke_models",
    "fewtrans_board.default_plugins.adapters",
)
"""Built-in plugin modules, registered exactly like third-party plugins."""


@dataclass(frozen=True)
class PluginSource:
    """Where a registered plugin comes from.

    Attributes:
        name: the plugin's name in the manager (entry-point name or module path).
        distribution: the installed distribution that provides it, if any.
        version: that distribution's version, if any.
        builtin: whether it is one of :data:`DEFAULT_PLUGINS`.
        module: the imported module (an entry point's module), if the plugin is one.
    """

    name: str
    distribution: str | None
    version: str | None
    builtin: bool
    module: str | None = None

    def describe(self) -> str:
        """Return ``"name (distribution version)"`` for messages."""
        if self.distribution:
            return f"{self.name!r} ({self.distribution} {self.version})"
        return f"{self.name!r} (not from an installed distribution)"


@dataclass(frozen=True)
class ExtraPlugin:
    """A plugin handed to :func:`get_plugin_manager` in ``extra_plugins``.

    Attributes:
        name: its name in the manager.
        module: the module's import path, when the plugin is an importable module.
        plugin: the plugin object itself (a module, or any object with hook functions).
    """

    name: str
    module: str | None
    plugin: Any = field(compare=False, repr=False)

    def check_portable(self) -> None:
        """Check that a worker process can get this plugin (import it, or unpickle it).

        Raises:
            PluginError: naming the plugin and how to pass it instead.
        """
        how = (
            "give extra_plugins an importable module or an instance of a module-level class, "
            "install the plugin as an entry point, or use the inline executor"
        )
        if isinstance(self.plugin, types.ModuleType):
            if self.module is None or getattr(self.plugin, "__spec__", None) is None:
                raise PluginError(
                    f"plugin {self.name!r} is a module made in this process, which a worker "
                    f"process cannot import; {how}"
                )
            return
        try:
            pickle.dumps(self.plugin)
        except Exception as exc:  # pickling raises many types for unpicklable objects
            raise PluginError(
                f"plugin {self.name!r} was registered in this process as an object that cannot "
                f"be sent to a worker process ({type(exc).__name__}: {exc}); {how}"
            ) from exc

    def __reduce__(self) -> tuple[Any, ...]:
        # A module travels as its import path (see :meth:`load`), other plugins as objects.
        return (ExtraPlugin, (self.name, self.module, None if self.module else self.plugin))

    def load(self) -> Any:
        """The plugin object; a module that travelled as its path is imported here.

        Raises:
            PluginError: the module cannot be imported in this process.
        """
        if self.plugin is not None or self.module is None:
            return self.plugin
        try:
            return importlib.import_module(self.module)
        except Exception as exc:
            raise PluginError(
                f"plugin {self.name!r} (module {self.module}) cannot be imported in this "
                f"process: {type(exc).__name__}: {exc}"
            ) from exc


@dataclass(frozen=True)
class PluginSelection:
    """Which third-party plugins a manager loaded, so another process can load the same.

    Process-pool and Ray workers rebuild their registry from this (pickled) rather than
    from every installed entry point, so a run never sees a plugin its caller left out.

    Attributes:
        entry_points: the ``(entry-point name, distribution)`` pairs loaded, sorted.
        extras: the ``extra_plugins``, in registration order.
    """

    entry_points: tuple[tuple[str, str | None], ...] = ()
    extras: tuple[ExtraPlugin, ...] = ()

    def key(self) -> str:
        """A text naming every plugin of the selection (for caches keyed by plugin set)."""
        names = [f"{n} ({d})" for n, d in self.entry_points]
        return ", ".join(names + [extra.name for extra in self.extras])

    def check_portable(self) -> None:
        """Check that every extra plugin can be sent to another process.

        Raises:
            PluginError: naming the plugin and how to pass it instead.
        """
        for extra in self.extras:
            extra.check_portable()


class PluginManager(pluggy.PluginManager):
    """A pluggy manager that remembers the distribution and version of every plugin."""

    def __init__(self) -> None:
        super().__init__(hookspecs.PROJECT_NAME)
        self.sources: dict[str, PluginSource] = {}
        self.warnings: list[str] = []
        """Problems that do not stop the plugin from loading (the CLI prints them)."""
        self.selection: PluginSelection | None = None
        """The third-party plugins loaded (set by :func:`get_plugin_manager`)."""

    def register_plugin(self, plugin: object, source: PluginSource) -> None:
        """Register ``plugin`` under ``source.name``, turning pluggy errors into ours.

        Args:
            plugin: a module or object with ``@hookimpl`` functions.
            source: the plugin's provenance.

        Raises:
            PluginError: if the name is taken or a hook implementation is malformed.
        """
        if source.name in self.sources:
            raise PluginError(
                f"two plugins are named {source.name!r}: "
                f"{self.sources[source.name].describe()} and {source.describe()}. "
                "Entry-point names must be unique; uninstall or rename one of them."
            )
        try:
            self.register(plugin, name=source.name)
        except pluggy.PluginValidationError as exc:
            raise PluginError(f"plugin {source.describe()} is invalid: {exc}") from exc
        except ValueError as exc:
            raise PluginError(f"cannot register plugin {source.describe()}: {exc}") from exc
        self.sources[source.name] = source
        if not source.builtin and not self.get_hookcallers(plugin):
            self.warnings.append(_no_hooks_warning(plugin, source))

    def source_of(self, plugin_name: str) -> PluginSource:
        """Return the provenance recorded for a plugin name."""
        return self.sources[plugin_name]


def _no_hooks_warning(plugin: object, source: PluginSource) -> str:
    unmarked = [name for name in hook_names() if callable(getattr(plugin, name, None))]
    if unmarked:
        why = (
            f"its {', '.join(unmarked)} lack{'s' if len(unmarked) == 1 else ''} the @hookimpl "
            "decorator"
        )
    else:
        why = "it defines no hook function"
    return (
        f"plugin {source.describe()} registers nothing: {why}. Decorate each hook with "
        "@hookimpl (from fewtrans_board import hookimpl)."
    )


def hook_names() -> list[str]:
    """Return the names of all hooks defined in :mod:`fewtrans_board.api.hookspecs`."""
    return sorted(
        name
        for name in dir(hookspecs)
        if name.startswith("register_") and callable(getattr(hookspecs, name))
    )


def _check_unknown_hooks(pm: PluginManager) -> None:
    """Fail on implementations that match no hookspec (``register_model`` vs ``..._models``)."""
    known = hook_names()
    for hook_name in sorted(vars(pm.hook)):
        caller = getattr(pm.hook, hook_name)
        if not isinstance(caller, pluggy.HookCaller) or caller.spec is not None:
            continue
        for impl in caller.get_hookimpls():
            if impl.optionalhook:
                continue
            close = difflib.get_close_matches(hook_name, known, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise PluginError(
                f"plugin {pm.source_of(impl.plugin_name).describe()} implements "
                f"{hook_name!r}, which is not a fewtrans-board hook.{hint} "
                f"Known hooks: {', '.join(known)}."
            )
    pm.check_pending()


def parse_allow_list(value: str | None) -> frozenset[str] | None:
    """Parse the :data:`LOAD_PLUGINS_ENV` value.

    Args:
        value: the raw environment value, or ``None`` when unset.

    Returns:
        ``None`` to load everything, otherwise the set of allowed names (possibly empty).
    """
    if value is None:
        return None
    return frozenset(part.strip() for part in value.split(",") if part.strip())


def _iter_entry_points() -> Iterable[importlib.metadata.EntryPoint]:
    return sorted(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda ep: ep.name)


def _load_entry_point(pm: PluginManager, ep: importlib.metadata.EntryPoint) -> None:
    version = ep.dist.version if ep.dist is not None else None
    module = ep.value.partition(":")[0].strip()
    source = PluginSource(ep.name, _dist_name(ep), version, builtin=False, module=module)
    try:
        plugin = ep.load()
    except Exception as exc:
        raise PluginError(
            f"plugin {source.describe()} failed to import ({ep.value}): "
            f"{type(exc).__name__}: {exc}. Fix or uninstall it, or exclude it with "
            f"{LOAD_PLUGINS_ENV}=<comma-separated allowed plugins>."
        ) from exc
    pm.register_plugin(plugin, source)


def _dist_name(ep: importlib.metadata.EntryPoint) -> str | None:
    return ep.dist.metadata["Name"] if ep.dist is not None else None


def _new_manager(env: Mapping[str, str]) -> PluginManager:
    """A manager with the hookspecs and the built-in plugins."""
    pm = PluginManager()
    pm.add_hookspecs(hookspecs)
    if env.get(TRACE_PLUGINS_ENV, "") not in ("", "0"):
        pm.trace.root.setwriter(sys.stderr.write)
        pm.enable_tracing()
    for module_name in DEFAULT_PLUGINS:
        pm.register_plugin(
            importlib.import_module(module_name),
            PluginSource(module_name, DISTRIBUTION, __version__, builtin=True, module=module_name),
        )
    return pm


def _finish(
    pm: PluginManager, loaded: list[importlib.metadata.EntryPoint], extra_plugins: Mapping[str, Any]
) -> PluginManager:
    """Register the extra plugins, check every hook and record the selection."""
    extras = []
    for name, plugin in extra_plugins.items():
        module = plugin.__name__ if isinstance(plugin, types.ModuleType) else None
        pm.register_plugin(plugin, PluginSource(name, None, None, builtin=False, module=module))
        extras.append(ExtraPlugin(name, module, plugin))
    _check_unknown_hooks(pm)
    pm.selection = PluginSelection(
        tuple(sorted((ep.name, _dist_name(ep)) for ep in loaded)), tuple(extras)
    )
    return pm


def _load_selected(
    pm: PluginManager, chosen: Callable[[importlib.metadata.EntryPoint], bool]
) -> list[importlib.metadata.EntryPoint]:
    loaded = []
    for ep in _iter_entry_points():
        if chosen(ep):
            _load_entry_point(pm, ep)
            loaded.append(ep)
    return loaded


def get_plugin_manager(
    *,
    entry_points: bool = True,
    allow: Iterable[str] | None = None,
    extra_plugins: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> PluginManager:
    """Build a fresh plugin manager with built-ins, third-party plugins and checks applied.

    The manager's :attr:`~PluginManager.selection` records which plugins were loaded, so
    worker processes can load the same ones (:func:`plugin_manager_for`).

    Args:
        entry_points: load third-party plugins from the ``fewtrans_board`` entry-point group.
        allow: names (entry point or distribution) of third-party plugins to load; ``None``
            reads :data:`LOAD_PLUGINS_ENV` from ``environ`` (unset there means "all").
        extra_plugins: additional ``{name: plugin object}`` to register, e.g. in tests.
        environ: environment to read settings from; defaults to ``os.environ``.

    Returns:
        A manager whose hooks are all known (misspelled hooks raise).

    Raises:
        PluginError: a plugin failed to import, is registered twice or implements an
            unknown hook.
    """
    env = os.environ if environ is None else environ
    pm = _new_manager(env)
    loaded: list[importlib.metadata.EntryPoint] = []
    if entry_points:
        allowed = (
            frozenset(allow) if allow is not None else parse_allow_list(env.get(LOAD_PLUGINS_ENV))
        )
        loaded = _load_selected(
            pm, lambda ep: allowed is None or ep.name in allowed or _dist_name(ep) in allowed
        )
    return _finish(pm, loaded, extra_plugins or {})


def plugin_manager_for(
    selection: PluginSelection, environ: Mapping[str, str] | None = None
) -> PluginManager:
    """Build a manager with exactly the plugins of ``selection`` (in a worker process).

    Entry points are matched by name and distribution; the allow-list environment variable
    is not read, so a worker loads what its caller loaded, whatever its own environment.

    Args:
        selection: the caller's :attr:`PluginManager.selection`.
        environ: environment to read the tracing setting from; defaults to ``os.environ``.

    Raises:
        PluginError: a selected plugin is not installed here, fails to import, or is invalid.
    """
    pm = _new_manager(os.environ if environ is None else environ)
    wanted = set(selection.entry_points)
    loaded = _load_selected(pm, lambda ep: (ep.name, _dist_name(ep)) in wanted)
    missing = wanted - {(ep.name, _dist_name(ep)) for ep in loaded}
    if missing:
        name, dist = sorted(missing, key=str)[0]
        raise PluginError(
            f"plugin {name!r} ({dist or 'no distribution'}) is loaded by the caller but not "
            "installed where this worker runs; install the same plugins on every worker"
        )
    return _finish(pm, loaded, {extra.name: extra.load() for extra in selection.extras})
