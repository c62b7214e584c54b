"""timm models without a download: explicit random init, and a fast failure offline."""

from __future__ import annotations

from pathlib import Path

import pytest

from fewtrans_board.core.errors import FewtransError
from fewtrans_board.models import hub
from fewtrans_board.registry.lookup import Registry


def test_random_init_timm_model_is_seeded_and_leaves_the_global_rng_alone(
    registry: Registry,
) -> None:
    import torch

    torch.manual_seed(123)
    expected_next = torch.rand(1)
    torch.manual_seed(123)
    first = registry.model("timm:resnet10t.random").obj.load()
    assert torch.equal(torch.rand(1), expected_next)
    second = registry.model("timm:resnet10t.random").obj.load()
    assert first.weights_id == second.weights_id and first.weights_id.startswith("random-init:")
    assert first.info["weights"] == "random-init (torch seed 0)"
    pixels = torch.randn(2, 3, 32, 32)
    assert torch.equal(first.embed(pixels), second.embed(pixels))
    assert first.name == "timm:resnet10t.random"


def test_random_init_and_weights_together_are_refused(registry: Registry, tmp_path: Path) -> None:
    weights = tmp_path / "w.safetensors"
    weights.write_bytes(b"")
    with pytest.raises(FewtransError, match=r"random-init \('\.random'\) and with --weights"):
        registry.model("timm:resnet10t.random").obj.load(weights=weights)


def test_an_unreachable_hub_fails_at_once_from_the_cache_only(
    registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    from huggingface_hub import constants

    monkeypatch.setattr(hub, "hub_reachable", lambda timeout=hub.PROBE_TIMEOUT: False)
    seen: list[bool] = []
    import timm

    real = timm.create_model

    def create(*args: object, **kwargs: object) -> object:
        seen.append(constants.HF_HUB_OFFLINE)  # the download runs in offline mode
        return real(*args, **kwargs)

    monkeypatch.setattr(timm, "create_model", create)
    with pytest.raises(FewtransError) as info:
        registry.model("timm:resnet10t.c3_in1k").obj.load()
    assert seen == [True] and constants.HF_HUB_OFFLINE is False
    message = str(info.value)
    assert "is unreachable and the weights are not in the local cache" in message
    assert "--weights FILE" in message and "timm:resnet10t.random" in message


def test_the_probe_answers_quickly_for_a_closed_port(monkeypatch: pytest.MonkeyPatch) -> None:
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")  # discard port: closed
    assert hub.hub_reachable(timeout=1.0) is False
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with hub.hub_access() as online:
        assert online is False and constants.HF_HUB_OFFLINE is True
    assert constants.HF_HUB_OFFLINE is True
