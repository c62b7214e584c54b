"""Vision PEFT adapters: contract on timm and open_clip ViTs, mechanics, unfuse-qkv, runner."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
from torch import nn

from fewtrans_board import hookimpl
from fewtrans_board.blocks.training import normalized
from fewtrans_board.blocks.unfuse import SplitMultiheadAttention, SplitQkv, unfuse_qkv
from fewtrans_board.core.errors import FewtransError
from fewtrans_board.methods.adapters.vision_peft import (
    ADAPTERS,
    AdaptFormerAdapter,
    BitFitAdapter,
    LoraAdapter,
    SequentialBottleneckAdapter,
    SsfAdapter,
    TsaAdapter,
    VptAdapter,
)
from fewtrans_board.methods.adapters.vision_peft.ncc import identity_transform
from fewtrans_board.testing import (
    check_adapter,
    check_import_is_light,
    tiny_clip_backbone,
    tiny_vit_backbone,
    toy_episode,
)
from tests.conftest import assert_rows_score_the_manifest_labels

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


def adapt(adapter, source, **changes):  # type: ignore[no-untyped-def]
    """A deep copy of ``source`` after ``trainable``, prepared as ``fit`` does (eval mode)."""
    encoder = copy.deepcopy(source).eval()
    params = adapter().trainable(encoder, adapter.Config().replace(**changes))
    chosen = {id(p) for p in params}
    for p in encoder.parameters():
        p.requires_grad_(id(p) in chosen)
    return encoder, params


def adapted(adapter, kind, backbones, **changes):  # type: ignore[no-untyped-def]
    """The tiny backbone's encoder of ``kind`` after ``trainable`` (see :func:`adapt`)."""
    return adapt(adapter, backbones[kind].image_encoder, **changes)


def _block_names(prefix: str, names: tuple[str, ...]) -> set[str]:
    return {f"{prefix}.{i}.{name}" for i in range(N_BLOCKS) for name in names}


# BitFit's trainable set, listed by hand from the tiny encoders' modules: every Conv2d, Linear
# and LayerNorm bias plus nn.MultiheadAttention's in_proj_bias (open_clip's conv1 has none).
BITFIT_EXPECTED = {
    "timm": {"patch_embed.proj.bias", "norm.bias"}
    | _block_names(
        "blocks",
        (
            *("norm1.bias", "attn.qkv.bias", "attn.proj.bias"),
            *("norm2.bias", "mlp.fc1.bias", "mlp.fc2.bias"),
        ),
    ),
    "open_clip": {"ln_pre.bias", "ln_post.bias"}
    | _block_names(
        "transformer.resblocks",
        (
            *("ln_1.bias", "attn.in_proj_bias", "attn.out_proj.bias"),
            *("ln_2.bias", "mlp.c_fc.bias", "mlp.c_proj.bias"),
        ),
    ),
}


@pytest.mark.parametrize(("adapter", "kind"), ALL, ids=ids)
def test_gradients_reach_exactly_the_intended_parameters(adapter, kind, backbones) -> None:  # type: ignore[no-untyped-def]
    original = dict(backbones[kind].image_encoder.named_parameters())
    encoder, params = adapted(adapter, kind, backbones)
    encoder(pixels()).square().sum().backward()
    named = dict(encoder.named_parameters())
    with_grad = {n for n, p in named.items() if p.grad is not None}
    if adapter is BitFitAdapter:
        expected = BITFIT_EXPECTED[kind]
        assert set(named) == set(original) and len(expected) == 2 + 6 * N_BLOCKS
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
    # Below the valid range (construction refuses it): set past the check to test the untrained head.
    config = TsaAdapter.Config()
    object.__setattr__(config, "epochs", 0)
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


@pytest.mark.slow
def test_package_import_is_light() -> None:
    check_import_is_light("fewtrans_board.methods.adapters.vision_peft")


class VisionPeftPlugin:
    """Registers a 32-pixel tiny ViT, as a model plugin would; the adapters are built in."""

    @hookimpl
    def register_models(self, register):  # type: ignore[no-untyped-def]
        from fewtrans_board.api.model_spec import ModelSpec

        register(
            ModelSpec(
                name="vpeft-tiny-vit.random",
                loader=lambda weights, device: tiny_vit_backbone(image_size=32),
                family="timm",
                architecture="vit_tiny (test size)",
                source="random-init",
            )
        )


@pytest.mark.slow
def test_lora_runs_under_hpe_through_the_runner(tmp_path: Path) -> None:
    from fewtrans_board.registry.lookup import Registry
    from fewtrans_board.registry.manager import get_plugin_manager
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
        limit=1,  # the 2-way episode: the whole grid, trained and scored (the next is 4-way)
        threads=1,
    )
    report = run_evaluation(spec, registry, tmp_path / "run", progress=False)
    assert report.episodes == 1 and report.configurations == 9
    rows = load_run(tmp_path / "run").table.to_pylist()
    members = [r for r in rows if r["kind"] == "config"]
    assert len(members) == 9
    assert {r["aggregation"] for r in rows if r["kind"] == "ensemble"} >= {"vote"}
    assert_rows_score_the_manifest_labels(rows, DIGITS)


# --- hand-written references -------------------------------------------------------------------


def tiny_timm_vit(depth: int = N_BLOCKS, **options: object) -> nn.Module:
    """A random timm ViT like the tiny backbone's, with extra ``timm.create_model`` options."""
    import timm

    torch.manual_seed(0)
    model: nn.Module = timm.create_model(
        "vit_tiny_patch16_224",
        pretrained=False,
        num_classes=0,
        img_size=32,
        patch_size=8,
        embed_dim=32,
        depth=depth,
        num_heads=2,
        **options,
    )
    return model.eval()


def tiny_open_clip_vit(layers: int = N_BLOCKS, **options: object) -> nn.Module:
    """A random open_clip ``VisionTransformer`` (32 px, patch 8, width 32)."""
    from open_clip.transformer import VisionTransformer

    torch.manual_seed(0)
    model = VisionTransformer(
        image_size=32,
        patch_size=8,
        width=32,
        layers=layers,
        heads=2,
        mlp_ratio=4.0,
        output_dim=32,
        **options,  # type: ignore[arg-type]
    )
    return model.eval()


def deep_prompted(
    blocks: nn.ModuleList, tokens: torch.Tensor, prompts: torch.Tensor | None
) -> torch.Tensor:
    """Run batch-first blocks with deep prompts: appended before block 0, replaced before
    blocks 1..depth-1, carried through the remaining blocks and removed after the last."""
    n = 0 if prompts is None else prompts.shape[1]
    for i, block in enumerate(blocks):
        if prompts is not None and i < len(prompts):
            kept = tokens if i == 0 else tokens[:, :-n]
            tokens = torch.cat([kept, prompts[i].expand(len(tokens), -1, -1)], dim=1)
        tokens = block(tokens)
    return tokens[:, : tokens.shape[1] - n]


def timm_vpt_reference(model, x, prompts):  # type: ignore[no-untyped-def]
    """Deep VPT written out for a timm ViT (class token, learned positions, no registers)."""
    tokens = model.patch_embed(x)
    cls = model.cls_token.expand(len(x), -1, -1)
    tokens = model.norm_pre(torch.cat([cls, tokens], dim=1) + model.pos_embed)
    tokens = model.norm(deep_prompted(model.blocks, tokens, prompts))
    pooled = tokens[:, 0] if model.global_pool == "token" else tokens[:, 1:].mean(1)
    return model.fc_norm(pooled)


def open_clip_vpt_reference(visual, x, prompts):  # type: ignore[no-untyped-def]
    """Deep VPT written out for a batch-first open_clip ``VisionTransformer``."""
    tokens = visual.conv1(x).flatten(2).transpose(1, 2)
    cls = visual.class_embedding.expand(len(x), 1, -1)
    tokens = visual.ln_pre(torch.cat([cls, tokens], dim=1) + visual.positional_embedding)
    tokens = visual.ln_post(deep_prompted(visual.transformer.resblocks, tokens, prompts))
    pooled = tokens[:, 0] if visual.pool_type == "tok" else tokens[:, 1:].mean(1)
    return pooled @ visual.proj


def bottleneck(module: nn.Module, z: torch.Tensor) -> torch.Tensor:
    """``up(relu(down(z)))`` from the adapter's weights."""
    down, up = module.down, module.up  # type: ignore[union-attr]
    hidden = nn.functional.relu(nn.functional.linear(z, down.weight, down.bias))
    return nn.functional.linear(hidden, up.weight, up.bias)


# --- VPT ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("pool", ["token", "avg"])
@pytest.mark.parametrize("depth", [1, 2, 3])
def test_vpt_matches_a_hand_written_deep_vpt_forward(kind, pool, depth) -> None:  # type: ignore[no-untyped-def]
    if kind == "timm":
        source, reference = tiny_timm_vit(depth=3, global_pool=pool), timm_vpt_reference
    else:
        source = tiny_open_clip_vit(layers=3, pool_type="tok" if pool == "token" else "avg")
        reference = open_clip_vpt_reference
    x = pixels()
    with torch.no_grad():
        assert torch.allclose(reference(source, x, None), source(x), atol=1e-5)
        encoder, (prompts,) = adapt(VptAdapter, source, n_tokens=3, depth=depth)
        prompts.normal_()
        want = reference(source, x, prompts)
        assert torch.allclose(encoder(x), want, atol=1e-5)
        assert not torch.allclose(want, source(x), atol=1e-3)


@pytest.mark.parametrize("kind", KINDS)
def test_deep_copy_of_a_vpt_encoder_uses_its_own_prompts(kind, backbones) -> None:  # type: ignore[no-untyped-def]
    encoder, _ = adapted(VptAdapter, kind, backbones)
    twin = copy.deepcopy(encoder)
    x = pixels()
    with torch.no_grad():
        before = encoder(x)
        assert torch.equal(twin(x), before)
        twin.vpt_prompts.prompts.normal_()  # a constant shift would vanish in LayerNorm
        assert not torch.allclose(twin(x), before, atol=1e-3)
        assert torch.equal(encoder(x), before)
    twin.vpt_prompts.detach()  # removes the copy's hooks, not the original's
    with torch.no_grad():
        assert torch.allclose(twin(x), backbones[kind].image_encoder(x), atol=1e-6)
        assert torch.equal(encoder(x), before)


@pytest.mark.parametrize("depth", [1, 3])
def test_vpt_on_a_sequence_first_open_clip_tower_matches_batch_first(depth) -> None:  # type: ignore[no-untyped-def]
    from open_clip.transformer import Transformer

    batch_first = tiny_open_clip_vit(layers=3)
    seq_first = copy.deepcopy(batch_first)
    seq_first.transformer = Transformer(32, 3, 2, 4.0, batch_first=False)
    seq_first.transformer.load_state_dict(batch_first.transformer.state_dict())
    seq_first.eval()
    x = pixels()  # batch 3, prompts 2: a mix-up of the axes cannot go unnoticed
    with torch.no_grad():
        assert torch.allclose(seq_first(x), batch_first(x), atol=1e-5)
        reference, (prompts,) = adapt(VptAdapter, batch_first, n_tokens=2, depth=depth)
        encoder, (copied,) = adapt(VptAdapter, seq_first, n_tokens=2, depth=depth)
        prompts.normal_()
        copied.copy_(prompts)
        got, want = encoder(x), reference(x)
    assert got.shape == want.shape == (3, 32)
    assert torch.allclose(got, want, atol=1e-5)


# --- bottleneck adapters ----------------------------------------------------------------------

BOTTLENECKS = [
    (AdaptFormerAdapter, {"scale": 0.5}),
    (TsaAdapter, {"adapter_scale": 0.5}),
    (SequentialBottleneckAdapter, {}),
]


@pytest.mark.parametrize(("adapter", "changes"), BOTTLENECKS, ids=[a.name for a, _ in BOTTLENECKS])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("layer_scale", [None, 0.3], ids=["plain", "layerscale"])
def test_bottleneck_adapters_match_the_hand_computed_block(  # type: ignore[no-untyped-def]
    adapter, changes, kind, layer_scale
) -> None:
    if kind == "timm":
        source = tiny_timm_vit(init_values=layer_scale)
        plain_blocks = list(source.blocks)
    else:
        source = tiny_open_clip_vit(ls_init_value=layer_scale)
        plain_blocks = list(source.transformer.resblocks)
    gammas = [p for n, p in source.named_parameters() if n.endswith("gamma")]
    assert len(gammas) == (0 if layer_scale is None else 2 * N_BLOCKS)
    with torch.no_grad():
        for gamma in gammas:  # per-channel, and far from 1
            gamma.uniform_(0.2, 0.6)
    encoder, params = adapt(adapter, source, hidden=8, **changes)
    with torch.no_grad():
        for p in params:
            p.normal_(0.0, 0.3)
    blocks = encoder.blocks if kind == "timm" else encoder.transformer.resblocks
    x = torch.randn(3, 17, 32, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        for block, plain in zip(blocks, plain_blocks, strict=True):
            if kind == "timm":
                after_attn = x + plain.ls1(plain.attn(plain.norm1(x)))
                branch = plain.ls2(plain.mlp(plain.norm2(after_attn)))
            else:
                after_attn = x + plain.ls_1(plain.attention(plain.ln_1(x)))
                branch = plain.ls_2(plain.mlp(plain.ln_2(after_attn)))
            if adapter is SequentialBottleneckAdapter:
                want = after_attn + branch + bottleneck(block.seq_adapter, branch)
            else:
                update = 0.5 * bottleneck(block.par_adapter, after_attn)
                want = after_attn + branch + update
            assert torch.allclose(block(x), want, atol=1e-5)
            assert not torch.allclose(want, plain(x), atol=1e-3)


# --- training-time mode -----------------------------------------------------------------------


@pytest.mark.parametrize(("adapter", "kind"), ALL, ids=ids)
def test_injected_modules_follow_the_eval_mode_of_the_encoder(adapter, kind, backbones) -> None:  # type: ignore[no-untyped-def]
    encoder, _ = adapted(adapter, kind, backbones)
    assert [n for n, m in encoder.named_modules() if m.training] == []


@pytest.mark.parametrize("kind", KINDS)
def test_lora_training_forward_runs_no_dropout(kind, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """FinetuneAdapter.fit trains the encoder in eval mode: no dropout, old or injected."""
    import peft

    real = peft.LoraConfig
    monkeypatch.setattr(
        peft, "LoraConfig", lambda **options: real(**{**options, "lora_dropout": 0.5})
    )
    if kind == "timm":
        source = tiny_timm_vit(attn_drop_rate=0.5, proj_drop_rate=0.5)
    else:
        source = tiny_open_clip_vit()
        for block in source.transformer.resblocks:
            block.attn.dropout = 0.5
    encoder, params = adapt(LoraAdapter, source)
    assert sum(isinstance(m, nn.Dropout) and m.p == 0.5 for m in encoder.modules()) >= 4
    with torch.no_grad():
        for p in params:  # B != 0, so the LoRA branch (and its dropout) matters
            p.normal_(0.0, 0.3)
    x = pixels()
    first, second = encoder(x), encoder(x)  # gradients on, as in the training loop
    assert torch.equal(first, second)


# --- SSF, TSA ----------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_ssf_equals_scale_and_shift_folded_into_patch_embedding_and_norms(kind, backbones) -> None:  # type: ignore[no-untyped-def]
    source = backbones[kind].image_encoder
    torch.manual_seed(0)
    encoder, _ = adapted(SsfAdapter, kind, backbones, init_std=0.3)
    if kind == "timm":
        prefix, norms = "blocks", ("norm1", "norm2")
        sites = [("patch_embed.proj", "ssf_patch")]
    else:
        prefix, norms = "transformer.resblocks", ("ln_1", "ln_2")
        sites = [("conv1", "ssf_patch")]
    for i in range(N_BLOCKS):
        for j, norm in enumerate(norms, start=1):
            sites.append((f"{prefix}.{i}.{norm}", f"{prefix}.{i}.ssf_norm{j}"))
    folded = copy.deepcopy(source)
    with torch.no_grad():
        for target, name in sites:  # gamma * (W x + b) + beta == (gamma W) x + (gamma b + beta)
            module, ssf = folded.get_submodule(target), encoder.get_submodule(name)
            gamma, beta = ssf.scale.detach(), ssf.shift.detach()
            module.weight.mul_(gamma.view(-1, *[1] * (module.weight.dim() - 1)))
            if module.bias is None:
                module.bias = nn.Parameter(beta.clone())
            else:
                module.bias.mul_(gamma).add_(beta)
        x = pixels()
        assert torch.allclose(encoder(x), folded(x), atol=1e-5)
        assert not torch.allclose(encoder(x), source(x), atol=1e-3)


@pytest.mark.parametrize("transform", ["trained", "perturbed"])
def test_tsa_predictor_transforms_prototypes_and_queries(transform, backbones, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from fewtrans_board.methods.adapters.vision_peft import ncc

    backbone, episode = backbones["timm"], toy_episode()
    config = fast_config(TsaAdapter)
    if transform == "perturbed":
        real = ncc.identity_transform

        def perturbed(dim, device="cpu"):  # type: ignore[no-untyped-def]
            layer = real(dim, device)
            noise = torch.randn(dim, dim, generator=torch.Generator().manual_seed(3))
            with torch.no_grad():
                layer.weight.add_(0.5 * noise)
            return layer

        monkeypatch.setattr(ncc, "identity_transform", perturbed)
        config = copy.copy(config)
        object.__setattr__(config, "epochs", 0)  # below the valid range: untrained, on purpose
    predictor = TsaAdapter().fit(backbone, episode.support, episode.class_names, config)
    weight = predictor.head.transform.weight.detach()
    assert not torch.allclose(weight, torch.eye(32), atol=1e-3)
    labels = episode.support.labels
    with torch.no_grad():
        support = normalized(predictor.encoder(episode.support.images.pixels)) @ weight.T
        query = normalized(predictor.encoder(episode.query.pixels)) @ weight.T
    protos = torch.stack([support[labels == c].mean(0) for c in range(episode.support.n_way)])
    normalize = nn.functional.normalize
    want = 10 * normalize(query, dim=-1) @ normalize(protos, dim=-1).T
    assert torch.allclose(predictor.predict(episode.query), want, atol=1e-5)


def test_ncc_loss_leaves_absent_classes_out_of_the_softmax() -> None:
    from fewtrans_board.methods.adapters.vision_peft.ncc import NccHead

    generator = torch.Generator().manual_seed(4)
    head = NccHead(8, 4, 10.0, "cpu")
    with torch.no_grad():
        head.transform.weight.add_(0.3 * torch.randn(8, 8, generator=generator))
    features = normalized(torch.randn(6, 8, generator=generator))
    labels = torch.tensor([0, 0, 1, 3, 3, 3])  # class 2 absent
    present = [0, 1, 3]
    mapped = features @ head.transform.weight.detach().T
    protos = torch.stack([mapped[labels == c].mean(0) for c in present])
    normalize = nn.functional.normalize
    logits = 10 * normalize(mapped, dim=-1) @ normalize(protos, dim=-1).T
    target = torch.tensor([present.index(int(c)) for c in labels])
    with torch.no_grad():
        got = head.batch_loss(features, labels)
    assert torch.allclose(got, nn.functional.cross_entropy(logits, target), atol=1e-6)


# --- unfused attention -------------------------------------------------------------------------


@pytest.mark.parametrize("need_weights", [True, False])
def test_split_attention_needs_a_mask_with_is_causal_like_multihead_attention(need_weights) -> None:  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(32, 4, batch_first=True)
    split = SplitMultiheadAttention.from_mha(mha)
    x = torch.randn(2, 5, 32)
    for module in (mha, split):
        with pytest.raises(RuntimeError, match="is_causal"):
            module(x, x, x, need_weights=need_weights, is_causal=True)
    causal = nn.Transformer.generate_square_subsequent_mask(5)
    with torch.no_grad():
        kwargs = {"need_weights": need_weights, "attn_mask": causal, "is_causal": True}
        want, got = mha.eval()(x, x, x, **kwargs)[0], split.eval()(x, x, x, **kwargs)[0]
    assert torch.allclose(got, want, atol=1e-6)
