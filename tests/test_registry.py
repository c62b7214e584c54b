"""Registry: name rules, duplicates, listing, suggestions, provenance."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from fewtrans_board import ModelSpec, hookimpl
from fewtrans_board.core.errors import DuplicateNameError, RegistrationError, UnknownNameError
from fewtrans_board.registry.lookup import Registry, validate_name
from fewtrans_board.registry.manager import get_plugin_manager
from tests.conftest import CentroidAdapter, adapter_plugin, renamed


def registry_with(**plugins: object) -> Registry:
    return Registry.from_plugin_manager(
        get_plugin_manager(entry_points=False, extra_plugins=plugins)
    )


@pytest.mark.parametrize(
    ("kind", "name"),
    [
        ("adapter", "linear-probe"),
        ("adapter", "coop"),
        ("adapter", "fine_tune_last2"),
        ("dataset", "bscd-eurosat"),
        ("model", "vit-b16.openai"),
        ("model", "resnet10t.c3_in1k"),
    ],
)
def test_valid_names(kind: str, name: str) -> None:
    assert validate_name(kind, name) == name


@pytest.mark.parametrize(
    ("kind", "name"),
    [
        ("adapter", "LinearProbe"),
        ("adapter", "lin--probe"),
        ("adapter", "-probe"),
        ("adapter", "probe."),
        ("adapter", "a.b"),
        ("dataset", "1dataset"),
        ("dataset", "data set"),
        ("dataset", "../etc"),
        ("model", "ViT-B-16"),
        ("model", "vit..b"),
        ("model", ""),
        ("adapter", "x" * 81),
    ],
)
def test_invalid_names(kind: str, name: str) -> None:
    with pytest.raises(RegistrationError, match="invalid"):
        validate_name(kind, name)


def test_duplicate_adapter_names_both_plugins() -> None:
    with pytest.raises(DuplicateNameError) as info:
        registry_with(first=adapter_plugin(CentroidAdapter), second=adapter_plugin(CentroidAdapter))
    message = str(info.value)
    assert "'test-centroid'" in message and "'first'" in message and "'second'" in message


def test_bad_adapter_name_names_plugin() -> None:
    with pytest.raises(RegistrationError, match=r"plugin 'bad'.*invalid adapter name 'Bad'"):
        registry_with(bad=adapter_plugin(renamed(CentroidAdapter, "Bad")))


def test_registering_wrong_type_is_refused() -> None:
    class Plugin:
        @hookimpl
        def register_adapters(self, register: Callable[[object], None]) -> None:
            register(CentroidAdapter())  # an instance, not the class

    with pytest.raises(RegistrationError, match="the class itself"):
        registry_with(wrong=Plugin())


def test_adapter_without_help_is_refused() -> None:
    from dataclasses import dataclass, field

    from fewtrans_board import AdapterConfig

    class NoHelp(CentroidAdapter):
        name = "no-help"

        @dataclass(frozen=True)
        class Config(AdapterConfig):
            scale: float = field(default=1.0)

    with pytest.raises(RegistrationError, match="'scale' has no help"):
        registry_with(nohelp=adapter_plugin(NoHelp))


def test_listing_is_fnmatch_and_natural_sorted() -> None:
    names = ["ft-last10", "ft-last2", "ft-last1", "probe"]
    registry = registry_with(many=adapter_plugin(*(renamed(CentroidAdapter, n) for n in names)))
    assert [e.name for e in registry.adapters.list("ft-*")] == ["ft-last1", "ft-last2", "ft-last10"]
    assert [e.name for e in registry.adapters.list("probe")] == ["probe"]
    assert "probe" in registry.adapters and "nothing" not in registry.adapters


def test_unknown_name_suggests_close_matches() -> None:
    from fewtrans_board.registry.lookup import Catalog
    from fewtrans_board.registry.manager import PluginSource

    catalog: Catalog[object] = Catalog("adapter")
    source = PluginSource("mine", None, None, builtin=False)
    for name in ("test-centroid", "linear-probe", "finetune"):
        catalog.add(name, object(), source)
    with pytest.raises(UnknownNameError) as info:
        catalog.get("test-centriod")
    assert info.value.suggestions == ["test-centroid"]
    assert "Did you mean 'test-centroid'?" in str(info.value)
    assert catalog.suggest("probe") == ["linear-probe"]  # substring matches count too
    with pytest.raises(UnknownNameError) as info:
        catalog.get("zzz")
    assert info.value.suggestions == [] and "Did you mean" not in str(info.value)


def test_entries_carry_provenance() -> None:
    registry = registry_with(mine=adapter_plugin(CentroidAdapter))
    entry = registry.adapters.get("test-centroid")
    assert entry.provenance() == {"plugin": "mine", "distribution": None, "version": None}


def test_model_spec_load_checks_return_type() -> None:
    from fewtrans_board.core.errors import ContractError

    spec = ModelSpec(
        name="broken.none",
        loader=lambda w, d: "not a backbone",
        family="x",  # type: ignore[arg-type,return-value]
        architecture="x",
        source="x",
    )
    with pytest.raises(ContractError, match=r"expected fewtrans_board\.Backbone"):
        spec.load()
