"""BSCD-FSL's SGD recipe (``bscd``) on the transfer baselines and IMS-f, against oracles.

The oracles are IBM/cdfsl-benchmark's loops written out by hand from ``finetune.py`` and
``multi_model_selection.py`` (the SGD updates too: ``g = grad + wd w``; the momentum buffer
starts as ``g`` and then moves as ``m b + (1 - d) g``; plain SGD ``w -= lr grad``), over the
toolkit's batch order (a ``RandomState(11)`` permutation per epoch, chunked by 4); the
FewTrans oracle is FewTrans's loop (Adam per group, per-step cosine to zero, normalised
features, head 1/0, backbone in eval mode). Everything runs a tiny random-init timm
ResNet (one BasicBlock per stage, as BSCD-FSL's ResNet-10) in float64 unless said.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fewtrans_board import ImageSet, SupportSet
from fewtrans_board.api.adapter import Adapter
from fewtrans_board.api.backbone import Backbone
from fewtrans_board.blocks.finetune import (
    FinetuneAdapter,
    FinetuneLastKAdapter,
    TransductiveFinetuneAdapter,
)
from fewtrans_board.methods.adapters.heads import LinearProbeAdapter
from fewtrans_board.methods.adapters.multi_model import (
    AllEmbeddingsAdapter,
    ImsfAdapter,
    finetuned_member,
    fit_head,
    median_mask,
)
from fewtrans_board.models.library import LibraryMember
from fewtrans_board.testing import toy_episode

LR, MOMENTUM, DAMPENING, DECAY, BATCH, EPOCHS = 0.01, 0.9, 0.9, 1e-3, 4, 100
"""finetune.py: classifier_opt = SGD(lr 0.01, momentum 0.9, dampening 0.9, weight_decay
0.001), delta_opt = SGD(lr 0.01), batch_size 4, total_epoch 100."""

SHORT = 3
"""Epochs the tests train (the recipe's 100 cut short; every rule runs from the second step)."""

RECIPE_ADAPTERS: list[type[Adapter]] = [
    LinearProbeAdapter,
    FinetuneAdapter,
    FinetuneLastKAdapter,
    TransductiveFinetuneAdapter,
    ImsfAdapter,
]


@pytest.fixture
def float64() -> Iterator[None]:
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(previous)


def tiny_resnet(dtype: torch.dtype = torch.float64, seed: int = 0) -> Backbone:
    """A random-init timm ResNet with one BasicBlock per stage (widths 8-32), in eval mode."""
    from timm.models.resnet import BasicBlock, ResNet

    torch.manual_seed(seed)
    model = ResNet(
        BasicBlock,
        (1, 1, 1, 1),
        num_classes=0,
        stem_width=8,
        channels=(8, 16, 16, 32),
        zero_init_last=False,
    )
    return Backbone(
        name="tiny-resnet.random",
        image_encoder=model.to(dtype).eval(),
        feature_dim=32,
        image_size=32,
        weights_id=f"tiny-resnet-seed{seed}",
    )


def episode(dtype: torch.dtype = torch.float64) -> tuple[SupportSet, ImageSet]:
    """8 support images (two batches of 4: train-mode BatchNorm needs more than one image
    where the ResNet's last map is 1x1) and 9 queries."""
    toy = toy_episode(shots=(3, 3, 2), n_query_per_class=3, seed=4)
    support = SupportSet(ImageSet(toy.support.images.pixels.to(dtype)), toy.support.labels, 3)
    return support, ImageSet(toy.query.pixels.to(dtype))


def bscd(adapter: type[Adapter], **changes: Any) -> Any:
    """The adapter's ``bscd`` recipe as a Config, with ``changes``."""
    return adapter.Config.from_dict(adapter.recipe("bscd").values_for()).replace(**changes)


def state(module: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def batches(n: int, epochs: int) -> Iterator[torch.Tensor]:
    """The toolkit's batch order: a fresh permutation per epoch of one RandomState(11),
    cut into batches of 4 as finetune.py's ``range(0, support_size, batch_size)``."""
    rng = np.random.RandomState(11)
    for _ in range(epochs):
        order = rng.permutation(n)
        for j in range(0, n, BATCH):
            yield torch.as_tensor(order[j : min(j + BATCH, n)])


def sgd_momentum_step(params: list[torch.Tensor], buffers: dict[int, torch.Tensor]) -> None:
    """classifier_opt.step(), written out: ``g = grad + wd w``; ``b = g`` at the first step,
    then ``b = m b + (1 - d) g``; ``w -= lr b``.

    Each line rounds as torch's SGD does (fused ``add`` with ``alpha``): train-mode BatchNorm
    on batches of 4 amplifies a last-bit difference to ~1e-9 within a few steps.
    """
    with torch.no_grad():
        for p in params:
            assert p.grad is not None
            g = p.grad.add(p, alpha=DECAY)
            previous = buffers.get(id(p))
            buffer = (
                g.clone()
                if previous is None
                else previous.mul_(MOMENTUM).add_(g, alpha=1 - DAMPENING)
            )
            buffers[id(p)] = buffer
            p.add_(buffer, alpha=-LR)


def plain_sgd_step(params: list[torch.Tensor]) -> None:
    """delta_opt.step(), written out: ``w -= lr grad``."""
    with torch.no_grad():
        for p in params:
            assert p.grad is not None
            p.add_(p.grad, alpha=-LR)


def cdfsl_finetune(
    backbone: Backbone,
    support: SupportSet,
    seed: int,
    epochs: int,
    trains: str = "all",
    median: bool = False,
    backbone_momentum: bool = False,
) -> tuple[nn.Module, nn.Linear]:
    """finetune.py's episode loop, by hand (``trains``: ``all``, ``last-1`` or ``none``).

    ``median`` and ``backbone_momentum``: multi_model_selection.py's fine-tuning (gradient
    entries below their tensor's median magnitude zeroed; the classifier's SGD on the
    backbone too).
    """
    torch.manual_seed(seed)  # the adapter's head draws the same nn.Linear initialisation
    classifier = nn.Linear(backbone.feature_dim, support.n_way)
    model = copy.deepcopy(backbone.image_encoder)
    if trains == "last-1":
        model.requires_grad_(False)
        model.layer4.requires_grad_(True)  # type: ignore[union-attr]
    trainable = [p for p in model.parameters() if p.requires_grad] if trains != "none" else []
    model.train() if trains != "none" else model.eval()
    pixels, labels = support.images.pixels, support.labels
    head_buffers: dict[int, torch.Tensor] = {}
    for index in batches(len(labels), epochs):
        for p in [*classifier.parameters(), *model.parameters()]:
            p.grad = None
        loss = F.cross_entropy(classifier(model(pixels[index])), labels[index])
        loss.backward()  # type: ignore[no-untyped-call]
        if median:
            for p in trainable:
                assert p.grad is not None
                p.grad[torch.lt(torch.abs(p.grad), torch.abs(p.grad).median())] = 0.0
        sgd_momentum_step(list(classifier.parameters()), head_buffers)
        if backbone_momentum:
            sgd_momentum_step(trainable, head_buffers)
        else:
            plain_sgd_step(trainable)
    return model.eval(), classifier


def query_logits(model: nn.Module, classifier: nn.Module, query: ImageSet) -> torch.Tensor:
    with torch.no_grad():
        return classifier(model.eval()(query.pixels))  # type: ignore[no-any-return]


def batch_norm_buffers(module: nn.Module) -> list[torch.Tensor]:
    return [
        b
        for m in module.modules()
        if isinstance(m, nn.modules.batchnorm._BatchNorm)
        for b in (m.running_mean, m.running_var)
        if b is not None
    ]


# --- the recipes: values, sources, registration -------------------------------------------


@pytest.mark.parametrize("adapter", RECIPE_ADAPTERS, ids=lambda a: a.name)
def test_every_bscd_recipe_registers_and_holds_the_papers_values(adapter: type[Adapter]) -> None:
    adapter.check_class()  # what registration runs: every recipe builds a valid Config
    recipe = adapter.recipe("bscd")
    config = adapter.Config.from_dict(recipe.values_for("eurosat"))
    assert "cdfsl-benchmark" in recipe.source and "BSCD-FSL" in recipe.source
    assert (config.optimizer, config.momentum, config.dampening, config.weight_decay) == (
        "sgd",
        MOMENTUM,
        DAMPENING,
        DECAY,
    )
    assert (config.lr_head, config.epochs, config.batch_size, config.schedule) == (
        LR,
        EPOCHS,
        BATCH,
        "constant",
    )
    assert (config.normalize_features, config.head_init) == (False, "default")
    if adapter is not LinearProbeAdapter:
        assert config.lr_backbone == LR and config.backbone_train_mode
        assert config.backbone_optimizer == ("same" if adapter is ImsfAdapter else "sgd")
    schema = adapter.schema()
    assert "bscd" in [r["name"] for r in schema["recipes"]]


def test_last_k_declares_the_three_ks_of_the_paper_and_the_benchmark_runs_bscd() -> None:
    from fewtrans_board.leaderboard.sub_benchmarks import SUB_BENCHMARKS
    from fewtrans_board.runner.centres import recipe_centre

    ks = {r.name: r.values["k"] for r in FinetuneLastKAdapter.own_recipes()}
    assert ks == {"bscd": 1, "bscd-last-2": 2, "bscd-last-3": 3}
    benchmark = SUB_BENCHMARKS["bscd"]
    assert benchmark.recipe == "bscd" and "published" in benchmark.hpe_protocols
    assert benchmark.recipe_rule == "both"
    centre, recipe = recipe_centre(FinetuneAdapter, "bscd", "eurosat", {}, None)
    assert recipe is FinetuneAdapter.recipe("bscd") and centre == bscd(FinetuneAdapter)
    # not inherited: the PEFT subclasses of FinetuneAdapter declare no recipe of their own
    from fewtrans_board.methods.adapters.vision_peft.bitfit import BitFitAdapter

    assert BitFitAdapter.own_recipes() == ()


def test_the_bscd_fields_refuse_what_they_cannot_do() -> None:
    from fewtrans_board.core.errors import ConfigError

    with pytest.raises(ConfigError, match="SGD settings"):
        FinetuneAdapter.Config(dampening=0.9)  # adam
    with pytest.raises(ConfigError, match="head_init"):
        FinetuneAdapter.Config.from_dict({"head_init": "zeros"})
    with pytest.raises(ConfigError, match="backbone_optimizer"):
        FinetuneAdapter.Config.from_dict({"backbone_optimizer": "adamw"})


# --- (a) the updates follow finetune.py ---------------------------------------------------


@pytest.mark.parametrize(
    ("adapter", "trains"),
    [(FinetuneAdapter, "all"), (FinetuneLastKAdapter, "last-1"), (LinearProbeAdapter, "none")],
    ids=["finetune", "finetune-last-k", "linear-probe"],
)
def test_bscd_training_follows_cdfsl_finetune_by_hand(
    adapter: type[Adapter], trains: str, float64: None
) -> None:
    """Head: SGD with momentum, dampening and weight decay; backbone: plain SGD in train
    mode (or frozen in eval mode: linear probe); raw features; torch's nn.Linear init."""
    backbone = tiny_resnet()
    support, query = episode()
    before = state(backbone.image_encoder)
    torch.manual_seed(5)
    predictor: Any = adapter().fit(backbone, support, [], bscd(adapter, epochs=SHORT))
    model, classifier = cdfsl_finetune(backbone, support, 5, SHORT, trains)
    expected = query_logits(model, classifier, query)
    got = predictor.predict(query)
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-10)
    head = predictor.head
    torch.testing.assert_close(head.weight, classifier.weight, rtol=0, atol=1e-12)
    # the recipe does train: the head moved from its initialisation
    torch.manual_seed(5)
    assert not torch.allclose(head.weight, nn.Linear(32, 3).weight)
    after = state(backbone.image_encoder)
    assert all(torch.equal(before[k], after[k]) for k in before)  # the caller's backbone


def test_bscd_transductive_finetune_predicts_with_the_query_batch_statistics(
    float64: None,
) -> None:
    backbone = tiny_resnet()
    support, query = episode()
    adapter = TransductiveFinetuneAdapter
    torch.manual_seed(5)
    predictor: Any = adapter().fit(backbone, support, [], bscd(adapter, epochs=SHORT))
    model, classifier = cdfsl_finetune(backbone, support, 5, SHORT)
    model.eval()
    for m in model.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            m.train()
    with torch.no_grad():
        expected = classifier(model(query.pixels))
    torch.testing.assert_close(predictor.predict(query), expected, rtol=0, atol=1e-10)


def test_ims_f_fine_tunes_each_model_as_multi_model_selection_does(float64: None) -> None:
    """SGD with momentum, dampening and weight decay on backbone and head, gradients below
    their tensor's median magnitude zeroed, train mode."""
    backbone = tiny_resnet()
    support, _ = episode()
    member = LibraryMember("tiny", backbone.image_encoder, 32, 32)
    before = state(backbone.image_encoder)
    torch.manual_seed(5)
    encoder = finetuned_member(member, support, bscd(ImsfAdapter, epochs=SHORT), "cpu")
    model, _ = cdfsl_finetune(backbone, support, 5, SHORT, median=True, backbone_momentum=True)
    for (name, got), expected in zip(
        encoder.state_dict().items(), model.state_dict().values(), strict=True
    ):
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-12, msg=name)
    assert not encoder.training and not any(p.requires_grad for p in encoder.parameters())
    assert all(torch.equal(before[k], v) for k, v in state(backbone.image_encoder).items())
    assert all(not p._backward_hooks for p in encoder.parameters())  # the masks are removed


def test_median_mask_is_the_scripts_in_place_rule() -> None:
    grad = torch.randn(6, 5, generator=torch.Generator().manual_seed(0))
    expected = grad.clone()
    expected[torch.lt(torch.abs(expected), torch.abs(expected).median())] = 0.0
    assert torch.equal(median_mask(grad), expected)
    assert int((median_mask(grad) == 0).sum()) == 14  # below the lower middle of 30 values


# --- (b) BatchNorm statistics move in the adapter's copy only -----------------------------


@pytest.mark.parametrize("adapter", [FinetuneAdapter, FinetuneLastKAdapter], ids=lambda a: a.name)
def test_train_mode_moves_the_copys_batch_norm_statistics_only(
    adapter: type[Adapter], float64: None
) -> None:
    backbone = tiny_resnet()
    support, _ = episode()
    original = [b.clone() for b in batch_norm_buffers(backbone.image_encoder)]
    torch.manual_seed(5)
    trained: Any = adapter().fit(backbone, support, [], bscd(adapter, epochs=SHORT))
    model, _ = cdfsl_finetune(
        backbone, support, 5, SHORT, "last-1" if adapter.name[-1] == "k" else "all"
    )
    moved = batch_norm_buffers(trained.encoder)
    assert all(not torch.allclose(m, o) for m, o in zip(moved, original, strict=True))
    for got, expected in zip(moved, batch_norm_buffers(model), strict=True):
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-12)
    assert all(
        torch.equal(b, o)
        for b, o in zip(batch_norm_buffers(backbone.image_encoder), original, strict=True)
    )
    assert trained.encoder is not backbone.image_encoder and not trained.encoder.training
    torch.manual_seed(5)
    fewtrans: Any = adapter().fit(backbone, support, [], adapter.Config(epochs=1, batch_size=4))
    assert all(  # eval mode (the default): the statistics stay the pretrained ones
        torch.equal(b, o)
        for b, o in zip(batch_norm_buffers(fewtrans.encoder), original, strict=True)
    )


def test_train_mode_plans_train_one_configuration_at_a_time(float64: None) -> None:
    from tests.test_lockstep import recording

    backbone = tiny_resnet()
    support, query = episode()
    grid = [bscd(FinetuneAdapter, epochs=1), bscd(FinetuneAdapter, epochs=2, lr_head=0.02)]
    options, reports = recording()
    batched = FinetuneAdapter().fit_many(backbone, support, [], grid, [3, 4], options=options)
    assert "train mode" in str(reports[0].fallback)
    for predictor, config, seed in zip(batched, grid, [3, 4], strict=True):
        torch.manual_seed(seed)
        looped = FinetuneAdapter().fit(backbone, support, [], config)
        assert torch.equal(predictor.predict(query), looped.predict(query))


def test_bscd_linear_probe_heads_batch_exactly_as_the_loop(float64: None) -> None:
    backbone = tiny_resnet()
    support, query = episode()
    centre = bscd(LinearProbeAdapter, epochs=SHORT)
    grid = [centre, centre.replace(lr_head=0.02), centre.replace(epochs=1)]
    seeds = [3, 4, 5]
    batched = LinearProbeAdapter().fit_many(backbone, support, [], grid, seeds)
    for predictor, config, seed in zip(batched, grid, seeds, strict=True):
        torch.manual_seed(seed)
        looped = LinearProbeAdapter().fit(backbone, support, [], config)
        torch.testing.assert_close(
            predictor.predict(query), looped.predict(query), rtol=0, atol=1e-10
        )
    assert not torch.allclose(batched[0].predict(query), batched[1].predict(query))


# --- (c) the defaults are FewTrans's ------------------------------------------------------


def fewtrans_finetune(
    backbone: Backbone, support: SupportSet, seed: int, config: Any, trains: bool
) -> tuple[nn.Module, nn.Linear]:
    """FewTrans's loop: Adam per group, per-step cosine to 0, normalised features, head
    weight 1 and bias 0, the backbone copy in eval mode."""
    torch.manual_seed(seed)
    classifier = nn.Linear(backbone.feature_dim, support.n_way)
    with torch.no_grad():
        classifier.weight.fill_(1.0)
        classifier.bias.zero_()
    model = copy.deepcopy(backbone.image_encoder).eval()
    groups = [(list(classifier.parameters()), config.lr_head)]
    if trains:
        groups.append((list(model.parameters()), config.lr_backbone))
    optimisers = [(torch.optim.Adam(params, lr=lr), lr) for params, lr in groups]
    pixels, labels = support.images.pixels, support.labels
    n = len(labels)
    steps = config.epochs * math.ceil(n / config.batch_size)
    rng = np.random.RandomState(11)
    step = 0
    for _ in range(config.epochs):
        order = rng.permutation(n)
        for j in range(0, n, config.batch_size):
            index = torch.as_tensor(order[j : j + config.batch_size])
            for optimiser, lr in optimisers:
                for group in optimiser.param_groups:
                    group["lr"] = 0.5 * lr * (1 + math.cos(math.pi * step / steps))
                optimiser.zero_grad()
            features = F.normalize(model(pixels[index]), dim=-1)
            F.cross_entropy(classifier(features), labels[index]).backward()  # type: ignore[no-untyped-call]
            for optimiser, _ in optimisers:
                optimiser.step()
            step += 1
    return model, classifier


@pytest.mark.parametrize("adapter", [FinetuneAdapter, LinearProbeAdapter], ids=lambda a: a.name)
def test_the_default_configuration_is_still_the_fewtrans_recipe(
    adapter: type[Adapter], float64: None
) -> None:
    backbone = tiny_resnet()
    support, query = episode()
    config = adapter.Config().replace(epochs=SHORT, batch_size=3)
    torch.manual_seed(5)
    predictor: Any = adapter().fit(backbone, support, [], config)
    model, classifier = fewtrans_finetune(
        backbone, support, 5, config, trains=adapter is FinetuneAdapter
    )
    with torch.no_grad():
        expected = classifier(F.normalize(model.eval()(query.pixels), dim=-1))
    got = predictor.predict(query)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-10)
    assert torch.equal(got.argmax(1), expected.argmax(1))
    many = adapter().fit_many(backbone, support, [], [config], [5])[0]
    torch.testing.assert_close(many.predict(query), got, rtol=0, atol=1e-12)


def test_the_multi_model_head_defaults_to_the_fewtrans_probe_head() -> None:
    from fewtrans_board.methods.adapters.random_embedding import fit_probe_head

    generator = torch.Generator().manual_seed(1)
    features = F.normalize(torch.randn(10, 6, generator=generator), dim=-1)
    labels = torch.arange(10) % 3
    config = AllEmbeddingsAdapter.Config(epochs=4, batch_size=3)
    ours, theirs = (
        fit_head(features, labels, 3, config),
        fit_probe_head(features, labels, 3, config, "cpu"),
    )
    assert torch.equal(ours.weight, theirs.weight) and torch.equal(ours.bias, theirs.bias)


# --- IMS-f's selection under the recipe ---------------------------------------------------


def test_the_head_cv_classifier_keeps_the_informative_layer() -> None:
    from fewtrans_board.methods.adapters.layer_selection import HeadClassifier, select_layers

    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(4), 5)
    informative = (rng.normal(size=(4, 8)) * 3)[labels] + rng.normal(size=(20, 8))
    noise = [rng.normal(size=(20, 8)) for _ in range(2)]
    config = bscd(ImsfAdapter)
    torch.manual_seed(0)
    fold_loss = HeadClassifier(config, config.selection_epochs, 4)
    selected, record = select_layers(
        [[noise[0], informative], [noise[1]]], labels, fold_loss, normalize=False
    )
    assert selected == [(0, 1)] and record["cv"] == "5-fold"
    assert record["stage1"][0]["cv_loss"] < min(record["stage1"][0]["layer_losses"][:1])


def test_ims_f_runs_the_bscd_recipe_end_to_end() -> None:
    backbone = tiny_resnet(torch.float32)
    support, query = episode(torch.float32)
    before = state(backbone.image_encoder)
    config = bscd(ImsfAdapter, epochs=2, selection_epochs=2)
    torch.manual_seed(5)
    predictor: Any = ImsfAdapter().fit(backbone, support, [], config)
    logits = predictor.predict(query)
    assert logits.shape == (9, 3) and bool(torch.isfinite(logits).all())
    assert "head's recipe" in predictor.record["classifier"]
    assert not predictor.normalize
    assert all(torch.equal(before[k], v) for k, v in state(backbone.image_encoder).items())
