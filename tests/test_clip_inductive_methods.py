"""SEP, SEPRES, PromptSRC, TCP and CoPrompt: contract, gradient flow and mechanics."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fewtrans_board.blocks.clip_common import handcrafted_text_features
from fewtrans_board.core.errors import FewtransError
from fewtrans_board.methods.adapters.clip_prompts import (
    CopromptAdapter,
    PromptSrcAdapter,
    SepAdapter,
    SepresAdapter,
    TcpAdapter,
)
from fewtrans_board.methods.adapters.clip_prompts.descriptions import (
    descriptions_for,
    import_json,
    parse,
)
from fewtrans_board.methods.adapters.clip_prompts.fusion import TokenFusion, top_tokens
from fewtrans_board.methods.adapters.clip_prompts.promptsrc import gpa_weights
from fewtrans_board.testing import check_adapter, tiny_clip_backbone, toy_episode

NEW = (SepAdapter, SepresAdapter, PromptSrcAdapter, TcpAdapter, CopromptAdapter)
FAST: dict[str, dict[str, Any]] = {a.name: {"epochs": 2} for a in NEW}
FAST["coprompt"]["missing_descriptions"] = "template"
EXPECTED_TRAINABLE = {
    "sep": {"ctx", "visual_prompts", "prototypes", "text_fusion", "visual_fusion"},
    "sepres": {"ctx", "visual_prompts", "prototypes", "text_fusion", "visual_fusion", "residual"},
    "promptsrc": {"ctx", "text_deep", "visual_prompts"},
    "tcp": {"ctx", "meta_net"},
    "coprompt": {"ctx", "text_deep", "projections", "image_adapter", "text_adapter"},
}


@pytest.fixture(scope="module")
def backbone():  # type: ignore[no-untyped-def]
    return tiny_clip_backbone(seed=1)


@pytest.fixture(scope="module")
def episode():  # type: ignore[no-untyped-def]
    return toy_episode(shots=(2, 1, 3), seed=2)


def session_of(adapter_cls, backbone, episode, **options):  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    config = adapter_cls.Config(**{**FAST[adapter_cls.name], **options})
    return adapter_cls().session(backbone, episode.support, episode.class_names, config)


@pytest.mark.slow
@pytest.mark.parametrize("adapter_cls", NEW, ids=lambda a: a.name)
def test_contract_and_predict_names(adapter_cls, backbone, episode) -> None:  # type: ignore[no-untyped-def]
    config = adapter_cls.Config(**FAST[adapter_cls.name])
    report = check_adapter(adapter_cls, config=config)
    assert report.passed[-1] == "fit_many agrees with fit"
    predictor = adapter_cls().fit(backbone, episode.support, episode.class_names, config)
    novel = predictor.predict_names(episode.query, ["red panda", "fire truck"])
    assert tuple(novel.shape) == (len(episode.query), 2) and torch.isfinite(novel).all()


@pytest.mark.slow
@pytest.mark.parametrize("adapter_cls", NEW, ids=lambda a: a.name)
def test_only_method_parameters_get_gradients(adapter_cls, backbone, episode) -> None:  # type: ignore[no-untyped-def]
    session = session_of(adapter_cls, backbone, episode)
    assert {n.split(".")[0] for n in session.named_trainable} == EXPECTED_TRAINABLE[
        adapter_cls.name
    ]
    session.loss(np.arange(len(episode.support))).backward()
    for name, tensor in session.named_trainable.items():
        assert tensor.grad is not None and torch.isfinite(tensor.grad).all(), name
        assert tensor.grad.abs().sum() > 0, name
    for module in session.frozen:
        assert all(p.grad is None and not p.requires_grad for p in module.parameters())
    for module in (backbone.text.model, backbone.image_encoder):
        assert all(p.grad is None for p in module.parameters())
        assert not any(m._forward_pre_hooks or m._forward_hooks for m in module.modules())


def test_token_fusion_is_scaled_cross_attention_then_gated_mlp() -> None:
    torch.manual_seed(0)
    fusion = TokenFusion(8, hidden=16)
    with torch.no_grad():
        fusion.scale1.fill_(0.3)
        fusion.scale2.fill_(0.6)
    tokens, prompts = torch.randn(2, 3, 8), torch.randn(2, 3, 8)
    keys = fusion.ln_1(tokens)
    attended, _ = fusion.attn(fusion.ln_1(prompts), keys, keys)
    fused = 0.3 * tokens + 0.7 * attended
    expected = 0.6 * fused + 0.4 * fusion.mlp(fusion.ln_2(fused))
    assert torch.allclose(fusion(tokens, prompts), expected, atol=1e-6)


def test_visual_token_selection_is_per_image() -> None:
    x = torch.zeros(2, 5, 4)
    x[0, 3] = 3.0
    x[0, 1] = 2.0
    x[1, 4] = 5.0
    x[1, 0] = 1.0
    chosen = top_tokens(x, 2)
    assert torch.equal(chosen[0], x[0, [3, 1]]) and torch.equal(chosen[1], x[1, [4, 0]])


@pytest.mark.slow
@pytest.mark.parametrize(
    "adapter_cls",
    [SepAdapter, SepresAdapter, PromptSrcAdapter, CopromptAdapter],
    ids=lambda a: a.name,
)
def test_query_logits_do_not_depend_on_other_queries(adapter_cls, backbone, episode) -> None:  # type: ignore[no-untyped-def]
    from fewtrans_board.api.episode_data import ImageSet

    predictor = session_of(adapter_cls, backbone, episode).predictor()
    together = predictor.predict(episode.query)
    alone = torch.cat(
        [
            predictor.predict(ImageSet(episode.query.pixels[i : i + 1]))
            for i in range(len(episode.query))
        ]
    )
    assert torch.allclose(together, alone, atol=1e-4)


def test_sep_and_sepres_features_and_loss(backbone, episode) -> None:  # type: ignore[no-untyped-def]
    sep = session_of(SepAdapter, backbone, episode)
    res = session_of(SepresAdapter, backbone, episode)
    # the zero-initialised residual changes nothing at the start
    assert torch.allclose(
        sep.predictor().predict(episode.query), res.predictor().predict(episode.query), atol=1e-5
    )
    with torch.no_grad():
        res.residual.copy_(torch.randn_like(res.residual))
        prompted = F.normalize(res.prompter.encode(res.class_names, res.ctx), dim=-1)
        handcrafted = handcrafted_text_features(backbone, res.class_names)
        expected = F.normalize(prompted + handcrafted + 0.1 * res.residual, dim=-1)
        assert torch.allclose(res.text_features(res.class_names), expected, atol=1e-5)
        # unseen names get no residual
        new = res.text_features(["fire truck"])
        plain = F.normalize(
            F.normalize(res.prompter.encode(["fire truck"], res.ctx), dim=-1)
            + handcrafted_text_features(backbone, ["fire truck"]),
            dim=-1,
        )
        assert torch.allclose(new, plain, atol=1e-5)
    batch = np.arange(len(episode.support))
    with torch.no_grad():
        frozen = sep.frozen_images
        images = sep.fused_images(sep.pixels, frozen)
        prompted = F.normalize(sep.model.visual(sep.pixels), dim=-1)
        assert torch.allclose(images, F.normalize(prompted + frozen, dim=-1), atol=1e-5)
        texts = sep.text_features(sep.class_names)
        head = F.normalize(sep.prototypes, dim=-1)
        labels = sep.labels
        expected_loss = (
            F.cross_entropy(sep.logit_scale * images @ texts.t(), labels)
            + 8.0 * (1 - F.cosine_similarity(texts, sep.handcrafted).mean())
            + 6.0 * (1 - F.cosine_similarity(frozen, images).mean())
            + 0.5
            * (
                F.cross_entropy(10 * images @ head.t(), labels)
                + F.cross_entropy(10 * frozen @ head.t(), labels)
            )
        )
        assert torch.allclose(sep.loss(batch), expected_loss, atol=1e-5)
    # the prototype head starts at the normalised class means of frozen support features
    means = torch.stack([frozen[labels == c].mean(0) for c in range(3)])
    assert torch.allclose(
        F.normalize(sep.prototypes.detach(), dim=-1), F.normalize(means, dim=-1), atol=1e-6
    )


@pytest.mark.slow
def test_promptsrc_gaussian_prompt_aggregation(backbone, episode) -> None:  # type: ignore[no-untyped-def]
    weights = gpa_weights(50, 0.9, 0.1)
    assert len(weights) == 50 and math.isclose(sum(weights), 1.0) and int(np.argmax(weights)) == 44
    assert gpa_weights(3, 5.0, 0.001) == [0.0, 0.0, 1.0]  # all mass past the end: last epoch
    session = session_of(PromptSrcAdapter, backbone, episode, epochs=3)
    snapshots = []
    for epoch in (1, 2, 3):
        with torch.no_grad():
            for tensor in session.named_trainable.values():
                tensor.add_(torch.randn_like(tensor))
        snapshots.append({k: v.detach().clone() for k, v in session.named_trainable.items()})
        if epoch < 3:
            session.accumulate(epoch)
    session.finish()
    w = gpa_weights(3, 0.9, 0.1)
    for name, tensor in session.named_trainable.items():
        expected = sum(w[i] * snapshots[i][name] for i in range(3))
        assert torch.allclose(tensor, expected, atol=1e-6), name


@pytest.mark.slow
def test_promptsrc_loss_is_ce_plus_l1_plus_kl(backbone, episode) -> None:  # type: ignore[no-untyped-def]
    session = session_of(PromptSrcAdapter, backbone, episode)
    batch = np.arange(len(episode.support))
    with torch.no_grad():
        images = F.normalize(session.model.visual(session.pixels), dim=-1)
        texts = F.normalize(session.text_features(session.class_names), dim=-1)
        logits = session.logit_scale * images @ texts.t()
        zs = session.logit_scale * session.frozen_images @ session.targets.t()
        p_zs = F.softmax(zs, dim=1)
        kl = (p_zs * (F.log_softmax(zs, 1) - F.log_softmax(logits, 1))).sum() / logits.numel()
        expected = (
            F.cross_entropy(logits, session.labels)
            + 25.0 * (texts - session.targets).abs().mean()
            + 10.0 * (images - session.frozen_images).abs().mean()
            + kl
        )
        assert torch.allclose(session.loss(batch), expected, atol=1e-5)


def test_tcp_injects_class_tokens_before_its_layer(backbone, episode) -> None:  # type: ignore[no-untyped-def]
    session = session_of(TcpAdapter, backbone, episode)
    assert session.layer == 1  # layer 8 capped at the tiny model's last block
    seen: list[torch.Tensor] = []
    handle = session.text.transformer.resblocks[1].register_forward_pre_hook(
        lambda module, args, kwargs: seen.append(args[0].detach().clone()), with_kwargs=True
    )
    with torch.no_grad():
        session.text_features(session.class_names)
        tokens = session.meta_net(session.handcrafted).view(3, 4, -1)
    handle.remove()
    # hooks run in registration order: TCP's replacement, then the spy above
    assert torch.allclose(seen[0][:, 1:5], tokens, atol=1e-6)
    assert session._class_tokens is None  # cleared after each text pass


@pytest.mark.slow
def test_coprompt_descriptions_and_consistency(
    backbone, episode, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    assert len(descriptions_for(["five", "zero"], None)[0]) == 3  # shipped digits file
    with pytest.raises(FewtransError, match="no descriptions"):
        descriptions_for(["class 0"], None)
    assert descriptions_for(["class 0"], "a photo of a {}.") == [["a photo of a class 0."]]
    with pytest.raises(FewtransError, match=":2: expected"):
        parse(["a\tb", "no tab here"], "f.txt")
    source = tmp_path / "dogs_prompt.json"
    source.write_text('{"golden_retriever": ["A large dog.", "Golden  fur."]}')
    monkeypatch.setenv("FEWTRANS_BOARD_DESCRIPTIONS", str(tmp_path / "d"))
    assert import_json(source, tmp_path / "d" / "dogs.txt") == 2
    assert descriptions_for(["golden retriever"], None) == [["A large dog.", "Golden fur."]]
    with pytest.raises(FewtransError, match="no descriptions"):
        CopromptAdapter().session(
            backbone, episode.support, episode.class_names, CopromptAdapter.Config()
        )
    session = session_of(CopromptAdapter, backbone, episode, augmentation="none")
    batch = np.arange(len(episode.support))
    with torch.no_grad():
        torch.manual_seed(5)
        got = session.loss(batch)
        images = session.adapted_images(session.pixels)
        texts = session.text_features(session.class_names)
        targets = torch.stack([d[0] for d in session.descriptions])  # one template each
        expected = F.cross_entropy(
            session.logit_scale * images @ texts.t(), session.labels
        ) + session.weight * (
            (1 - F.cosine_similarity(texts, targets).mean())
            + (1 - F.cosine_similarity(images, session.frozen_images).mean())
        )
        assert torch.allclose(got, expected, atol=1e-5)
        raw = session.model.visual(session.pixels)
        mixed = F.normalize(0.1 * session.image_adapter(raw) + 0.9 * raw, dim=-1)
        assert torch.allclose(images, mixed, atol=1e-6)


def test_new_methods_refuse_bad_options(backbone, episode) -> None:  # type: ignore[no-untyped-def]
    bad = [
        (SepAdapter, {"n_ctx_vision": 0}),
        (PromptSrcAdapter, {"gpa_std": 0.0}),
        (TcpAdapter, {"layer": 0}),
        (CopromptAdapter, {"missing_descriptions": "guess"}),
    ]
    for adapter_cls, options in bad:
        with pytest.raises(FewtransError):
            adapter_cls().session(
                backbone, episode.support, episode.class_names, adapter_cls.Config(**options)
            )
