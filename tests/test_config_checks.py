"""``AdapterConfig`` checks declared types and ranges whenever a config is built."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import pytest

from fewtrans_board.api.adapter import AdapterConfig, hparam
from fewtrans_board.core.errors import ConfigError
from fewtrans_board.registry.lookup import Registry
from fewtrans_board.registry.manager import get_plugin_manager


@dataclass(frozen=True)
class ToyConfig(AdapterConfig):
    lr: float = hparam(0.1, "Learning rate.", hpe="lr")
    epochs: int = hparam(5, "Passes.", hpe="epochs")
    rank: int = hparam(2, "Rank.", min=1, max=8)
    rate: float = hparam(0.5, "A fraction.", above=0, below=1)
    flag: bool = hparam(False, "A switch.")
    mode: str = hparam("a", "A word.")


@dataclass(frozen=True)
class OwnPostInitConfig(AdapterConfig):
    rank: int = hparam(2, "Rank.", min=1)
    seen: int = hparam(0, "Set by __post_init__.")

    def __post_init__(self) -> None:  # deliberately no super() call
        object.__setattr__(self, "seen", self.seen + 1)


BAD_VALUES = [
    ("rank", 0, "ToyConfig.rank: 0 is outside the valid range (in [1, 8])"),
    ("rank", 9, "ToyConfig.rank: 9 is outside the valid range (in [1, 8])"),
    ("rate", 0.0, "ToyConfig.rate: 0.0 is outside the valid range (in (0, 1))"),
    ("rate", 1.0, "ToyConfig.rate: 1.0 is outside the valid range (in (0, 1))"),
    ("lr", -1.0, "ToyConfig.lr: -1.0 is outside the valid range (> 0)"),
    ("lr", 0.0, "ToyConfig.lr: 0.0 is outside the valid range (> 0)"),
    ("epochs", 0, "ToyConfig.epochs: 0 is outside the valid range (>= 1)"),
    ("lr", math.nan, "ToyConfig.lr: nan is not a finite number"),
    ("lr", math.inf, "ToyConfig.lr: inf is not a finite number"),
    ("epochs", "3", "ToyConfig.epochs: expected int, got '3' (str)"),
    ("epochs", 1.5, "ToyConfig.epochs: expected int, got 1.5 (float)"),
    ("epochs", True, "ToyConfig.epochs: expected int, got True (bool)"),
    ("lr", True, "ToyConfig.lr: expected float, got True (bool)"),
    ("lr", "0.1", "ToyConfig.lr: expected float, got '0.1' (str)"),
    ("flag", 1, "ToyConfig.flag: expected bool, got 1 (int)"),
    ("mode", 3, "ToyConfig.mode: expected str, got 3 (int)"),
]


def build_with_constructor(changes: dict[str, Any]) -> AdapterConfig:
    return ToyConfig(**changes)


def build_with_replace(changes: dict[str, Any]) -> AdapterConfig:
    return ToyConfig().replace(**changes)


def build_with_dataclasses_replace(changes: dict[str, Any]) -> AdapterConfig:
    return dataclasses.replace(ToyConfig(), **changes)


def build_with_from_dict(changes: dict[str, Any]) -> AdapterConfig:
    return ToyConfig.from_dict(changes)


BUILDERS = [
    build_with_constructor,
    build_with_replace,
    build_with_dataclasses_replace,
    build_with_from_dict,
]


@pytest.mark.parametrize("build", BUILDERS, ids=lambda b: b.__name__)
@pytest.mark.parametrize(("field", "value", "message"), BAD_VALUES)
def test_bad_values_are_refused_with_one_message(build, field, value, message) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError) as caught:
        build({field: value})
    assert str(caught.value) == message


@pytest.mark.parametrize("build", BUILDERS, ids=lambda b: b.__name__)
@pytest.mark.parametrize(
    ("field", "value"),
    [("rank", 1), ("rank", 8), ("rate", 1e-9), ("rate", 0.999), ("epochs", 1), ("lr", 1e-12)],
)
def test_boundary_values_construct(build, field, value) -> None:  # type: ignore[no-untyped-def]
    assert getattr(build({field: value}), field) == value


def test_defaults_construct() -> None:
    config = ToyConfig()
    assert config.to_dict() == {
        "lr": 0.1,
        "epochs": 5,
        "rank": 2,
        "rate": 0.5,
        "flag": False,
        "mode": "a",
    }


@pytest.mark.parametrize("build", BUILDERS, ids=lambda b: b.__name__)
def test_an_int_for_a_float_field_is_stored_as_a_float(build) -> None:  # type: ignore[no-untyped-def]
    config = build({"lr": 1})
    assert type(config.lr) is float and config.lr == 1.0
    assert config.digest() == ToyConfig(lr=1.0).digest()


def test_from_dict_still_names_unknown_options() -> None:
    with pytest.raises(ConfigError, match=r"^ToyConfig: unknown option\(s\) nope; valid options"):
        ToyConfig.from_dict({"nope": 1})


def test_a_subclass_with_its_own_post_init_is_still_checked() -> None:
    with pytest.raises(ConfigError, match=r"^OwnPostInitConfig\.rank: 0 is outside"):
        OwnPostInitConfig(rank=0)
    config = OwnPostInitConfig()
    assert config.seen == 1  # its own __post_init__ still ran, once
    assert config.replace(rank=3).rank == 3


def registered_adapters() -> list[Any]:
    return list(Registry.from_plugin_manager(get_plugin_manager()).adapters)


def test_every_registered_adapter_default_config_constructs() -> None:
    entries = registered_adapters()
    assert len(entries) >= 40  # the built-ins (41 when written) are all there
    for entry in entries:
        config = entry.obj.Config()
        assert entry.obj.Config.from_dict(config.to_dict()) == config, entry.name


# Each value below was refused by a hand-written check in fit/plan/session that is now gone;
# construction refuses it instead. (name, field, value, expected message tail)
FORMERLY_HAND_CHECKED = [
    ("clip-lora", "rank", 0, "0 is outside the valid range (>= 1)"),
    ("clip-lora", "dropout", 1.0, "1.0 is outside the valid range (in [0, 1))"),
    ("clip-lora", "dropout", -0.1, "-0.1 is outside the valid range (in [0, 1))"),
    ("clip-adapter", "reduction", 0, "0 is outside the valid range (>= 1)"),
    ("clip-adapter", "ratio", 1.5, "1.5 is outside the valid range (in [0, 1])"),
    ("clip-adapter", "ratio", -0.1, "-0.1 is outside the valid range (in [0, 1])"),
    ("promptsrc", "n_ctx_text", -1, "-1 is outside the valid range (>= 0)"),
    ("promptsrc", "n_ctx_vision", -1, "-1 is outside the valid range (>= 0)"),
    ("promptsrc", "depth", 0, "0 is outside the valid range (>= 1)"),
    ("promptsrc", "gpa_std", 0.0, "0.0 is outside the valid range (> 0)"),
    ("ivlp", "n_ctx_text", -1, "-1 is outside the valid range (>= 0)"),
    ("ivlp", "n_ctx_vision", -1, "-1 is outside the valid range (>= 0)"),
    ("ivlp", "depth", 0, "0 is outside the valid range (>= 1)"),
    ("coop", "n_ctx", 0, "0 is outside the valid range (>= 1)"),
    ("kgcoop", "n_ctx", 0, "0 is outside the valid range (>= 1)"),
    ("cocoop", "n_ctx", 0, "0 is outside the valid range (>= 1)"),
    ("tcp", "n_ctx", 0, "0 is outside the valid range (>= 1)"),
    ("prograd", "n_ctx", 0, "0 is outside the valid range (>= 1)"),
    ("maple", "n_ctx", -1, "-1 is outside the valid range (>= 0)"),
    ("maple", "depth", 0, "0 is outside the valid range (>= 1)"),
    ("coprompt", "n_ctx", -1, "-1 is outside the valid range (>= 0)"),
    ("coprompt", "depth", 0, "0 is outside the valid range (>= 1)"),
    ("sep", "n_ctx_text", 0, "0 is outside the valid range (>= 1)"),
    ("sep", "n_ctx_vision", 0, "0 is outside the valid range (>= 1)"),
    ("sepres", "n_ctx_text", 0, "0 is outside the valid range (>= 1)"),
    ("sepres", "n_ctx_vision", 0, "0 is outside the valid range (>= 1)"),
    ("vpt-clip", "n_tokens", -1, "-1 is outside the valid range (>= 0)"),
    ("vpt-clip", "depth", -1, "-1 is outside the valid range (>= 0)"),
    ("vpt", "n_tokens", 0, "0 is outside the valid range (>= 1)"),
    ("vpt", "depth", -1, "-1 is outside the valid range (>= 0)"),
    ("lora", "rank", 0, "0 is outside the valid range (>= 1)"),
    ("finetune-last-k", "k", 0, "0 is outside the valid range (>= 1)"),
    # the CLIP recipe's check_training_config (lr >= 0, epochs >= 0, batch_size >= 1)
    ("coop", "lr", -1.0, "-1.0 is outside the valid range (> 0)"),
    ("coop", "epochs", -1, "-1 is outside the valid range (>= 1)"),
    ("coop", "batch_size", 0, "0 is outside the valid range (>= 1)"),
    ("taskres", "lr", -1.0, "-1.0 is outside the valid range (> 0)"),
    ("taskres", "epochs", -1, "-1 is outside the valid range (>= 1)"),
    ("taskres", "batch_size", 0, "0 is outside the valid range (>= 1)"),
]


@pytest.fixture(scope="module")
def adapters() -> dict[str, Any]:
    return {entry.name: entry.obj for entry in registered_adapters()}


@pytest.mark.parametrize(("name", "field", "value", "tail"), FORMERLY_HAND_CHECKED)
def test_formerly_hand_checked_values_are_still_refused(adapters, name, field, value, tail) -> None:  # type: ignore[no-untyped-def]
    config_class = adapters[name].Config
    expected = f"{config_class.__qualname__}.{field}: {tail}"
    with pytest.raises(ConfigError) as caught:
        config_class(**{field: value})
    assert str(caught.value) == expected
    with pytest.raises(ConfigError) as caught:
        config_class().replace(**{field: value})
    assert str(caught.value) == expected


def test_coop_refuses_zero_context_even_with_init_words(adapters) -> None:  # type: ignore[no-untyped-def]
    # The removed check let n_ctx=0 through when ctx_init was set; from_dict never did.
    config_class = adapters["coop"].Config
    with pytest.raises(ConfigError, match=r"n_ctx: 0 is outside the valid range \(>= 1\)"):
        config_class(n_ctx=0, ctx_init="a photo of a")
