"""Vision PEFT adapters: contract on timm and open_clip ViTs, mechanics, unfuse-qkv, runner."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
from torch import nn

from fewtrans_board import hookimpl
from fewtrans_board.adapters.builtin.training import normalized
from fewtrans_board.adapters.builtin.unfuse import (
    SplitMultiheadAttention,
    SplitQkv,
    unfuse_qkv,
)
from fewtrans_board.adapters.builtin.vision_peft import (
    ADAPTERS,
    AdaptFormerAdapter,
    BitFitAdapter,
    LoraAdapter,
    SequentialBottleneckAdapter,
    SsfAdapter,
    TsaAdapter,
    VptAdapter,
)
from fewtrans_board.adapters.builtin.vision_peft.ncc import identity_transform
from fewtrans_board.errors import FewtransError
from fewtrans_board.testing import (
    check_adapter,
    check_import_is_light,
    tiny_clip_backbone,
    tiny_vit_backbone,
    toy_episode,
)

ROOT = Path(__file__).resolve().parents[1]
DIGITS = ROOT / "leaderboard" / "manifests" / "fewtrans-varied--digits.parquet"
N_BLOCKS = 2  # both tiny encoders


@pytest.fixture(scope="module", autouse=True)
def one_thread() -> Iterator[None]:
    """Tiny models run ~10x faster on one thread of a shared 2-core machine."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="module")
def backbones():  # type: ignore[no-untyped-def]
    return {"timm": tiny_vit_backbone(), "open_clip": tiny_clip_backbone()}


KINDS = ("timm", "open_clip")
ALL = [(a, k) for a in ADAPTERS for k in KINDS]
ids = [f"{a.name}-{k}" for a, k in ALL]


def fast_config(adapter, **changes):  # type: ignore[no-untyped-def]
    return adapter.Config().replace(epochs=2, batch_size=4, **changes)


@pytest.mark.parametrize(("adapter", "kind"), ALL, ids=ids)
def test_contract(adapter, kind, backbones) -> None:  # type: ignore[no-untyped-def]
    report = check_adapter(adapter, backbone=backbones[kind], config=fast_config(adapter))
    assert "backbone untouched" in report.passed and "determinism" in report.passed


def pixels(seed: int = 1) -> torch.Tensor:
    return torch.randn(3, 3, 32, 32, generator=torch.Generator().manual_seed(seed))


# Which parameters of the adapted encoder must train, by qualified name.
EXPECTED: dict[str, tuple[Callable[[str], bool], int]] = {
    "lora": (lambda n: "lora_" in n and ("q_proj" in n or "v_proj" in n), N_BLOCKS * 2 * 2),
    "ssf": (lambda n: ".ssf_" in n or n.startswith("ssf_"), (1 + 2 * N_BLOCKS) * 2),
    "adapter": (lambda n: ".seq_adapter." in n, N_BLOCKS * 4),
    "adaptformer": (lambda n: ".par_adapter." in n, N_BLOCKS * 4),
    "tsa": (lambda n: ".par_adapter." in n, N_BLOCKS * 4),
    "vpt": (lambda n: n == "vpt_prompts.prompts", 1),
}


def adapted(adapter, kind, backbones, **changes):  # type: ignore[no-untyped-def]
    """A deep copy of the encoder after ``trainable``, with requires_grad set as ``fit`` does."""
    encoder = copy.deepcopy(backbones[kind].image_encoder).eval()
    params = adapter().trainable(encoder, adapter.Config().replace(**changes))
    chosen = {id(p) for p in params}
    for p in encoder.parameters():
        p.requires_grad_(id(p) in chosen)
    return encoder, params


@pytest.mark.parametrize(("adapter", "kind"), ALL, ids=ids)
def test_gradients_reach_exactly_the_intended_parameters(adapter, kind, backbones) -> None:  # type: ignore[no-untyped-def]
    original = dict(backbones[kind].image_encoder.named_parameters())
    encoder, params = adapted(adapter, kind, backbones)
    encoder(pixels()).square().sum().backward()
    named = dict(encoder.named_parameters())
    with_grad = {n for n, p in named.items() if p.grad is not None}
    if adapter is BitFitAdapter:
        expected = {n for n in original if "bias" in n}
        assert set(named) == set(original) and len(expected) > 4 * N_BLOCKS
    else:
        rule, count = EXPECTED[adapter.name]
        expected = {n for n in named if rule(n)}
        assert len(expected) == count, sorted(expected)
    assert with_grad == expected
    assert {id(p) for p in params} == {id(named[n]) for n in expected}
    assert len(params) == len(expected)


IDENTITY = [
    (LoraAdapter, {}),
    (BitFitAdapter, {}),
    (SsfAdapter, {"init_std": 0.0}),
    (SequentialBottleneckAdapter, {}),
    (AdaptFormerAdapter, {}),
    (TsaAdapter, {}),
]


@pytest.mark.parametrize(("adapter", "changes"), IDENTITY, ids=[a.name for a, _ in IDENTITY])
@pytest.mark.parametrize("kind", KINDS)
def test_zero_initialised_modules_leave_the_encoder_unchanged(
    adapter, changes, kind, backbones
) -> None:  # type: ignore[no-untyped-def]
    original = backbones[kind].image_encoder
    torch.manual_seed(0)
    encoder, params = adapted(adapter, kind, backbones, **changes)
    x = pixels()
    with torch.no_grad():
        want, got = original(x), encoder(x)
        if adapter is TsaAdapter:
            transform = identity_transform(backbones[kind].feature_dim, "cpu")
            want, got = normalized(want), transform(normalized(got))
        assert torch.allclose(got, want, atol=1e-6)
        for p in params:  # the injected modules are live: moving them changes the output
            p.add_(0.1 * torch.randn(p.shape))
        assert not torch.allclose(encoder(x), original(x), atol=1e-3)


def test_ssf_default_init_is_near_identity_but_not_exact(backbones) -> None:  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    encoder, params = adapted(SsfAdapter, "timm", backbones)
    scales = torch.cat([p.detach() for p in params if p.mean() > 0.5])
    assert 0.005 < float(scales.std()) < 0.05 and abs(float(scales.mean()) - 1) < 0.02
    with torch.no_grad():
        assert not torch.equal(encoder(pixels()), backbones["timm"].image_encoder(pixels()))


@pytest.mark.parametrize("kind", KINDS)
def test_lora_is_rank_4_on_q_and_v_with_scale_1(kind, backbones) -> None:  # type: ignore[no-untyped-def]
    from peft.tuners.lora import Linear as LoraLinear

    torch.manual_seed(0)
    encoder, _ = adapted(LoraAdapter, kind, backbones)
    layers = {n: m for n, m in encoder.named_modules() if isinstance(m, LoraLinear)}
    assert len(layers) == 2 * N_BLOCKS
    assert all(n.endswith(("q_proj", "v_proj")) for n in layers)
    for layer in layers.values():
        assert layer.r["default"] == 4 and layer.scaling["default"] == 1.0
        assert isinstance(layer.lora_dropout["default"], nn.Identity)
        assert torch.count_nonzero(layer.lora_B["default"].weight) == 0
        assert torch.count_nonzero(layer.lora_A["default"].weight) > 0
    assert not any(isinstance(m, LoraLinear) for n, m in encoder.named_modules() if "k_proj" in n)


def test_vpt_prompts_cover_every_block(backbones) -> None:  # type: ignore[no-untyped-def]
    _, params = adapted(VptAdapter, "open_clip", backbones)
    assert params[0].shape == (N_BLOCKS, 8, 32)


@pytest.mark.parametrize("kind", KINDS)
def test_unfuse_qkv_is_exact(kind, backbones) -> None:  # type: ignore[no-untyped-def]
    original = backbones[kind].image_encoder
    encoder = copy.deepcopy(original)
    rng_before = torch.get_rng_state()
    assert unfuse_qkv(encoder) == N_BLOCKS and unfuse_qkv(encoder) == 0
    assert torch.equal(torch.get_rng_state(), rng_before)  # no random init was drawn
    split = SplitQkv if kind == "timm" else SplitMultiheadAttention
    assert sum(isinstance(m, split) for m in encoder.modules()) == N_BLOCKS
    with torch.no_grad():
        assert torch.allclose(encoder(pixels()), original(pixels()), atol=1e-6)


@pytest.mark.parametrize("batch_first", [True, False])
def test_unfused_open_clip_block_honours_the_attn_mask_keyword(batch_first) -> None:  # type: ignore[no-untyped-def]
    from open_clip.transformer import ResidualAttentionBlock

    torch.manual_seed(0)
    block = ResidualAttentionBlock(32, 2, batch_first=batch_first).eval()
    split = copy.deepcopy(block)
    split.attn = SplitMultiheadAttention.from_mha(split.attn)
    x = torch.randn(3, 7, 32) if batch_first else torch.randn(7, 3, 32)
    causal = torch.full((7, 7), float("-inf")).triu(1)  # open_clip's text mask
    with torch.no_grad():
        for mask in (None, causal):
            assert torch.allclose(split(x, attn_mask=mask), block(x, attn_mask=mask), atol=1e-6)
        assert not torch.allclose(block(x, attn_mask=causal), block(x), atol=1e-3)


def test_split_attention_matches_multihead_attention_options() -> None:
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(32, 4, batch_first=True).eval()
    split = SplitMultiheadAttention.from_mha(mha).eval()
    q, kv = torch.randn(2, 5, 32), torch.randn(2, 6, 32)
    blocked = torch.rand(2 * 4, 5, 6) > 0.6
    blocked[..., 0] = False
    padding = torch.zeros(2, 6, dtype=torch.bool)
    padding[1, 5] = True
    cases = [
        {"need_weights": False},
        {"need_weights": False, "attn_mask": blocked, "key_padding_mask": padding},
        {"need_weights": True, "attn_mask": blocked},
        {"need_weights": True, "key_padding_mask": padding, "average_attn_weights": False},
    ]
    with torch.no_grad():
        for kwargs in cases:
            (out_a, w_a), (out_b, w_b) = mha(q, kv, kv, **kwargs), split(q, kv, kv, **kwargs)
            assert torch.allclose(out_b, out_a, atol=1e-6), kwargs
            assert (w_a is None) == (w_b is None)
            assert w_a is None or torch.allclose(w_b, w_a, atol=1e-6)


@pytest.mark.parametrize("adapter", ADAPTERS, ids=[a.name for a in ADAPTERS])
def test_non_vit_encoders_fail_clearly(adapter) -> None:  # type: ignore[no-untyped-def]
    cnn = nn.Sequential(nn.Conv2d(3, 8, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten())
    with pytest.raises(FewtransError, match=rf"^{adapter.name}: .*not a ViT"):
        adapter().trainable(cnn, adapter.Config())


def test_tsa_untrained_head_is_prototype_cosine(backbones) -> None:  # type: ignore[no-untyped-def]
    backbone = backbones["open_clip"]
    episode = toy_episode()
    config = TsaAdapter.Config().replace(epochs=0)
    logits = (
        TsaAdapter()
        .fit(backbone, episode.support, episode.class_names, config)
        .predict(episode.query)
    )
    support = normalized(backbone.embed(episode.support.images.pixels))
    labels = episode.support.labels
    protos = torch.stack([support[labels == c].mean(0) for c in range(episode.support.n_way)])
    query = normalized(backbone.embed(episode.query.pixels))
    want = 10 * query @ nn.functional.normalize(protos, dim=-1).T
    assert torch.allclose(logits, want, atol=1e-5)
    trained = TsaAdapter().fit(
        backbone, episode.support, episode.class_names, fast_config(TsaAdapter)
    )
    assert not torch.equal(trained.head.transform.weight, torch.eye(32))  # the transform trains


def test_package_import_is_light() -> None:
    check_import_is_light("fewtrans_board.adapters.builtin.vision_peft")


class VisionPeftPlugin:
    """Registers a 32-pixel tiny ViT, as a model plugin would; the adapters are built in."""

    @hookimpl
    def register_models(self, register):  # type: ignore[no-untyped-def]
        from fewtrans_board.models.spec import ModelSpec

        register(
            ModelSpec(
                name="vpeft-tiny-vit.random",
                loader=lambda weights, device: tiny_vit_backbone(image_size=32),
                family="timm",
                architecture="vit_tiny (test size)",
                source="random-init",
            )
        )


def test_lora_runs_under_hpe_through_the_runner(tmp_path: Path) -> None:
    from fewtrans_board.plugins import get_plugin_manager
    from fewtrans_board.registry import Registry
    from fewtrans_board.results.load import load_run
    from fewtrans_board.runner.run import run_evaluation
    from fewtrans_board.runner.spec import RunSpec

    pm = get_plugin_manager(entry_points=False, extra_plugins={"vision-peft": VisionPeftPlugin()})
    registry = Registry.from_plugin_manager(pm)
    spec = RunSpec(
        model="vpeft-tiny-vit.random",
        adapter="lora",
        manifest=str(DIGITS),
        hpe="fewtrans-reference",
        config={"epochs": 1},
        limit=2,
        threads=1,
    )
    report = run_evaluation(spec, registry, tmp_path / "run", progress=False)
    assert report.episodes == 2 and report.configurations == 9
    rows = load_run(tmp_path / "run").table.to_pylist()
    members = [r for r in rows if r["kind"] == "config"]
    assert len(members) == 2 * 9
    assert {r["aggregation"] for r in rows if r["kind"] == "ensemble"} >= {"vote"}
    assert all(0.0 <= r["accuracy"] <= 100.0 for r in rows)  # percent
