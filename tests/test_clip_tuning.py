"""CLIP tuning adapters: contract, gradient masks, zero-init equivalences, unfuse, runner."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fewtrans_board import hookimpl
from fewtrans_board.api.adapter import Adapter
from fewtrans_board.api.model_spec import ModelSpec
from fewtrans_board.blocks.unfuse import (
    SplitMultiheadAttention as UnfusedMultiheadAttention,
)
from fewtrans_board.blocks.unfuse import (
    unfuse_attention,
)
from fewtrans_board.core.errors import FewtransError
from fewtrans_board.methods.adapters.clip_tuning import (
    ADAPTERS,
    ClipAdapterAdapter,
    ClipLoraAdapter,
    FinetuneClipAdapter,
    FinetuneClipTextAdapter,
    FinetuneClipVisualAdapter,
    TaskResAdapter,
)
from fewtrans_board.methods.adapters.clip_tuning.finetune_clip import tower_of
from fewtrans_board.testing import check_adapter, check_import_is_light, tiny_clip_backbone
from fewtrans_board.testing.tiny import toy_episode

ROOT = Path(__file__).resolve().parents[1]
DIGITS = ROOT / "leaderboard" / "manifests" / "fewtrans-varied--digits.parquet"
NOVEL = ["zebra", "violin"]
IDS = [a.name for a in ADAPTERS]


@pytest.fixture(scope="module")
def backbone():  # type: ignore[no-untyped-def]
    return tiny_clip_backbone(seed=0)


@pytest.fixture(scope="module")
def episode():  # type: ignore[no-untyped-def]
    return toy_episode(shots=(1, 2, 3), n_query_per_class=2, image_size=32, seed=0)


def fast(adapter: type[Adapter], **changes: object):  # type: ignore[no-untyped-def]
    values = {"epochs": 2, **changes}
    return adapter.Config.from_dict(values)


def zero_shot_oracle(backbone, query_pixels: torch.Tensor, names: list[str]) -> torch.Tensor:  # type: ignore[no-untyped-def]
    """Zero-shot logits from open_clip's own classifier builder (independent of our code)."""
    import open_clip

    model = backbone.text.model
    weights = open_clip.build_zero_shot_classifier(
        model,
        tokenizer=backbone.text.tokenizer,
        classnames=names,
        templates=["a photo of a {}."],
        device="cpu",
        use_tqdm=False,
    )
    with torch.no_grad():
        images = model.encode_image(query_pixels, normalize=True)
    return backbone.text.logit_scale * images @ weights


def snapshot(params: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in params.items()}


# --- contract and predict_names ------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("adapter", ADAPTERS, ids=IDS)
def test_contract_and_predict_names(adapter, backbone, episode) -> None:  # type: ignore[no-untyped-def]
    config = fast(adapter)
    report = check_adapter(adapter, backbone=backbone, config=config)
    assert "backbone untouched" in report.passed and adapter.needs_text
    predictor = adapter().fit(backbone, episode.support, episode.class_names, config)
    novel = predictor.predict_names(episode.query, NOVEL)
    assert novel.shape == (len(episode.query), 2) and torch.isfinite(novel).all()
    both = predictor.predict_names(episode.query, [*episode.class_names, *NOVEL])
    assert torch.allclose(both[:, :3], predictor.predict(episode.query), atol=1e-5)
    fields = {f.name: f.hpe for f in adapter.Config.fields_info()}
    assert fields["lr"] == "lr" and fields["epochs"] == "epochs" and "batch_size" in fields


@pytest.mark.slow
def test_defaults_and_import_is_light() -> None:
    assert (TaskResAdapter.Config().lr, TaskResAdapter.Config().epochs) == (2e-4, 20)
    assert TaskResAdapter.Config().alpha == 0.5 and ClipAdapterAdapter.Config().ratio == 0.2
    lora = ClipLoraAdapter.Config()
    assert (lora.rank, lora.alpha, lora.dropout, lora.lr) == (2, 1.0, 0.25, 2e-4)
    for ft in (FinetuneClipVisualAdapter, FinetuneClipTextAdapter, FinetuneClipAdapter):
        assert (ft.Config().lr, ft.Config().epochs, ft.Config().batch_size) == (1e-5, 20, 32)
    frozen = {a.name for a in ADAPTERS if a.frozen_backbone}
    assert frozen == {"taskres", "clip-adapter", "finetune-clip-text"}
    check_import_is_light("fewtrans_board.methods.adapters.clip_tuning")


# --- exactly the intended parameters receive gradients ---------------------------------------


def expected_trainable(adapter: type[Adapter], state, backbone) -> set[str]:  # type: ignore[no-untyped-def]
    if adapter is TaskResAdapter:
        assert len(state.trainable) == 1 and state.trainable[0].shape == (3, backbone.feature_dim)
        return {"residual"}  # held by a module so batched training can swap it
    (owned,) = state.owned
    names = dict(owned.named_parameters())
    if adapter is ClipAdapterAdapter:
        assert [tuple(p.shape) for p in state.trainable] == [(8, 32), (32, 8)]
        return set(names)
    if adapter is ClipLoraAdapter:
        lora = {n for n in names if ".lora_A." in n or ".lora_B." in n}
        # A and B of q, k, v in 2 vision + 2 text blocks; nothing else.
        assert len(lora) == 2 * 3 * 4
        for n in lora:
            assert n.split(".attn.")[1].split(".")[0] in ("q_proj", "k_proj", "v_proj")
        assert sum(n.startswith("visual.") for n in lora) == 12
        return lora
    towers = adapter.towers  # type: ignore[attr-defined]
    chosen = {n for n in names if tower_of(n) in towers}
    if "text" in towers:
        assert "token_embedding.weight" in chosen and "positional_embedding" in chosen
    assert "logit_scale" not in chosen
    return chosen


@pytest.mark.parametrize("adapter", ADAPTERS, ids=IDS)
def test_only_intended_parameters_get_gradients(adapter, backbone, episode) -> None:  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    state = adapter().build(backbone, episode.support, episode.class_names, fast(adapter))
    loss = state.loss_of(np.arange(len(episode.support)))
    loss.backward()
    trainable_ids = {id(p) for p in state.trainable}
    assert all(p.grad is not None for p in state.trainable)
    names = expected_trainable(adapter, state, backbone)
    for module in state.owned:
        for name, p in module.named_parameters():
            assert (id(p) in trainable_ids) == (name in names), name
            if id(p) not in trainable_ids:
                assert p.grad is None, f"frozen {name} got a gradient"
    caller = backbone.text.model
    assert all(p.grad is None for p in caller.parameters())
    if adapter is ClipLoraAdapter:
        b_grads = [p.grad for n, p in state.owned[0].named_parameters() if ".lora_B." in n]
        assert all(float(g.abs().sum()) > 0 for g in b_grads)


@pytest.mark.parametrize(
    ("adapter", "changes"),
    [
        (FinetuneClipVisualAdapter, {"visual"}),
        (FinetuneClipTextAdapter, {"text"}),
        (FinetuneClipAdapter, {"visual", "text"}),
    ],
    ids=["visual", "text", "both"],
)
def test_finetune_changes_only_its_towers(adapter, changes, backbone, episode) -> None:  # type: ignore[no-untyped-def]
    source = backbone.text.model
    before = snapshot(dict(source.named_parameters()))
    config = fast(adapter, lr=1e-3)
    predictor = adapter().fit(backbone, episode.support, episode.class_names, config)
    after = dict(predictor.parts["model"].named_parameters())
    changed = {tower_of(n) for n, p in after.items() if not torch.equal(p, before[n])}
    assert changed == changes
    assert all(torch.equal(p, before[n]) for n, p in source.named_parameters())
    tokens = backbone.text.tokenize([f"a photo of a {n}." for n in NOVEL])
    with torch.no_grad():
        frozen_text = F.normalize(backbone.text.encode(tokens), dim=-1)
        text = F.normalize(predictor.text_features(NOVEL), dim=-1)
    # A frozen text tower keeps the handcrafted classifier; a trained one moves it.
    assert torch.allclose(text, frozen_text, atol=1e-6) == ("text" not in changes)


# --- zero-initialised modules reproduce the base model ----------------------------------------


def test_taskres_zero_residual_equals_open_clip_zero_shot(backbone, episode) -> None:  # type: ignore[no-untyped-def]
    names = episode.class_names
    oracle = zero_shot_oracle(backbone, episode.query.pixels, names)
    # Zero epochs is outside the valid range (epochs >= 1), which construction refuses; set
    # past the check on purpose to test the untrained residual.
    untrained_config = copy.copy(fast(TaskResAdapter))
    object.__setattr__(untrained_config, "epochs", 0)
    untrained = TaskResAdapter().fit(backbone, episode.support, names, untrained_config)
    assert torch.allclose(untrained.predict(episode.query), oracle, atol=1e-5)
    trained = TaskResAdapter().fit(
        backbone, episode.support, names, fast(TaskResAdapter, epochs=3, lr=1e-2)
    )
    assert trained.parts["residual"].abs().sum() > 0
    assert not torch.allclose(trained.predict(episode.query), oracle, atol=1e-3)
    # Unseen names have no residual: plain zero-shot logits.
    novel_oracle = zero_shot_oracle(backbone, episode.query.pixels, NOVEL)
    assert torch.allclose(trained.predict_names(episode.query, NOVEL), novel_oracle, atol=1e-5)


def test_taskres_adds_the_residual_to_the_raw_text_features(backbone, episode) -> None:  # type: ignore[no-untyped-def]
    names, alpha = episode.class_names, 0.7
    state = TaskResAdapter().build(
        backbone, episode.support, names, fast(TaskResAdapter, alpha=alpha)
    )
    (residual,) = state.trainable
    with torch.no_grad():
        residual.copy_(torch.randn(residual.shape, generator=torch.Generator().manual_seed(0)))
    model, scale = backbone.text.model, backbone.text.logit_scale
    with torch.no_grad():
        raw = model.encode_text(backbone.text.tokenize([f"a photo of a {n}." for n in names]))
        classifier = F.normalize(raw + alpha * residual, dim=-1)
        query = model.encode_image(episode.query.pixels, normalize=True)
        support = model.encode_image(episode.support.images.pixels, normalize=True)
    assert (raw.norm(dim=-1) - 1).abs().min() > 0.5  # the base is not normalised
    expected = scale * query @ classifier.t()
    assert torch.allclose(state.predictor().predict(episode.query), expected, atol=1e-4)
    batch = np.array([0, 2, 5])
    ce = F.cross_entropy(scale * support[batch] @ classifier.t(), episode.support.labels[batch])
    with torch.no_grad():
        assert torch.allclose(state.loss_of(batch), ce, atol=1e-5)


def test_clip_adapter_mixes_adapted_and_frozen_image_features(backbone, episode) -> None:  # type: ignore[no-untyped-def]
    names, scale = episode.class_names, backbone.text.logit_scale
    oracle = zero_shot_oracle(backbone, episode.query.pixels, names)
    torch.manual_seed(0)
    config = fast(ClipAdapterAdapter, ratio=0.0, lr=1e-2)
    untouched = ClipAdapterAdapter().fit(backbone, episode.support, names, config)
    assert torch.allclose(untouched.predict(episode.query), oracle, atol=1e-5)
    ratio = 0.6
    torch.manual_seed(0)
    state = ClipAdapterAdapter().build(
        backbone, episode.support, names, fast(ClipAdapterAdapter, ratio=ratio)
    )
    (adapter,) = state.owned
    model = backbone.text.model
    tokens = backbone.text.tokenize([f"a photo of a {n}." for n in names])
    with torch.no_grad():
        text = F.normalize(model.encode_text(tokens), dim=-1)

        def expected_logits(pixels: torch.Tensor) -> torch.Tensor:
            image = model.encode_image(pixels)
            mixed = ratio * adapter(image) + (1 - ratio) * image
            return scale * F.normalize(mixed, dim=-1) @ text.t()

        query_logits = expected_logits(episode.query.pixels)
        support_logits = expected_logits(episode.support.images.pixels)
        batch = np.arange(len(episode.support))
        loss = state.loss_of(batch)
    got = state.predictor().predict(episode.query)
    assert torch.allclose(got, query_logits, atol=1e-4)
    assert not torch.allclose(got, oracle, atol=1e-2)
    assert torch.allclose(loss, F.cross_entropy(support_logits, episode.support.labels), atol=1e-5)


def tiny_resnet_clip_backbone():  # type: ignore[no-untyped-def]
    """A tiny random-init open_clip CLIP whose image tower is a ``ModifiedResNet``."""
    import open_clip

    from fewtrans_board.models.open_clip_family import backbone_from_open_clip
    from fewtrans_board.testing.tiny import register_tiny_clip_config

    name = register_tiny_clip_config()
    vision = {"layers": (1, 1, 1, 1), "width": 8, "image_size": 32, "head_width": 16}
    torch.manual_seed(0)
    model = open_clip.model.CLIP(32, vision, open_clip.get_model_config(name)["text_cfg"])
    return backbone_from_open_clip(
        model.eval(),
        open_clip.get_tokenizer(name),
        name="tiny-rn-clip.random",
        weights_id="tiny-rn-clip-seed0",
        architecture="tiny-RN",
    )


def test_clip_lora_refuses_resnet_image_towers(episode) -> None:  # type: ignore[no-untyped-def]
    resnet = tiny_resnet_clip_backbone()
    assert type(resnet.image_encoder).__name__ == "ModifiedResNet"
    message = r"clip-lora .* ViT .*tiny-rn-clip\.random has a ModifiedResNet image tower.*ViT-B-16"
    config = fast(ClipLoraAdapter)
    with pytest.raises(FewtransError, match=message):
        ClipLoraAdapter().fit(resnet, episode.support, episode.class_names, config)
    with pytest.raises(FewtransError, match=message):
        ClipLoraAdapter().build(resnet, episode.support, episode.class_names, config)
    # The suggested alternatives run on it.
    predictor = TaskResAdapter().fit(
        resnet, episode.support, episode.class_names, fast(TaskResAdapter)
    )
    assert torch.isfinite(predictor.predict(episode.query)).all()


@pytest.mark.slow
def test_clip_lora_with_zero_b_equals_base_model(backbone, episode) -> None:  # type: ignore[no-untyped-def]
    names = episode.class_names
    torch.manual_seed(0)
    state = ClipLoraAdapter().build(backbone, episode.support, names, fast(ClipLoraAdapter))
    model = state.owned[0]
    b_weights = [p for n, p in model.named_parameters() if ".lora_B." in n]
    assert b_weights and all(not p.detach().any() for p in b_weights)
    assert len(state.train_modules) == 12 and all(m.p == 0.25 for m in state.train_modules)
    predictor = state.predictor()
    for pool in (names, NOVEL):
        oracle = zero_shot_oracle(backbone, episode.query.pixels, pool)
        assert torch.allclose(predictor.predict_names(episode.query, pool), oracle, atol=1e-5)
    fitted = ClipLoraAdapter().fit(backbone, episode.support, names, fast(ClipLoraAdapter, lr=1e-2))
    assert not any(m.training for m in fitted.parts["model"].modules())
    oracle = zero_shot_oracle(backbone, episode.query.pixels, names)
    assert not torch.allclose(fitted.predict(episode.query), oracle, atol=1e-4)


# --- unfuse utility ---------------------------------------------------------------------------


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("mask", ["none", "causal-float", "causal-bool", "per-head", "padding"])
@pytest.mark.parametrize("need_weights", [False, True])
def test_unfused_attention_equals_multihead_attention(batch_first, mask, need_weights) -> None:  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(32, 4, batch_first=batch_first).eval()
    unfused = UnfusedMultiheadAttention.from_mha(mha)
    x = torch.randn(3, 7, 32) if batch_first else torch.randn(7, 3, 32)
    kwargs: dict[str, object] = {"need_weights": need_weights}
    causal = torch.full((7, 7), float("-inf")).triu(1)
    if mask == "causal-float":
        kwargs["attn_mask"] = causal
    elif mask == "causal-bool":
        kwargs["attn_mask"] = causal.isinf()
    elif mask == "per-head":
        kwargs["attn_mask"] = torch.randn(3 * 4, 7, 7)
    elif mask == "padding":
        kwargs["key_padding_mask"] = torch.tensor(
            [[False] * 7, [False] * 5 + [True] * 2, [True] + [False] * 6]
        )
    for grad in (True, False):  # no_grad + eval may take PyTorch's fused fast path
        with torch.set_grad_enabled(grad):
            expected, expected_weights = mha(x, x, x, **kwargs)
            got, got_weights = unfused(x, x, x, **kwargs)
        assert torch.allclose(got, expected, atol=1e-6, rtol=0)
        if need_weights:
            assert torch.allclose(got_weights, expected_weights, atol=1e-6, rtol=0)
        else:
            assert got_weights is None


def test_unfused_clip_equals_original(backbone) -> None:  # type: ignore[no-untyped-def]
    import copy

    model = backbone.text.model
    twin = copy.deepcopy(model)
    assert unfuse_attention(twin) == 4
    assert not any(isinstance(m, nn.MultiheadAttention) for m in twin.modules())
    assert isinstance(twin.transformer.resblocks[0].attn, UnfusedMultiheadAttention)
    tokens = backbone.text.tokenize(["a photo of a cat.", "a photo of a dog.", "x"])
    pixels = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert torch.allclose(twin.encode_text(tokens), model.encode_text(tokens), atol=1e-6)
        assert torch.allclose(twin.encode_image(pixels), model.encode_image(pixels), atol=1e-6)


# --- end to end through the runner under HPE --------------------------------------------------


class ClipTuningPlugin:
    def __init__(self, model: ModelSpec) -> None:
        self.model = model

    @hookimpl
    def register_models(self, register: Callable[[ModelSpec], None]) -> None:
        register(self.model)


def test_taskres_runs_under_hpe_through_the_runner(tmp_path: Path) -> None:
    from fewtrans_board.registry.lookup import Registry
    from fewtrans_board.registry.manager import get_plugin_manager
    from fewtrans_board.results.load import load_run
    from fewtrans_board.runner.run import run_evaluation
    from fewtrans_board.runner.spec import RunSpec

    spec = ModelSpec(
        name="tiny-clip.test",
        loader=lambda w, d: tiny_clip_backbone(),
        family="open_clip",
        architecture="tiny",
        source="random-init",
        modalities=("image", "text"),
    )
    pm = get_plugin_manager(
        entry_points=False, extra_plugins={"clip-tuning": ClipTuningPlugin(spec)}
    )
    registry = Registry.from_plugin_manager(pm)
    run = RunSpec(
        model="tiny-clip.test",
        adapter="taskres",
        manifest=str(DIGITS),
        hpe="fewtrans-reference",
        config={"epochs": 2},
        limit=2,
        device="cpu",
    )
    out = tmp_path / "taskres"
    report = run_evaluation(run, registry, out, progress=False)
    assert report.episodes == 2 and report.configurations == 3
    results = load_run(out)
    episodes, matrix, configs = results.config_matrix()
    assert len(episodes) == 2 and matrix.shape == (2, 3) and np.isfinite(matrix).all()
    grid = [json.loads(c) for c in configs]
    assert sorted(c["lr"] for c in grid) == pytest.approx([4e-5, 2e-4, 1e-3])
    assert {(c["epochs"], c["alpha"], c["batch_size"]) for c in grid} == {(2, 0.5, 32)}
    vote = results.aggregations()["hpe"]
    assert vote.shape == (2,) and ((vote >= 0) & (vote <= 100)).all()
    assert results.meta["hpe"]["name"] == "fewtrans-reference"
