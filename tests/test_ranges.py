"""Hyperparameter ranges: declared next to each hparam, implied by HPE roles, enforced by core."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from fewtrans_board import Adapter, AdapterConfig, hparam
from fewtrans_board.api.ranges import Range
from fewtrans_board.core.errors import ConfigError, RegistrationError
from fewtrans_board.hpe.protocols import get_hpe_protocol
from fewtrans_board.registry.lookup import Registry
from fewtrans_board.registry.manager import get_plugin_manager
from tests.conftest import adapter_plugin


class RangedAdapter(Adapter):
    """A third-party adapter declaring ranges (never fitted here)."""

    name = "ranged"
    description = "Declares ranges."
    trains = "a head"

    @dataclass(frozen=True)
    class Config(AdapterConfig):
        lr: float = hparam(0.1, "Learning rate.", hpe="lr")
        epochs: int = hparam(10, "Epochs.", hpe="epochs")
        dropout: float = hparam(0.1, "Dropout.", min=0, below=1)
        width: int = hparam(8, "Width.", min=1, max=64)
        free: float = hparam(-3.0, "Any finite number.")

    def fit(self, backbone, support, class_names, config):  # type: ignore[no-untyped-def]
        raise NotImplementedError


@pytest.fixture(scope="module")
def registry() -> Registry:
    pm = get_plugin_manager(
        entry_points=False, extra_plugins={"ranged": adapter_plugin(RangedAdapter)}
    )
    return Registry.from_plugin_manager(pm)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"lr": -0.2}, r"lr: -0\.2 is outside the valid range \(> 0\)"),
        ({"lr": 0.0}, r"lr: 0\.0 is outside the valid range \(> 0\)"),
        ({"epochs": 0}, r"epochs: 0 is outside the valid range \(>= 1\)"),
        ({"dropout": 1.0}, r"dropout: 1\.0 is outside the valid range \(in \[0, 1\)\)"),
        ({"width": 65}, r"width: 65 is outside the valid range \(in \[1, 64\]\)"),
        ({"free": math.nan}, r"free: nan is not a finite number"),
        ({"lr": math.inf}, r"lr: inf is not a finite number"),
    ],
)
def test_third_party_ranges_are_enforced(values: dict[str, float], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        RangedAdapter.Config.from_dict(values)


def test_values_inside_the_range_pass() -> None:
    config = RangedAdapter.Config.from_dict({"lr": 1e-9, "epochs": 1, "dropout": 0, "width": 64})
    assert (config.lr, config.epochs, config.dropout, config.width) == (1e-9, 1, 0.0, 64)


@pytest.mark.parametrize(
    ("adapter", "values"),
    [
        ("linear-probe", {"lr_head": -0.2}),
        ("linear-probe", {"epochs": 0}),
        ("finetune", {"lr_backbone": 0}),
        ("finetune", {"batch_size": 0}),
        ("clip-lora", {"dropout": 1.0}),
        ("coop", {"n_ctx": 0}),
        ("cosine-classifier", {"scale": -10.0}),
    ],
)
def test_builtin_adapters_refuse_values_outside_their_ranges(
    registry: Registry, adapter: str, values: dict[str, float]
) -> None:
    with pytest.raises(ConfigError, match="outside the valid range"):
        registry.adapters.get(adapter).obj.Config.from_dict(values)


def test_every_numeric_builtin_hyperparameter_has_a_range(registry: Registry) -> None:
    unbounded = [
        f"{entry.name}.{field.name}"
        for entry in registry.adapters
        for field in entry.obj.Config.fields_info()
        if entry.source.builtin and field.type in ("int", "float") and not field.range
    ]
    assert unbounded == []
    for entry in registry.adapters:
        for field in entry.obj.Config.fields_info():
            if field.hpe == "lr":
                assert field.range.get("above", -1) >= 0, (entry.name, field.name)
            if field.hpe == "epochs":
                assert field.range.get("min", 0) >= 1, (entry.name, field.name)


def test_options_listing_and_json_show_the_ranges(invoke) -> None:  # type: ignore[no-untyped-def]
    pm = get_plugin_manager(
        entry_points=False, extra_plugins={"ranged": adapter_plugin(RangedAdapter)}
    )
    text = invoke(["adapters", "list", "ranged", "--options"], pm=pm).output
    assert "    lr (float, default 0.1, > 0) [HPE lr]: Learning rate." in text
    assert "    dropout (float, default 0.1, in [0, 1)): Dropout." in text
    assert "    free (float, default -3.0): Any finite number." in text
    rows = json.loads(invoke(["adapters", "list", "ranged", "--json"], pm=pm).output)
    ranges = {o["name"]: o["range"] for o in rows[0]["options"]}
    assert ranges == {
        "lr": {"above": 0.0},
        "epochs": {"min": 1.0},
        "dropout": {"min": 0.0, "below": 1.0},
        "width": {"min": 1.0, "max": 64.0},
        "free": {},
    }


def test_the_recorded_schema_keeps_its_fields_without_ranges() -> None:
    # Verification compares the recorded schema with the installed one: ranges are shown,
    # not recorded, so entries evaluated before ranges existed still verify.
    fields = RangedAdapter.schema()["fields"]
    assert all(sorted(f) == ["default", "help", "hpe", "name", "type"] for f in fields)


@pytest.mark.parametrize(
    ("kind", "field", "message"),
    [
        (str, lambda: hparam("x", "Text.", min=0), "needs type int or float, not str"),
        (float, lambda: hparam(1.0, "Both.", min=0, above=0), "min .* or above .*, not both"),
        (float, lambda: hparam(1.0, "Empty.", min=2, max=1), r"range in \[2, 1\] holds no value"),
        (float, lambda: hparam(0.5, "Bad.", max=math.inf), "must be a finite number"),
        (float, lambda: hparam(-1.0, "Outside.", min=0), r"default -1\.0 is outside the valid"),
        (float, lambda: hparam(0.0, "LR at 0.", hpe="lr"), r"default 0\.0 is outside .*\(> 0\)"),
    ],
)
def test_malformed_ranges_are_refused_at_registration(
    kind: type, field: Callable[[], object], message: str
) -> None:
    config = dataclasses.make_dataclass(
        "Config", [("value", kind, field())], bases=(AdapterConfig,), frozen=True
    )
    adapter = type("Malformed", (RangedAdapter,), {"name": "malformed", "Config": config})
    with pytest.raises(RegistrationError, match=message):
        adapter.check_class()


def test_a_grid_leaving_a_declared_range_names_protocol_and_centre() -> None:
    class Capped(RangedAdapter):
        name = "capped"

        @dataclass(frozen=True)
        class Config(AdapterConfig):
            lr: float = hparam(0.5, "Learning rate.", hpe="lr", max=1)
            epochs: int = hparam(10, "Epochs.", hpe="epochs")

    centre = Capped.Config()
    with pytest.raises(ConfigError, match=r"fewtrans-paper grid around the centre .* leaves"):
        get_hpe_protocol("fewtrans-paper").grid(Capped, centre)


def test_range_text_and_intersection() -> None:
    assert Range.of({"above": 0}).text() == "> 0"
    assert Range.of({"min": 0, "below": 1}).text() == "in [0, 1)"
    assert Range.of({"max": 5}).text() == "<= 5"
    assert Range(0.0).intersect(Range(0.0, low_open=True)).text() == "> 0"
    assert Range(2.0).intersect(Range(0.0, low_open=True)).text() == ">= 2"
    assert not Range.of({"above": 0}).contains(0.0) and Range.of({"min": 0}).contains(0.0)
