"""SEP's token fusion against the official code and Eq. 11; CoPrompt's weight and two views.

References (read, not copied): htyao89/SEP ``SEP_main/trainers/sep.py`` (``PromptAttention``,
``_get_clones``) and ``SEP_main/trainers/clip_text/model.py`` (the calls), the same code in
the inductive-CLIP paper's ``FSL/trainers/sep.py`` and ``FSL/trainers/clip_text_sep/model.py``;
ShuvenduRoy/CoPrompt ``train.py``, ``configs/trainers/coprompt.yaml`` and
``trainers/coprompt.py``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fewtrans_board.core.errors import ConfigError, FewtransError
from fewtrans_board.methods.adapters.clip_prompts import CopromptAdapter, SepAdapter, SepresAdapter
from fewtrans_board.methods.adapters.clip_prompts.fusion import (
    TokenFusion,
    fusion_layers,
    plain_attention,
)
from fewtrans_board.methods.adapters.clip_prompts.views import CropFlipViews
from fewtrans_board.testing import tiny_clip_backbone, toy_episode

# --------------------------------------------------------------------------- numpy helpers


def np_softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def np_layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + 1e-5) * weight + bias


def np_quick_gelu(x: np.ndarray) -> np.ndarray:
    return x / (1 + np.exp(-1.702 * x))


def arrays(module: torch.nn.Module) -> dict[str, np.ndarray]:
    return {k: v.detach().double().numpy() for k, v in module.state_dict().items()}


def np_gates_and_mlp(
    p: dict[str, np.ndarray], tokens: np.ndarray, attended: np.ndarray
) -> np.ndarray:
    s1, s2 = float(p["scale1"][0]), float(p["scale2"][0])
    fused = s1 * tokens + (1 - s1) * attended
    hidden = np_quick_gelu(
        np_layer_norm(fused, p["ln_2.weight"], p["ln_2.bias"]) @ p["mlp.0.weight"].T
    )
    return s2 * fused + (1 - s2) * hidden @ p["mlp.2.weight"].T


def randomised(module: torch.nn.Module, seed: int) -> torch.nn.Module:
    """Every parameter (LayerNorm affine and gates included) set to non-trivial values."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in module.parameters():
            param.copy_(torch.randn(param.shape, generator=generator, dtype=param.dtype) * 0.5)
        module.scale1.fill_(0.3)  # type: ignore[operator]
        module.scale2.fill_(0.6)  # type: ignore[operator]
    return module


# --------------------------------------------------------------------------- SEP fusion


def test_plain_attention_is_eq11_on_hand_written_tensors() -> None:
    z_v = np.array(  # 3 pre-trained tokens, D = 4
        [[1.0, 0.0, 2.0, -1.0], [0.5, 1.5, -0.5, 0.0], [-1.0, 2.0, 0.0, 1.0]]
    )
    z_p = np.array([[0.2, -0.4, 1.0, 0.3], [2.0, 0.0, -1.0, 0.5]])  # 2 prompts
    # prompts as queries, each a convex mixture of the pre-trained tokens
    expected = np_softmax(z_p @ z_v.T / math.sqrt(4), axis=-1) @ z_v
    # Eq. 11's orientation, softmax(Z_v Z_p^T / sqrt(D)) normalised over the Z_v axis
    assert np.allclose(np_softmax(z_v @ z_p.T / 2.0, axis=0).T @ z_v, expected)
    got = plain_attention(torch.tensor(z_p)[None], torch.tensor(z_v)[None])[0]
    assert np.allclose(got.numpy(), expected, atol=1e-12)


def test_plain_fusion_module_matches_numpy() -> None:
    fusion = randomised(TokenFusion(4, hidden=3, fusion="plain").double(), seed=1)
    tokens = np.array([[[1.0, 0.0, 2.0, -1.0], [0.5, 1.5, -0.5, 0.0]]])
    prompts = np.array([[[0.2, -0.4, 1.0, 0.3], [2.0, 0.0, -1.0, 0.5]]])
    p = arrays(fusion)
    keys = np_layer_norm(tokens[0], p["ln_1.weight"], p["ln_1.bias"])
    queries = np_layer_norm(prompts[0], p["ln_1.weight"], p["ln_1.bias"])
    attended = np_softmax(queries @ keys.T / math.sqrt(4)) @ keys
    expected = np_gates_and_mlp(p, tokens[0], attended)
    got = fusion(torch.tensor(tokens), torch.tensor(prompts))[0].detach().numpy()
    assert np.allclose(got, expected, atol=1e-10)


def test_projected_fusion_is_the_codes_multi_head_attention() -> None:
    """``nn.MultiheadAttention(W, W // 64)`` as ``PromptAttention`` runs it, written out."""
    width, heads, head = 128, 2, 64
    fusion = randomised(TokenFusion(width, hidden=8).double(), seed=2)
    assert fusion.attn is not None and fusion.attn.num_heads == heads
    generator = torch.Generator().manual_seed(3)
    tokens = torch.randn(1, 3, width, generator=generator, dtype=torch.float64)
    prompts = torch.randn(1, 3, width, generator=generator, dtype=torch.float64)
    p = arrays(fusion)
    t, q = tokens[0].numpy(), prompts[0].numpy()
    keys = np_layer_norm(t, p["ln_1.weight"], p["ln_1.bias"])
    queries = np_layer_norm(q, p["ln_1.weight"], p["ln_1.bias"])
    w_q, w_k, w_v = np.split(p["attn.in_proj_weight"], 3)
    b_q, b_k, b_v = np.split(p["attn.in_proj_bias"], 3)
    big_q, big_k, big_v = queries @ w_q.T + b_q, keys @ w_k.T + b_k, keys @ w_v.T + b_v
    outs = []
    for h in range(heads):
        part = slice(h * head, (h + 1) * head)
        weights = np_softmax(big_q[:, part] @ big_k[:, part].T / math.sqrt(head))
        outs.append(weights @ big_v[:, part])
    attended = np.concatenate(outs, -1) @ p["attn.out_proj.weight"].T + p["attn.out_proj.bias"]
    expected = np_gates_and_mlp(p, t, attended)
    got = fusion(tokens, prompts)[0].detach().numpy()
    assert np.allclose(got, expected, atol=1e-9)


def test_plain_fusion_has_no_projection_parameters() -> None:
    shapes = {n: tuple(v.shape) for n, v in TokenFusion(64, fusion="plain").named_parameters()}
    assert shapes == {
        "ln_1.weight": (64,),
        "ln_1.bias": (64,),
        "ln_2.weight": (64,),
        "ln_2.bias": (64,),
        "mlp.0.weight": (256, 64),
        "mlp.2.weight": (64, 256),
        "scale1": (1,),
        "scale2": (1,),
    }
    with pytest.raises(ValueError, match="fusion"):
        TokenFusion(64, fusion="eq11")


@pytest.mark.parametrize("width,heads", [(512, 8), (768, 12)])
def test_projected_fusion_trains_what_the_code_trains(width: int, heads: int) -> None:
    """``PromptAttention(d)``'s used parameters (``ln_pa_1_token`` is never called there)."""
    fusion = TokenFusion(width)
    code = {  # PromptAttention name -> shape
        "promt_attention_visual.in_proj_weight": (3 * width, width),
        "promt_attention_visual.in_proj_bias": (3 * width,),
        "promt_attention_visual.out_proj.weight": (width, width),
        "promt_attention_visual.out_proj.bias": (width,),
        "ln_pa_1_visual.weight": (width,),
        "ln_pa_1_visual.bias": (width,),
        "ln_pa_2_visual.weight": (width,),
        "ln_pa_2_visual.bias": (width,),
        "mlp_pa_visual.c_fc1.weight": (256, width),
        "mlp_pa_visual.c_proj.weight": (width, 256),
        "scale1": (1,),
        "scale2": (1,),
    }
    renamed = {
        "promt_attention_visual": "attn",
        "ln_pa_1_visual": "ln_1",
        "ln_pa_2_visual": "ln_2",
        "mlp_pa_visual.c_fc1": "mlp.0",
        "mlp_pa_visual.c_proj": "mlp.2",
    }

    def ours(name: str) -> str:
        for old, new in renamed.items():
            name = name.replace(old, new)
        return name

    assert {n: tuple(v.shape) for n, v in fusion.named_parameters()} == {
        ours(n): s for n, s in code.items()
    }
    assert fusion.attn is not None and fusion.attn.num_heads == heads
    assert torch.equal(fusion.scale1, torch.tensor([0.75]))


def test_fusion_layers_start_from_one_module_like_get_clones() -> None:
    for fusion in ("projected", "plain"):
        layers = fusion_layers(4, 64, fusion)
        assert list(layers.keys()) == ["1", "2", "3"]
        states = [m.state_dict() for m in layers.values()]
        for state in states[1:]:
            assert all(torch.equal(state[k], states[0][k]) for k in state)
        first, second = (next(m.parameters()) for m in list(layers.values())[:2])
        assert first.data_ptr() != second.data_ptr()  # copies, trained apart


@pytest.fixture(scope="module")
def backbone():  # type: ignore[no-untyped-def]
    return tiny_clip_backbone(seed=1)


@pytest.fixture(scope="module")
def episode():  # type: ignore[no-untyped-def]
    return toy_episode(shots=(2, 1, 3), seed=2)


def session(adapter_cls, backbone, episode, **options):  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    config = adapter_cls.Config(epochs=1, **options)
    return adapter_cls().session(backbone, episode.support, episode.class_names, config)


@pytest.mark.parametrize("adapter_cls", [SepAdapter, SepresAdapter], ids=lambda a: a.name)
def test_sep_defaults_to_the_codes_fusion_and_keeps_the_plain_variant(
    adapter_cls, backbone, episode
) -> None:  # type: ignore[no-untyped-def]
    assert adapter_cls.Config().fusion == "projected"
    with pytest.raises(ConfigError):
        adapter_cls.Config(fusion="eq11")
    default = session(adapter_cls, backbone, episode)
    plain = session(adapter_cls, backbone, episode, fusion="plain")
    for fit, fusion in ((default, "projected"), (plain, "plain")):
        modules = [*fit.text_fusion.values(), *fit.visual_fusion.values()]
        assert modules and all(m.fusion == fusion for m in modules)
    names = set(default.named_trainable)
    assert any(".attn." in n for n in names)
    # the plain variant trains the same groups, less the attention projections
    assert set(plain.named_trainable) == {n for n in names if ".attn." not in n}
    plain.loss(np.arange(len(episode.support))).backward()
    for name, tensor in plain.named_trainable.items():
        assert tensor.grad is not None and tensor.grad.abs().sum() > 0, name


def test_sepres_vres_adds_a_zero_initialised_image_residual_that_trains(backbone, episode) -> None:  # type: ignore[no-untyped-def]
    """vRES (Tab. 5): ``norm(norm(prompted) + norm(frozen) + alpha V)``, V ``[1, D]`` from 0."""
    assert SepresAdapter.Config().visual_residual is False  # SEPRES as published
    plain = session(SepresAdapter, backbone, episode)
    vres = session(SepresAdapter, backbone, episode, visual_residual=True)
    assert set(vres.named_trainable) == {*plain.named_trainable, "visual_residual"}
    residual = vres.named_trainable["visual_residual"]
    assert residual.shape == (1, plain.handcrafted.shape[1]) and not residual.any()
    batch = np.arange(len(episode.support))
    first = vres.loss(batch)
    assert torch.allclose(first, plain.loss(batch))  # zero init: SEPRES's loss at the start
    first.backward()
    assert residual.grad is not None and residual.grad.abs().sum() > 0
    with torch.no_grad():
        residual.copy_(torch.randn_like(residual))
    index = torch.as_tensor(batch)
    pixels, frozen = vres.pixels[index], vres.frozen_images[index]
    summed = F.normalize(vres.model.visual(pixels), dim=-1) + F.normalize(frozen, dim=-1)
    expected = F.normalize(summed + vres.residual_alpha * residual, dim=-1)
    assert torch.allclose(vres.fused_images(pixels, frozen), expected, atol=1e-6)
    with pytest.raises(FewtransError, match="needs SEPRES's residual_alpha"):
        torch.manual_seed(0)
        config = SepAdapter.Config(epochs=1)
        from fewtrans_board.methods.adapters.clip_prompts.sep import SepSession

        SepSession(backbone, episode.support, episode.class_names, config, "sep", None, True)


# --------------------------------------------------------------------------- CoPrompt


def test_coprompt_default_weight_is_copromts_lambda() -> None:
    # ShuvenduRoy/CoPrompt train.py:94 ``cfg.TRAINER.W = 8.0``, applied as ``self.lambd`` in
    # trainers/coprompt.py:298 and ``loss + self.lambd * loss_distill`` at :366 (the yaml's
    # ``W: 1.0``, configs/trainers/coprompt.yaml:38, is overridden per dataset by
    # trainers/constants.py through train.py:117).
    config = CopromptAdapter.Config()
    assert config.consistency_weight == 8.0
    assert config.augmentation == "crop-flip"
    with pytest.raises(ConfigError):
        CopromptAdapter.Config(augmentation="randaugment")


def coprompt(backbone, episode, **options):  # type: ignore[no-untyped-def]
    return session(CopromptAdapter, backbone, episode, missing_descriptions="template", **options)


def coprompt_loss(fit, first: torch.Tensor, second: torch.Tensor, pick_seed: int) -> torch.Tensor:
    """The loss written out: the prompted model on ``first``, frozen CLIP on ``second``."""
    images = fit.adapted_images(first)
    texts = fit.text_features(fit.class_names)
    frozen = F.normalize(fit.backbone.embed(second), dim=-1)
    torch.manual_seed(pick_seed)
    pick = int(torch.randint(max(len(d) for d in fit.descriptions), (1,)))
    targets = torch.stack([d[pick % len(d)] for d in fit.descriptions])
    return F.cross_entropy(fit.logit_scale * images @ texts.t(), fit.labels) + fit.weight * (
        (1 - F.cosine_similarity(texts, targets).mean())
        + (1 - F.cosine_similarity(images, frozen).mean())
    )


class Scripted:
    """Stands in for the views: returns the given transforms of the pixels, in turn."""

    def __init__(self, *transforms) -> None:  # type: ignore[no-untyped-def]
        self.transforms = list(transforms)

    def __call__(self, pixels: torch.Tensor) -> torch.Tensor:
        return self.transforms.pop(0)(pixels)


def test_coprompt_two_views_reach_the_consistency_term(backbone, episode) -> None:  # type: ignore[no-untyped-def]
    batch = np.arange(len(episode.support))
    single = coprompt(backbone, episode, augmentation="none")
    double = coprompt(backbone, episode)
    assert single.views is None and isinstance(double.views, CropFlipViews)
    pixels = single.pixels
    with torch.no_grad():
        torch.manual_seed(5)
        one_view = single.loss(batch)
        assert torch.allclose(one_view, coprompt_loss(single, pixels, pixels, 5), atol=1e-5)
        # identical views: the two-view loss is the single-view loss
        double.views = Scripted(lambda x: x, lambda x: x)
        torch.manual_seed(5)
        assert torch.allclose(double.loss(batch), one_view, atol=1e-5)
        # a different second view changes only frozen CLIP's side
        double.views = Scripted(lambda x: x, lambda x: x.flip(-1))
        torch.manual_seed(5)
        flipped = double.loss(batch)
        assert not torch.allclose(flipped, one_view, atol=1e-4)
        assert torch.allclose(flipped, coprompt_loss(double, pixels, pixels.flip(-1), 5), atol=1e-5)
        # the real views: two different seeded draws, replayed by a fresh generator
        double.views = CropFlipViews()
        replay = CropFlipViews()
        first, second = replay(pixels), replay(pixels)
        assert not torch.allclose(first, second) and not torch.allclose(first, pixels)
        torch.manual_seed(5)
        assert torch.allclose(
            double.loss(batch), coprompt_loss(double, first, second, 5), atol=1e-5
        )


def test_coprompt_views_are_deterministic_and_queries_are_not_augmented(backbone, episode) -> None:  # type: ignore[no-untyped-def]
    batch = np.arange(len(episode.support))
    losses = []
    for _ in range(2):
        fit = coprompt(backbone, episode)
        with torch.no_grad():
            torch.manual_seed(7)
            losses.append(torch.stack([fit.loss(batch) for _ in range(3)]))
    assert torch.equal(losses[0], losses[1])
    assert len(set(losses[0].tolist())) == 3  # a new pair of views every step
    state = fit.views.generator.get_state()
    predictor = fit.predictor()
    logits = predictor.predict(episode.query)
    assert torch.equal(fit.views.generator.get_state(), state)
    assert torch.allclose(predictor.predict(episode.query), logits)


def test_crop_flip_views() -> None:
    pixels = torch.randn(4, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    a, b = CropFlipViews(seed=3), CropFlipViews(seed=3)
    first = a(pixels)
    assert first.shape == pixels.shape and first.dtype == pixels.dtype
    assert torch.equal(first, b(pixels)) and torch.equal(a(pixels), b(pixels))
    assert not torch.equal(first, a(pixels))  # the generator moves on
    assert not torch.equal(CropFlipViews(seed=4)(pixels), CropFlipViews(seed=3)(pixels))
    whole = CropFlipViews(scale=(1.0, 1.0), ratio=(1.0, 1.0), flip=0.0)
    assert torch.allclose(whole(pixels), pixels, atol=1e-5)
    flipped = CropFlipViews(scale=(1.0, 1.0), ratio=(1.0, 1.0), flip=1.0)
    assert torch.allclose(flipped(pixels), pixels.flip(-1), atol=1e-5)
    top, left, h, w = CropFlipViews(seed=0).box(224, 224)
    assert 0 <= top <= 224 - h and 0 <= left <= 224 - w and h * w > 0.08 * 224**2 - 224


@pytest.mark.slow
def test_sep_plain_fusion_trains_in_lockstep_like_the_loop() -> None:
    from tests.test_lockstep import backbone_for, batched_and_looped, small_grid
    from tests.test_lockstep import episode as lockstep_episode

    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        support, query, names = lockstep_episode(torch.float64)
        backbone = backbone_for(SepAdapter, torch.float64)
        grid = small_grid(SepAdapter, fusion="plain")
        pairs, reports = batched_and_looped(SepAdapter, backbone, support, query, names, grid)
    finally:
        torch.set_default_dtype(previous)
    for batched, looped in pairs:
        assert torch.allclose(batched, looped, rtol=0, atol=1e-8)
    assert reports[0].fallback is None and reports[0].chunks == [len(grid)]
