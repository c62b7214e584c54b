"""The registry of datasets, models and adapters contributed by plugins.

Built from a plugin manager by calling each ``register_*`` implementation with a
``register`` callback bound to that plugin, so every entry records which plugin,
distribution and version provided it. Names are validated strictly; a duplicate name is a
hard error naming both plugins; nothing is ever silently overwritten.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from fewtrans_board.api.adapter import Adapter
from fewtrans_board.api.dataset_spec import DatasetSpec
from fewtrans_board.api.model_spec import ModelRegistry, ModelSpec
from fewtrans_board.core.errors import (
    DuplicateNameError,
    FewtransError,
    PluginError,
    RegistrationError,
    UnknownNameError,
    close_names,
    natural_key,
)
from fewtrans_board.registry.manager import PluginManager, PluginSelection, PluginSource

if TYPE_CHECKING:
    from fewtrans_board.api.backbone import Backbone

T = TypeVar("T")

NAME_PATTERNS: dict[str, re.Pattern[str]] = {
    "dataset": re.compile(r"^[a-z][a-z0-9]*(?:[-_][a-z0-9]+)*$"),
    "adapter": re.compile(r"^[a-z][a-z0-9]*(?:[-_][a-z0-9]+)*$"),
    # Models follow timm's ``arch.tag`` convention, so dots are allowed.
    "model": re.compile(r"^[a-z0-9][a-z0-9]*(?:[-_.][a-z0-9]+)*$"),
}
_SLUG_RULE = "lowercase letters and digits, separated by single '-' or '_', starting with a letter"
NAME_RULES: dict[str, str] = {
    "dataset": _SLUG_RULE,
    "adapter": _SLUG_RULE,
    "model": "lowercase letters and digits, separated by single '-', '_' or '.' (arch.tag)",
}
MAX_NAME_LENGTH = 80


def validate_name(kind: str, name: object) -> str:
    """Check a registered name against the rules for its kind.

    Args:
        kind: ``"dataset"``, ``"model"`` or ``"adapter"``.
        name: the candidate name.

    Returns:
        The name, unchanged.

    Raises:
        RegistrationError: if the name breaks the rules.
    """
    if not isinstance(name, str) or not NAME_PATTERNS[kind].match(name):
        raise RegistrationError(f"invalid {kind} name {name!r}: use {NAME_RULES[kind]}")
    if len(name) > MAX_NAME_LENGTH:
        raise RegistrationError(
            f"invalid {kind} name {name!r}: longer than {MAX_NAME_LENGTH} characters"
        )
    return name


@dataclass(frozen=True)
class Registered(Generic[T]):
    """A registered object together with its provenance.

    Attributes:
        kind: ``"dataset"``, ``"model"`` or ``"adapter"``.
        name: the registered name.
        obj: the spec (dataset, model) or class (adapter).
        source: the plugin that registered it.
    """

    kind: str
    name: str
    obj: T
    source: PluginSource

    @property
    def plugin(self) -> str:
        """Name of the plugin that registered this entry."""
        return self.source.name

    @property
    def distribution(self) -> str | None:
        """Distribution providing the plugin, if installed from one."""
        return self.source.distribution

    @property
    def version(self) -> str | None:
        """Version of that distribution."""
        return self.source.version

    def provenance(self) -> dict[str, str | None]:
        """Return the provenance fields stored next to every result."""
        return {"plugin": self.plugin, "distribution": self.distribution, "version": self.version}


class Catalog(Generic[T]):
    """Registered objects of one kind, with strict lookup and pattern listing."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, Registered[T]] = {}

    def add(self, name: str, obj: T, source: PluginSource) -> Registered[T]:
        """Add an entry; refuse an existing name.

        Raises:
            DuplicateNameError: naming both plugins.
        """
        validate_name(self.kind, name)
        if name in self._entries:
            first = self._entries[name].source
            raise DuplicateNameError(
                f"{self.kind} {name!r} is registered twice: by plugin {first.describe()} "
                f"and by plugin {source.describe()}. Names must be unique; rename one of "
                "them or uninstall one distribution."
            )
        entry = Registered(self.kind, name, obj, source)
        self._entries[name] = entry
        return entry

    def get(self, name: str) -> Registered[T]:
        """Return the entry called ``name``.

        Raises:
            UnknownNameError: with close matches as suggestions.
        """
        try:
            return self._entries[name]
        except KeyError:
            raise UnknownNameError(self.kind, name, self.suggest(name)) from None

    def suggest(self, name: str) -> list[str]:
        """Return up to three registered names close to ``name``."""
        return close_names(name, self._entries)

    def list(self, pattern: str = "*") -> list[Registered[T]]:
        """Return entries whose name matches the fnmatch ``pattern``, naturally sorted."""
        hits = [e for n, e in self._entries.items() if fnmatch.fnmatchcase(n, pattern)]
        return sorted(hits, key=lambda e: natural_key(e.name))

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[Registered[T]]:
        return iter(self.list())

    def __len__(self) -> int:
        return len(self._entries)


def _check_dataset(obj: object) -> str:
    if not isinstance(obj, DatasetSpec):
        raise RegistrationError(f"register_datasets expects a DatasetSpec, got {obj!r}")
    return obj.name


def _check_model(obj: object) -> str:
    if not isinstance(obj, ModelSpec):
        raise RegistrationError(f"register_models expects a ModelSpec, got {obj!r}")
    return obj.name


def _check_adapter(obj: object) -> str:
    if not (isinstance(obj, type) and issubclass(obj, Adapter)):
        raise RegistrationError(
            f"register_adapters expects an Adapter subclass (the class itself), got {obj!r}"
        )
    obj.check_class()
    return obj.name


def resolve_model(catalog: Catalog[ModelSpec], name: str) -> Registered[ModelSpec]:
    """Look up a model, resolving ``FAMILY:ARGUMENT`` and ``MODEL+unlearn:DATASET`` names.

    Raises:
        UnknownNameError: the model or family is not registered.
        FewtransError: the family takes no argument, or the argument is malformed.
    """
    from fewtrans_board.models.unlearned_names import split_name, unlearned_spec

    base, forget = split_name(name)
    if forget is not None:
        entry = resolve_model(catalog, base)
        return Registered(entry.kind, name, unlearned_spec(entry.obj, name, forget), entry.source)
    family, sep, argument = name.partition(":")
    if not sep:
        return catalog.get(name)
    entry = catalog.get(family)
    return Registered(entry.kind, name, entry.obj.variant(argument), entry.source)


class Registry:
    """All datasets, models and adapters registered by the installed plugins.

    Attributes:
        datasets: the dataset catalog.
        models: the model catalog.
        adapters: the adapter catalog (entries hold classes).
        plugins: the third-party plugins it was built from (``None`` for a registry not
            built from a plugin manager); worker processes load the same ones.
    """

    def __init__(self) -> None:
        self.datasets: Catalog[DatasetSpec] = Catalog("dataset")
        self.models: Catalog[ModelSpec] = Catalog("model")
        self.adapters: Catalog[type[Adapter]] = Catalog("adapter")
        self.plugins: PluginSelection | None = None

    def model(self, name: str) -> Registered[ModelSpec]:
        """Look up a model by name, including ``FAMILY:ARGUMENT`` forms."""
        return resolve_model(self.models, name)

    def load_model(
        self, name: str, weights: Path | str | None = None, device: str = "cpu"
    ) -> Backbone:
        """Resolve ``name`` and load it, handing this registry to a loader that asks for it.

        A ``library:A+B`` or ``meta-trained`` model names further models; its loader gets
        this registry (``ModelSpec.load(..., registry=self)``), so they come from exactly
        the plugins the caller selected: an allow-list's excluded plugin stays unloaded and
        an in-process plugin's models stay reachable.

        Args:
            name: a model name, including ``FAMILY:ARGUMENT`` forms.
            weights: local checkpoint to use instead of the pinned source.
            device: torch device string.

        Returns:
            The loaded backbone.
        """
        return self.model(name).obj.load(weights, device, registry=self)

    @classmethod
    def from_plugin_manager(cls, pm: PluginManager) -> Registry:
        """Collect every ``register_*`` hook implementation into a new registry.

        Args:
            pm: a manager from :func:`fewtrans_board.registry.manager.get_plugin_manager`.

        Returns:
            The populated registry.

        Raises:
            RegistrationError: an object is invalid; the message names the plugin.
            DuplicateNameError: two plugins used one name; the message names both.
            PluginError: a plugin's hook raised; the message names the plugin.
        """
        registry = cls()
        registry.plugins = pm.selection
        hooks: list[tuple[str, Catalog[Any], Callable[[object], str]]] = [
            ("register_datasets", registry.datasets, _check_dataset),
            ("register_models", registry.models, _check_model),
            ("register_adapters", registry.adapters, _check_adapter),
        ]
        for hook_name, catalog, check in hooks:
            caller = getattr(pm.hook, hook_name)
            # get_hookimpls() lists implementations in plugin registration order.
            for impl in caller.get_hookimpls():
                source = pm.source_of(impl.plugin_name)

                def register(
                    obj: object,
                    _source: PluginSource = source,
                    _catalog: Catalog[Any] = catalog,
                    _check: Callable[[object], str] = check,
                ) -> None:
                    try:
                        name = _check(obj)
                        _catalog.add(name, obj, _source)
                    except DuplicateNameError:
                        raise
                    except RegistrationError as exc:
                        raise RegistrationError(f"plugin {_source.describe()}: {exc}") from exc

                # A caller restricted to this one plugin keeps pluggy's argument handling
                # and tracing while attributing every registration to its plugin.
                others = [p for p in pm.get_plugins() if p is not impl.plugin]
                try:
                    pm.subset_hook_caller(hook_name, remove_plugins=others)(register=register)
                except FewtransError:
                    raise
                except Exception as exc:
                    raise PluginError(
                        f"plugin {source.describe()} raised {type(exc).__name__} in "
                        f"{hook_name}: {exc}"
                    ) from exc
        return registry


def registry_or_installed(registry: ModelRegistry | None) -> ModelRegistry:
    """``registry``, or (for a bare ``ModelSpec.load`` without one) the installed plugins'.

    The fresh registry honours ``FEWTRANS_BOARD_LOAD_PLUGINS``, as every CLI command does.
    """
    if registry is not None:
        return registry
    from fewtrans_board.registry.manager import get_plugin_manager

    return Registry.from_plugin_manager(get_plugin_manager())
