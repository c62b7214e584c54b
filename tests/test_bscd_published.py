"""BSCD-FSL Tables 2-4 under ``--hpe published``: Random, cosine, mean-centroid, all embeddings.

Each of these adapters declares recipe ``bscd``, and ``evaluate --hpe published`` runs it on
a BSCD-protocol digits manifest. The recipes are checked against oracles written from the
paper and IBM/cdfsl-benchmark: the mean-centroid's cosine similarity to the class means
(BSCD-FSL Eq. 2, d = negative cosine), the cosine classifier's SGD updates written out by
hand, the Random baseline's ResNet-10 initialisation (backbone.py's fan-out normal) and its
head against the linear probe's ``bscd`` recipe (itself checked by hand in
``test_bscd_recipe.py``) on the re-initialised encoder.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fewtrans_board.api.adapter import Adapter
from fewtrans_board.api.backbone import Backbone
from fewtrans_board.methods.adapters.heads import CosineClassifierAdapter, LinearProbeAdapter
from fewtrans_board.methods.adapters.multi_model import AllEmbeddingsAdapter, ImsfAdapter
from fewtrans_board.methods.adapters.prototypes import MeanCentroidAdapter
from fewtrans_board.methods.adapters.random_embedding import (
    RandomEmbeddingAdapter,
    reinitialized,
)
from tests.test_bscd_recipe import (
    BATCH,
    DAMPENING,
    DECAY,
    EPOCHS,
    LR,
    MOMENTUM,
    SHORT,
    batches,
    episode,
    sgd_momentum_step,
    tiny_resnet,
)

BSCD_ADAPTERS: list[type[Adapter]] = [
    RandomEmbeddingAdapter,
    CosineClassifierAdapter,
    MeanCentroidAdapter,
    AllEmbeddingsAdapter,
]


@pytest.fixture
def float64() -> Any:
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(previous)


def bscd(adapter: type[Adapter], **changes: Any) -> Any:
    """The adapter's ``bscd`` recipe as its Config, with ``changes``."""
    return adapter.Config.from_dict(adapter.recipe("bscd").values_for()).replace(**changes)


# --- the recipes: what they declare ---------------------------------------------------------


@pytest.mark.parametrize("adapter", BSCD_ADAPTERS, ids=lambda a: a.name)
def test_each_adapter_declares_a_cited_bscd_recipe(adapter: type[Adapter]) -> None:
    adapter.check_class()  # registration: the recipe builds a valid Config
    recipe = adapter.recipe()  # the only one: --recipe may be left out
    assert recipe.name == "bscd" and "BSCD-FSL" in recipe.source
    assert "bscd" in [r["name"] for r in adapter.schema()["recipes"]]
    config = bscd(adapter)
    if adapter is MeanCentroidAdapter:  # BSCD-FSL Eq. 2: d = negative cosine, ProtoNet means
        assert (config.distance, config.normalize) == ("cosine", False)
        return
    assert "cdfsl-benchmark" in recipe.source
    # §6: SGD with momentum, lr 0.01, 100 epochs; the scripts' batch 4, dampening, decay
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


def test_all_embeddings_fine_tunes_as_ims_f_does_and_only_skips_the_selection() -> None:
    ims = ImsfAdapter.recipe("bscd").values
    everything = AllEmbeddingsAdapter.recipe("bscd").values
    selection = {"selection_classifier", "selection_epochs"}
    assert {k: v for k, v in ims.items() if k not in selection} == dict(everything)
    config = bscd(AllEmbeddingsAdapter)
    assert (config.lr_backbone, config.backbone_optimizer, config.backbone_train_mode) == (
        LR,
        "same",
        True,
    )
    assert config.median_gradient_mask and not config.normalize_features
    assert config.head_init == "default"


def test_the_defaults_are_unchanged_by_the_recipes() -> None:
    """Runs without --hpe published keep their configuration (and results)."""
    assert MeanCentroidAdapter.Config().distance == "euclidean"
    cosine = CosineClassifierAdapter.Config()
    assert (cosine.optimizer, cosine.schedule, cosine.scale) == ("adam", "cosine", 10.0)
    random = RandomEmbeddingAdapter.Config()
    assert (random.init_rule, random.optimizer, random.normalize_features) == (
        "reset",
        "adam",
        True,
    )


# --- mean-centroid: BSCD-FSL Eq. 2 ------------------------------------------------------------


def test_bscd_mean_centroid_scores_the_cosine_to_the_raw_class_means(float64: None) -> None:
    backbone = tiny_resnet()
    support, query = episode()
    predictor = MeanCentroidAdapter().fit(backbone, support, [], bscd(MeanCentroidAdapter))
    with torch.no_grad():
        s = backbone.image_encoder(support.images.pixels).numpy()
        q = backbone.image_encoder(query.pixels).numpy()
    labels = support.labels.numpy()
    means = np.stack([s[labels == c].mean(axis=0) for c in range(support.n_way)])
    expected = (q @ means.T) / np.outer(np.linalg.norm(q, axis=1), np.linalg.norm(means, axis=1))
    np.testing.assert_allclose(predictor.predict(query).numpy(), expected, rtol=0, atol=1e-12)
    # the default stays ProtoNet's: minus the squared Euclidean distance to the means
    default = MeanCentroidAdapter().fit(backbone, support, [], MeanCentroidAdapter.Config())
    squared = ((q[:, None, :] - means[None]) ** 2).sum(-1)
    np.testing.assert_allclose(default.predict(query).numpy(), -squared, rtol=1e-10)


# --- cosine classifier: the SGD updates by hand ----------------------------------------------


def cosine_oracle(features: torch.Tensor, labels: torch.Tensor, n_way: int, scale: float) -> Any:
    """Weights N(0, 1/D) from ``manual_seed(5)``, then finetune.py's loop on
    ``scale * cos(x, w_k)`` with classifier_opt's update written out."""
    torch.manual_seed(5)
    dim = features.shape[1]
    weight = (torch.randn(n_way, dim) * dim**-0.5).requires_grad_(True)
    buffers: dict[int, torch.Tensor] = {}
    for batch in batches(len(labels), SHORT):
        weight.grad = None
        x = F.normalize(features[batch], dim=-1)
        logits = scale * x @ F.normalize(weight, dim=-1).t()
        F.cross_entropy(logits, labels[batch]).backward()
        sgd_momentum_step([weight], buffers)
    return weight.detach()


def test_bscd_cosine_classifier_follows_the_written_sgd_rule(float64: None) -> None:
    backbone = tiny_resnet()
    support, query = episode()
    config = bscd(CosineClassifierAdapter, epochs=SHORT)
    assert config.scale == 2.0  # distLinear's factor for at most 200 classes
    with torch.no_grad():
        features = backbone.image_encoder(support.images.pixels)
        queries = F.normalize(backbone.image_encoder(query.pixels), dim=-1)
    weight = cosine_oracle(features, support.labels, support.n_way, config.scale)
    expected = config.scale * queries @ F.normalize(weight, dim=-1).t()
    torch.manual_seed(5)
    looped = CosineClassifierAdapter().fit(backbone, support, [], config)
    torch.testing.assert_close(looped.predict(query), expected, rtol=0, atol=1e-10)
    batched = CosineClassifierAdapter().fit_many(backbone, support, [], [config], [5])[0]
    torch.testing.assert_close(batched.predict(query), expected, rtol=0, atol=1e-10)
    torch.manual_seed(5)  # the recipe trains: the weights left their draw
    assert not torch.allclose(weight, torch.randn(support.n_way, 32) * 32**-0.5)


# --- Random: ResNet-10's initialisation and finetune.py's fixed-feature head ---------------


def test_bscd_random_draws_convolutions_as_the_released_resnet10(float64: None) -> None:
    encoder = tiny_resnet().image_encoder
    state = torch.random.get_rng_state()
    bscd_net = reinitialized(encoder, 0, "bscd")
    reset_net = reinitialized(encoder, 0)
    assert torch.equal(torch.random.get_rng_state(), state)  # the global stream untouched
    again = reinitialized(encoder, 0, "bscd")
    for (name, module), twin, other in zip(
        bscd_net.named_modules(), again.modules(), reset_net.modules(), strict=True
    ):
        if isinstance(module, nn.Conv2d):
            n = module.kernel_size[0] * module.kernel_size[1] * module.out_channels
            weight = module.weight.detach()
            assert torch.equal(weight, twin.weight)  # seeded
            if weight.numel() >= 1000:  # init_layer: N(0, sqrt(2 / n))
                assert float(weight.std()) == pytest.approx(math.sqrt(2.0 / n), rel=0.1), name
                assert abs(float(weight.mean())) < 0.1 * math.sqrt(2.0 / n)
        elif isinstance(module, nn.BatchNorm2d):
            assert torch.equal(module.weight, torch.ones_like(module.weight))
            assert torch.equal(module.bias, torch.zeros_like(module.bias))
        else:  # every other parameter is drawn as the default rule draws it
            for p, q in zip(module.parameters(False), other.parameters(False), strict=True):
                assert torch.equal(p, q), name
    with pytest.raises(ValueError, match="init rule"):
        reinitialized(encoder, 0, "xavier")


def test_bscd_random_trains_the_fixed_feature_head_on_the_random_network(
    float64: None,
) -> None:
    backbone = tiny_resnet()
    support, query = episode()
    config = bscd(RandomEmbeddingAdapter, epochs=SHORT)
    torch.manual_seed(5)
    predictor: Any = RandomEmbeddingAdapter().fit(backbone, support, [], config)
    random = Backbone(
        name="random-twin",
        image_encoder=reinitialized(backbone.image_encoder, 0, "bscd"),
        feature_dim=32,
        image_size=32,
        weights_id="random-twin",
    )
    probe_config = bscd(LinearProbeAdapter, epochs=SHORT)
    torch.manual_seed(5)
    probe: Any = LinearProbeAdapter().fit(random, support, [], probe_config)
    torch.testing.assert_close(predictor.predict(query), probe.predict(query), rtol=0, atol=1e-10)
    torch.testing.assert_close(predictor.head.weight, probe.head.weight, rtol=0, atol=1e-12)


# --- evaluate --hpe published on a BSCD digits manifest --------------------------------------


@pytest.fixture(scope="module")
def bscd_manifest(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two 5-way 5-shot 15-query episodes of the embedded digits (the BSCD protocol)."""
    from fewtrans_board.datasets.digits import DIGITS
    from fewtrans_board.episodes.build import build_manifest
    from fewtrans_board.episodes.protocols import get_protocol

    path = tmp_path_factory.mktemp("bscd") / "bscd--digits.parquet"
    build_manifest(DIGITS, None, get_protocol("bscd").with_overrides(episodes=2)).write(path)
    return path


PUBLISHED = [
    pytest.param("mean-centroid", "demo-cnn.digits", (), id="mean-centroid"),
    pytest.param("cosine-classifier", "demo-cnn.digits", ("--recipe", "bscd"), id="cosine"),
    pytest.param("random", "demo-cnn.digits", ("--recipe", "bscd"), id="random"),
    pytest.param(  # 100 epochs of fine-tuning two models: the cost of this module
        "all-embeddings", "library:demo-cnn.digits+demo-cnn.random", ("--recipe", "bscd"), id="all"
    ),
]


@pytest.mark.slow  # evaluate's provenance asks platform for the processor (a process)
@pytest.mark.parametrize(("adapter", "model", "recipe"), PUBLISHED)
def test_evaluate_published_runs_the_bscd_recipe(
    adapter: str, model: str, recipe: tuple[str, ...], bscd_manifest: Path, tmp_path: Path, invoke
) -> None:  # type: ignore[no-untyped-def]
    from fewtrans_board.registry.lookup import Registry
    from fewtrans_board.registry.manager import get_plugin_manager
    from fewtrans_board.results.load import load_run

    pm = get_plugin_manager(entry_points=False)
    out = tmp_path / "run"
    args = ["evaluate", "--model", model, "--adapter", adapter, "--hpe", "published", *recipe]
    args += ["--manifest", str(bscd_manifest), "--out", str(out), "--limit", "1"]
    result = invoke([*args, "--device", "cpu", "--threads", "1", "--quiet"], pm=pm)
    assert result.exit_code == 0, result.output
    assert "its published recipes: none" not in result.output
    cls = Registry.from_plugin_manager(pm).adapters.get(adapter).obj
    run = load_run(out)
    record = run.provenance
    assert record.adapter.extra["recipe"] == cls.recipe("bscd").describe()
    assert record.adapter.centre == {**cls.Config().to_dict(), **cls.recipe("bscd").values}
    assert len(record.identity.grid) == 1 and record.hpe.name == "published"
    accuracy = run.aggregations()["hpe"]
    assert len(accuracy) == 1 and 0.0 <= accuracy[0] <= 100.0
