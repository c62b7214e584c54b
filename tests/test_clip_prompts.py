"""CLIP prompt learners: contract, gradient flow, exact zero-shot limits, ProGrad, HPE run."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fewtrans_board import hookimpl
from fewtrans_board.core.errors import FewtransError
from fewtrans_board.methods.adapters.clip_prompts import (
    ADAPTERS,
    CocoopAdapter,
    CoopAdapter,
    IvlpAdapter,
    KgcoopAdapter,
    MapleAdapter,
    ProgradAdapter,
    VptClipAdapter,
    project_conflicting_gradient,
)
from fewtrans_board.methods.adapters.clip_prompts.cocoop import CocoopSession
from fewtrans_board.methods.adapters.clip_tuning import (
    ClipAdapterAdapter,
    ClipLoraAdapter,
    TaskResAdapter,
)
from fewtrans_board.methods.adapters.zeroshot import ZeroShotClipAdapter
from fewtrans_board.testing import (
    check_adapter,
    check_import_is_light,
    tiny_clip_backbone,
    tiny_vit_backbone,
    toy_episode,
)

ROOT = Path(__file__).resolve().parents[1]
DIGITS = ROOT / "leaderboard" / "manifests" / "fewtrans-varied--digits.parquet"
FAST: dict[str, dict[str, Any]] = {a.name: {"epochs": 2} for a in ADAPTERS}
TEXT_PROMPTED = [a for a in ADAPTERS if a is not VptClipAdapter]
"""The adapters whose class text features go through learned text prompts."""

EXPECTED_TRAINABLE = {
    "coop": {"ctx"},
    "kgcoop": {"ctx"},
    "prograd": {"ctx"},
    "cocoop": {"ctx", *(f"meta_net.{i}.{w}" for i in (0, 2) for w in ("weight", "bias"))},
    "vpt-clip": {"visual_prompts"},
    "ivlp": {"ctx", "text_deep", "visual_prompts"},
    "maple": {
        "ctx",
        "text_deep",
        *(f"projections.{i}.{w}" for i in (0, 1) for w in ("weight", "bias")),
    },
}


@pytest.fixture(scope="module")
def backbone():  # type: ignore[no-untyped-def]
    return tiny_clip_backbone(seed=1)


@pytest.fixture(scope="module")
def episode():  # type: ignore[no-untyped-def]
    return toy_episode(shots=(2, 1, 3), seed=2)


def zero_shot_logits(backbone, episode) -> torch.Tensor:  # type: ignore[no-untyped-def]
    predictor = ZeroShotClipAdapter().fit(
        backbone, episode.support, episode.class_names, ZeroShotClipAdapter.Config()
    )
    return predictor.predict(episode.query)


def zero_shot_names(backbone, episode, names: list[str]) -> torch.Tensor:  # type: ignore[no-untyped-def]
    predictor = ZeroShotClipAdapter().fit(
        backbone, episode.support, episode.class_names, ZeroShotClipAdapter.Config()
    )
    return predictor.predict_names(episode.query, names)


def clip_prompts(backbone, names: list[str]) -> torch.Tensor:  # type: ignore[no-untyped-def]
    """Normalised text features of "a photo of a {name}." straight from open_clip."""
    tokens = backbone.text.tokenize([f"a photo of a {n}." for n in names])
    with torch.no_grad():
        return F.normalize(backbone.text.model.encode_text(tokens), dim=-1)


def clip_images(backbone, pixels: torch.Tensor) -> torch.Tensor:  # type: ignore[no-untyped-def]
    """Normalised image features straight from open_clip."""
    with torch.no_grad():
        return backbone.text.model.encode_image(pixels, normalize=True)


def graph_node_names(tensor: torch.Tensor) -> set[str]:
    """Names of the autograd nodes ``tensor`` was computed through."""
    seen: set[Any] = set()
    stack = [tensor.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        stack.extend(parent for parent, _ in node.next_functions)
    return {type(node).__name__ for node in seen}


def block_input(backbone, block: int, text: str) -> torch.Tensor:  # type: ignore[no-untyped-def]
    """Input of text block ``block`` for one prompt, from an unhooked copy of the model."""
    model = copy.deepcopy(backbone.text.model)
    seen: list[torch.Tensor] = []
    model.transformer.resblocks[block].register_forward_pre_hook(
        lambda module, args: seen.append(args[0].detach().clone())
    )
    with torch.no_grad():
        model.encode_text(backbone.text.tokenize([text]))
    return seen[0][0]  # batch-first [L, W]


@pytest.mark.slow
def test_package_import_is_light() -> None:
    check_import_is_light("fewtrans_board.methods.adapters.clip_prompts")


@pytest.mark.slow
@pytest.mark.parametrize("adapter_cls", ADAPTERS, ids=lambda a: a.name)
def test_contract_and_predict_names(adapter_cls, backbone, episode) -> None:  # type: ignore[no-untyped-def]
    config = adapter_cls.Config(**FAST[adapter_cls.name])
    report = check_adapter(adapter_cls, config=config)
    assert report.passed[-1] == "fit_many agrees with fit"
    assert adapter_cls.needs_text and {"lr", "epochs"} <= {
        f.hpe for f in adapter_cls.Config.fields_info()
    }
    predictor = adapter_cls().fit(backbone, episode.support, episode.class_names, config)
    novel = predictor.predict_names(episode.query, ["red panda", "fire truck"])
    assert tuple(novel.shape) == (len(episode.query), 2) and torch.isfinite(novel).all()


@pytest.mark.parametrize("adapter_cls", ADAPTERS, ids=lambda a: a.name)
def test_only_prompt_parameters_get_gradients(adapter_cls, backbone, episode) -> None:  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    session = adapter_cls().session(
        backbone, episode.support, episode.class_names, adapter_cls.Config()
    )
    assert set(session.named_trainable) == EXPECTED_TRAINABLE[adapter_cls.name]
    caller = [backbone.text.model, backbone.image_encoder]
    assert session.frozen and all(m is not c for m in session.frozen for c in caller)
    session.loss(np.arange(len(episode.support))).backward()
    for name, tensor in session.named_trainable.items():
        assert tensor.grad is not None, name
        assert torch.isfinite(tensor.grad).all() and tensor.grad.abs().sum() > 0, name
    for module in session.frozen:
        for name, param in module.named_parameters():
            assert not param.requires_grad and param.grad is None, name
    for module in caller:
        assert all(p.grad is None for p in module.parameters())
        assert not any(
            b._forward_pre_hooks or b._forward_hooks for b in module.modules()
        )  # hooks only on the session's copies


@pytest.mark.parametrize("adapter_cls", [CoopAdapter, IvlpAdapter, MapleAdapter])
def test_refuses_models_without_an_openai_text_tower(adapter_cls, episode) -> None:  # type: ignore[no-untyped-def]
    vision_only = tiny_vit_backbone()
    with pytest.raises(FewtransError, match="text tower"):
        adapter_cls().session(
            vision_only, episode.support, episode.class_names, adapter_cls.Config()
        )
    clip = tiny_clip_backbone()
    hf_like = dataclasses.replace(clip, text=copy.copy(clip.text))
    hf_like.text.model = torch.nn.Module()  # type: ignore[union-attr]
    with pytest.raises(FewtransError, match="OpenAI-style"):
        adapter_cls().session(hf_like, episode.support, episode.class_names, adapter_cls.Config())


def test_coop_context_equal_to_handcrafted_prompt_reproduces_encode_text(backbone, episode) -> None:  # type: ignore[no-untyped-def]
    names = ["cat", "traffic light", "dog"]
    model = backbone.text.model
    with torch.no_grad():
        expected = model.encode_text(backbone.text.tokenize([f"a photo of a {n}." for n in names]))
        photo = model.token_embedding(backbone.text.tokenize(["a photo of a"]))[0, 1:5]
    session = CoopAdapter().session(
        backbone, episode.support, episode.class_names, CoopAdapter.Config(n_ctx=4)
    )
    assert session.prompter.prompt_texts(["cat"]) == ["X X X X cat."]
    with torch.no_grad():
        session.ctx.copy_(photo)
        got = session.prompter.encode(names, session.ctx)
    assert torch.allclose(got, expected, atol=1e-5)
    # Word initialisation starts from exactly that context, hence from zero-shot CLIP.
    init = CoopAdapter().session(
        backbone, episode.support, episode.class_names, CoopAdapter.Config(ctx_init="a photo of a")
    )
    assert init.prompter.n_ctx == 4 and torch.equal(init.ctx.detach(), photo)
    logits = init.predictor().predict(episode.query)
    assert torch.allclose(logits, zero_shot_logits(backbone, episode), atol=1e-4)


def test_prograd_projection_never_opposes_the_zero_shot_direction() -> None:
    g = torch.Generator().manual_seed(0)
    conflicts = 0
    for trial in range(500):
        shape = [(7,), (3, 5), (2, 2, 4)][trial % 3]
        g_ce = torch.randn(*shape, generator=g, dtype=torch.float64)
        g_kl = torch.randn(*shape, generator=g, dtype=torch.float64) * 10 ** (trial % 5 - 2)
        projected = project_conflicting_gradient(g_ce, g_kl)
        assert projected.shape == g_ce.shape
        dot = float((projected * g_kl).sum())
        assert dot >= -1e-6
        if float((g_ce * g_kl).sum()) >= 0:
            assert torch.equal(projected, g_ce)
        else:
            conflicts += 1
            assert abs(dot) <= 1e-9 * float(g_kl.norm() * g_ce.norm())
            u = g_kl / g_kl.norm()
            assert torch.allclose(projected, g_ce - (g_ce * u).sum() * u)
    assert 100 < conflicts < 400
    aligned = torch.tensor([1.0, 2.0, -1.0])
    assert torch.equal(project_conflicting_gradient(aligned, 3 * aligned), aligned)
    assert torch.equal(project_conflicting_gradient(aligned, torch.zeros(3)), aligned)
    half = project_conflicting_gradient(torch.tensor([1.0, 0.0]), torch.tensor([-1.0, 0.0]), 0.5)
    assert half.tolist() == [0.5, 0.0]


def test_prograd_step_applies_the_projected_gradient(backbone, episode) -> None:  # type: ignore[no-untyped-def]
    torch.manual_seed(3)
    session = ProgradAdapter().session(
        backbone, episode.support, episode.class_names, ProgradAdapter.Config(n_ctx=4)
    )
    batch = np.arange(len(episode.support))
    index = torch.as_tensor(batch)
    logits = session.logits(index)
    ce = F.cross_entropy(logits, session.labels)
    kl = F.kl_div(
        F.log_softmax(logits, -1), F.softmax(session.zero_shot_logits, -1), reduction="batchmean"
    )
    (g_ce,) = torch.autograd.grad(ce, [session.ctx], retain_graph=True)
    (g_kl,) = torch.autograd.grad(kl, [session.ctx])
    session.loss(batch).backward()
    assert torch.allclose(session.ctx.grad, project_conflicting_gradient(g_ce, g_kl), atol=1e-6)
    assert float((session.ctx.grad * g_kl).sum()) >= -1e-6


@pytest.mark.parametrize(
    ("adapter_cls", "options"),
    [
        (IvlpAdapter, {"n_ctx_vision": 0, "depth": 1}),  # first layer = "a photo of a"
        (MapleAdapter, {"n_ctx": 0}),  # zero-length prompts in both towers
        (VptClipAdapter, {"n_tokens": 0}),
    ],
    ids=["ivlp-depth1", "maple-zero-length", "vpt-zero-length"],
)
def test_identity_settings_reproduce_zero_shot(adapter_cls, options, backbone, episode) -> None:  # type: ignore[no-untyped-def]
    session = adapter_cls().session(
        backbone, episode.support, episode.class_names, adapter_cls.Config(**options)
    )
    logits = session.predictor().predict(episode.query)
    assert torch.allclose(logits, zero_shot_logits(backbone, episode), atol=1e-4)


@pytest.mark.slow
def test_ivlp_deep_text_prompts_equal_to_frozen_states_reproduce_zero_shot(
    backbone, episode
) -> None:  # type: ignore[no-untyped-def]
    # Under the causal mask positions 1..4 do not see the class name: one state serves all.
    state = block_input(backbone, 1, "a photo of a cat.")[1:5]
    session = IvlpAdapter().session(
        backbone, episode.support, episode.class_names, IvlpAdapter.Config(n_ctx_vision=0)
    )
    assert session.text_deep.shape == (1, 4, 32)  # depth = min(9, 2 text blocks)
    with torch.no_grad():
        session.text_deep[0].copy_(state)
    logits = session.predictor().predict(episode.query)
    assert torch.allclose(logits, zero_shot_logits(backbone, episode), atol=1e-4)
    with torch.no_grad():
        session.text_deep.add_(torch.randn(session.text_deep.shape))  # the hook feeds block 1
    assert not torch.allclose(session.predictor().predict(episode.query), logits, atol=1e-2)


def test_maple_text_side_and_coupling(backbone, episode) -> None:  # type: ignore[no-untyped-def]
    from fewtrans_board.blocks.clip_common import handcrafted_text_features

    session = MapleAdapter().session(
        backbone, episode.support, episode.class_names, MapleAdapter.Config()
    )
    assert session.prompter.prompt_texts(["cat"]) == ["a photo of a cat."]
    with torch.no_grad():
        session.text_deep[0].copy_(block_input(backbone, 1, "a photo of a cat.")[1:3])
        texts = F.normalize(session.text_features(["cat", "dog"]), dim=-1)
        projected = session.image_prompts()
    assert torch.allclose(texts, handcrafted_text_features(backbone, ["cat", "dog"]), atol=1e-5)
    layers = [session.ctx, session.text_deep[0]]
    for proj, text, image in zip(session.projections, layers, projected, strict=True):
        assert torch.allclose(image, proj(text))


@pytest.mark.slow
def test_cocoop_grouping_of_text_passes_does_not_change_logits(
    backbone, episode, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    from fewtrans_board.methods.adapters.clip_prompts import cocoop

    torch.manual_seed(0)
    predictor = CocoopAdapter().fit(
        backbone, episode.support, episode.class_names, CocoopAdapter.Config(epochs=1)
    )
    together = predictor.predict(episode.query)
    monkeypatch.setattr(cocoop, "MAX_TEXT_SEQUENCES", 1)  # one image per text pass
    assert torch.allclose(predictor.predict(episode.query), together, atol=1e-5)


def tiny_clip_variant(text_changes: dict[str, Any]):  # type: ignore[no-untyped-def]
    """A tiny open_clip CLIP like ``tiny_clip_backbone()`` with changed text-tower options."""
    import open_clip

    from fewtrans_board.models.open_clip_family import backbone_from_open_clip
    from fewtrans_board.testing.tiny import register_tiny_clip_config

    name = register_tiny_clip_config()
    config = open_clip.get_model_config(name)
    torch.manual_seed(0)
    model = open_clip.model.CLIP(
        config["embed_dim"], config["vision_cfg"], {**config["text_cfg"], **text_changes}
    )
    return backbone_from_open_clip(
        model.eval(),
        open_clip.get_tokenizer(name),
        name="tiny-clip.variant",
        weights_id="tiny-clip-variant",
        architecture=name,
    )


def without_start_token(clip):  # type: ignore[no-untyped-def]
    """``clip`` with a tokenizer that writes no start token (e.g. some HF tokenizers)."""
    text = copy.copy(clip.text)
    original = clip.text.tokenize

    def tokenize(texts):  # type: ignore[no-untyped-def]
        tokens = original(texts)
        return torch.cat([tokens[:, 1:], torch.zeros_like(tokens[:, :1])], dim=1)

    text.tokenize = tokenize
    return dataclasses.replace(clip, text=text)


def start_adapter(adapter_cls, backbone, episode) -> None:  # type: ignore[no-untyped-def]
    config = adapter_cls.Config(epochs=1)
    if hasattr(adapter_cls, "session"):
        adapter_cls().session(backbone, episode.support, episode.class_names, config)
    else:
        adapter_cls().fit(backbone, episode.support, episode.class_names, config)


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["eos-pooling", "no-start-token"])
def test_token_editing_methods_refuse_other_token_layouts(layout, episode) -> None:  # type: ignore[no-untyped-def]
    if layout == "eos-pooling":
        clip = tiny_clip_variant({"pool_type": "eos", "eos_id": 49407})
        assert clip.text.model.text_pool_type == "eos"
    else:
        clip = without_start_token(tiny_clip_backbone())
        assert int(clip.text.tokenize(["cat"])[0, 0]) != 49406
    layout_message = r"start token at position 0 and end-of-text pooling .*\('argmax'\)"
    for adapter_cls in [*TEXT_PROMPTED, ClipLoraAdapter]:
        with pytest.raises(FewtransError, match=layout_message):
            start_adapter(adapter_cls, clip, episode)
    # Methods that never edit tokens still work on such towers.
    for adapter_cls in (TaskResAdapter, ClipAdapterAdapter):
        predictor = adapter_cls().fit(
            clip, episode.support, episode.class_names, adapter_cls.Config(epochs=1)
        )
        logits = predictor.predict_names(episode.query, ["cat", "dog", "fire truck"])
        assert logits.shape == (len(episode.query), 3) and torch.isfinite(logits).all()


@pytest.mark.slow
@pytest.mark.parametrize("adapter_cls", TEXT_PROMPTED, ids=lambda a: a.name)
def test_predict_names_scores_new_names_through_the_learned_prompts(
    adapter_cls, backbone, episode
) -> None:  # type: ignore[no-untyped-def]
    torch.manual_seed(4)
    session = adapter_cls().session(
        backbone, episode.support, episode.class_names, adapter_cls.Config()
    )
    with torch.no_grad():
        for tensor in session.trainable:
            tensor.add_(0.5 * torch.randn_like(tensor))
    base, novel = episode.class_names[:2], ["red panda", "fire truck"]
    names = [base[0], novel[0], base[1], novel[1]]
    got = session.predictor().predict_names(episode.query, names)
    scale = backbone.text.logit_scale
    with torch.no_grad():
        if isinstance(session, CocoopSession):
            images = clip_images(backbone, episode.query.pixels)
            contexts = session.ctx + session.meta_net(images).unsqueeze(1)
            texts = F.normalize(session.prompter.encode(names, contexts), dim=-1)
            expected = scale * torch.einsum("qcd,qd->qc", texts, images)
        else:
            visual = getattr(session, "model", backbone.text.model).visual  # prompted copy
            images = F.normalize(visual(episode.query.pixels), dim=-1)
            texts = F.normalize(session.prompter.encode(names, session.ctx), dim=-1)
            expected = scale * images @ texts.t()
    assert torch.allclose(got, expected, atol=1e-4)
    # The new names' prompts carry the perturbed context: far from the handcrafted ones.
    novel_texts = texts[..., [1, 3], :]
    handcrafted = clip_prompts(backbone, novel).expand_as(novel_texts)
    assert not torch.allclose(novel_texts, handcrafted, atol=1e-2)
    zero_shot = zero_shot_names(backbone, episode, names)
    assert not torch.allclose(got[:, [1, 3]], zero_shot[:, [1, 3]], atol=1e-2)


def test_kgcoop_loss_is_cross_entropy_plus_weighted_cosine_gap(backbone, episode) -> None:  # type: ignore[no-untyped-def]
    names, weight = episode.class_names, 3.0
    torch.manual_seed(5)
    session = KgcoopAdapter().session(
        backbone, episode.support, names, KgcoopAdapter.Config(n_ctx=4, kg_weight=weight)
    )
    batch = np.array([0, 3, 5])
    with torch.no_grad():
        prompted = F.normalize(session.prompter.encode(names, session.ctx), dim=-1)
        images = clip_images(backbone, episode.support.images.pixels[batch])
        logits = backbone.text.logit_scale * images @ prompted.t()
        ce = F.cross_entropy(logits, episode.support.labels[batch])
        gap = 1.0 - F.cosine_similarity(prompted, clip_prompts(backbone, names), dim=-1).mean()
        got = session.loss(batch)
    assert float(gap) > 0.05  # random context: the knowledge-guided term matters
    assert torch.allclose(got, ce + weight * gap, atol=1e-5)


@pytest.mark.slow
def test_cocoop_contexts_are_ctx_plus_meta_net_of_the_normalised_image(
    backbone, episode, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    torch.manual_seed(6)
    session = CocoopAdapter().session(
        backbone, episode.support, episode.class_names, CocoopAdapter.Config()
    )
    seen: list[torch.Tensor] = []
    encode = session.prompter.encode

    def spy(class_names, context):  # type: ignore[no-untyped-def]
        seen.append(context.detach().clone())
        return encode(class_names, context)

    monkeypatch.setattr(session.prompter, "encode", spy)
    batch = np.array([1, 4, 5])
    session.loss(batch)
    for pixels in (episode.support.images.pixels[batch], episode.query.pixels):
        images = clip_images(backbone, pixels)
        with torch.no_grad():
            bias = session.meta_net(images)  # [B, W], the same for every context token
            expected = torch.stack([session.ctx + b for b in bias])
        got = torch.cat(seen)
        assert got.shape == (len(pixels), 4, session.prompter.width)
        assert torch.allclose(got, expected, atol=1e-6)
        seen.clear()
        session.predictor().predict(episode.query)


@pytest.mark.slow
def test_cocoop_trains_with_batch_size_one_and_frees_each_group(
    backbone, episode, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    from fewtrans_board.methods.adapters.clip_prompts import cocoop

    assert CocoopAdapter.Config().batch_size == 1  # as in CoCoOp
    torch.manual_seed(0)
    session = CocoopAdapter().session(
        backbone, episode.support, episode.class_names, CocoopAdapter.Config()
    )
    batch = np.arange(len(episode.support))
    index = torch.as_tensor(batch)
    ce = F.cross_entropy(session.logits(index), session.labels[index])  # one graph
    single = torch.autograd.grad(ce, session.trainable)
    monkeypatch.setattr(cocoop, "MAX_TEXT_SEQUENCES", 1)  # one image per group
    loss = session.loss(batch)
    # No text-encoder pass is kept in the returned graph: each group's was freed.
    assert not any("LayerNorm" in name for name in graph_node_names(loss))
    loss.backward()
    assert torch.allclose(loss, ce, atol=1e-6)
    for tensor, grad in zip(session.trainable, single, strict=True):
        assert torch.allclose(tensor.grad, grad, atol=1e-6)


@pytest.mark.slow
def test_prograd_distillation_at_a_temperature_other_than_one(backbone, episode) -> None:  # type: ignore[no-untyped-def]
    temperature = 2.0
    batch = np.array([0, 2, 3, 5])
    index = torch.as_tensor(batch)
    teacher = (
        backbone.text.logit_scale
        * clip_images(backbone, episode.support.images.pixels[batch])
        @ clip_prompts(backbone, episode.class_names).t()
    )

    def soft_target_ce(logits: torch.Tensor, t: float) -> torch.Tensor:
        # ProGrad's reference form: cross-entropy to the softened teacher, times T^2.
        target = F.softmax(teacher / t, dim=-1)
        return -(target * F.log_softmax(logits / t, dim=-1)).sum(1).mean() * t * t

    # Near zero-shot CLIP, with labels the teacher ranks last, the CE and KD gradients can
    # conflict (else the projection would ignore the KD gradient); find such a state.
    for seed in range(20):
        torch.manual_seed(seed)
        session = ProgradAdapter().session(
            backbone,
            episode.support,
            episode.class_names,
            ProgradAdapter.Config(ctx_init="a photo of a", temperature=temperature),
        )
        with torch.no_grad():
            session.ctx.add_(0.3 * torch.randn_like(session.ctx))
        session.labels = session.labels.clone()
        session.labels[index] = teacher.argmin(-1)
        logits = session.logits(index)
        target = F.softmax(teacher / temperature, dim=-1)
        entropy = -(target * target.log()).sum(1).mean() * temperature**2
        kd = soft_target_ce(logits, temperature)
        assert torch.allclose(session.distillation(logits, index), kd - entropy, atol=1e-5)
        ce = F.cross_entropy(logits, session.labels[index])
        (g_ce,) = torch.autograd.grad(ce, [session.ctx], retain_graph=True)
        (g_kd,) = torch.autograd.grad(kd, [session.ctx], retain_graph=True)
        (g_kd_t1,) = torch.autograd.grad(soft_target_ce(logits, 1.0), [session.ctx])
        projected = project_conflicting_gradient(g_ce, g_kd)
        at_t1 = project_conflicting_gradient(g_ce, g_kd_t1)
        if float((g_ce * g_kd).sum()) < 0 and float((projected - at_t1).norm()) > 1e-3:
            break
    else:
        pytest.fail("no seed gave conflicting CE and KD gradients")
    session.loss(batch).backward()
    assert torch.allclose(session.ctx.grad, projected, atol=1e-6)


@pytest.mark.slow
def test_coop_runs_under_hpe_through_the_runner(tmp_path: Path) -> None:
    from fewtrans_board.api.model_spec import ModelSpec
    from fewtrans_board.registry.lookup import Registry
    from fewtrans_board.registry.manager import get_plugin_manager
    from fewtrans_board.results.load import load_run
    from fewtrans_board.runner.run import run_evaluation
    from fewtrans_board.runner.spec import RunSpec

    class ClipPromptsPlugin:
        @hookimpl
        def register_models(self, register):  # type: ignore[no-untyped-def]
            register(
                ModelSpec(
                    name="tiny-clip.test",
                    loader=lambda w, d: tiny_clip_backbone(),
                    family="open_clip",
                    architecture="tiny",
                    source="random-init",
                    modalities=("image", "text"),
                )
            )

    pm = get_plugin_manager(entry_points=False, extra_plugins={"clip-prompts": ClipPromptsPlugin()})
    spec = RunSpec(
        model="tiny-clip.test",
        adapter="coop",
        manifest=str(DIGITS),
        hpe="fewtrans-reference",
        config={"epochs": 1, "n_ctx": 4},
        limit=2,
    )
    report = run_evaluation(
        spec, Registry.from_plugin_manager(pm), tmp_path / "run", progress=False
    )
    assert report.episodes == 2 and report.configurations == 3  # lr x {1/5, 1, 5}
    rows = load_run(tmp_path / "run").table.to_pylist()
    configs = [r for r in rows if r["kind"] == "config"]
    assert len(configs) == 6 and all(0.0 <= r["accuracy"] <= 100.0 for r in rows)
    lrs = sorted({r["config"] for r in configs})
    assert len(lrs) == 3 and all('"epochs":1' in c.replace(" ", "") for c in lrs)
    assert {r["aggregation"] for r in rows if r["kind"] == "ensemble"} >= {"vote"}
