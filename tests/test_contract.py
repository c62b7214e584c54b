"""The shared contract checks catch each kind of broken plugin object."""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Any

import pytest
import torch

from fewtrans_board import Backbone, ClassSplit, ModelSpec
from fewtrans_board.core.errors import ContractError
from fewtrans_board.testing import (
    check_adapter,
    check_dataset,
    check_model,
    tiny_clip_backbone,
    tiny_vit_backbone,
    toy_episode,
)
from tests.conftest import CentroidAdapter

_counter = itertools.count()


class Predict:
    def __init__(self, fn: Any) -> None:
        self.predict = fn


class WrongShape(CentroidAdapter):
    name = "wrong-shape"

    def fit(self, backbone, support, class_names, config):  # type: ignore[no-untyped-def]
        return Predict(lambda q: torch.zeros(len(q), support.n_way + 1))


class NaNLogits(CentroidAdapter):
    name = "nan-logits"

    def fit(self, backbone, support, class_names, config):  # type: ignore[no-untyped-def]
        return Predict(lambda q: torch.full((len(q), support.n_way), float("nan")))


class NotDeterministic(CentroidAdapter):
    name = "not-deterministic"

    def fit(self, backbone, support, class_names, config):  # type: ignore[no-untyped-def]
        offset = float(next(_counter))
        return Predict(lambda q: torch.zeros(len(q), support.n_way) + offset)


class ModifiesBackbone(CentroidAdapter):
    name = "modifies-backbone"

    def fit(self, backbone, support, class_names, config):  # type: ignore[no-untyped-def]
        with torch.no_grad():
            next(backbone.image_encoder.parameters()).add_(1.0)
        return super().fit(backbone, support, class_names, config)


class NoPredict(CentroidAdapter):
    name = "no-predict"

    def fit(self, backbone, support, class_names, config):  # type: ignore[no-untyped-def]
        return lambda q: q


@pytest.mark.parametrize(
    ("adapter", "message"),
    [
        (WrongShape, "expected (6, 3)"),
        (NaNLogits, "NaN"),
        (NotDeterministic, "same seed gave different logits"),
        (ModifiesBackbone, "modified the shared backbone"),
        (NoPredict, "no predict(query) method"),
    ],
)
def test_check_adapter_rejects(adapter: type, message: str) -> None:
    with pytest.raises(
        ContractError, match=r".*" + message.replace("(", r"\(").replace(")", r"\)")
    ):
        check_adapter(adapter)


def test_check_adapter_accepts_and_reports() -> None:
    report = check_adapter(CentroidAdapter)
    assert report.passed == [
        "declarations",
        "logits shape and finiteness",
        "determinism",
        "backbone untouched",
        "fit_many agrees with fit",
    ]
    assert report.details["n_query"] == 6 and report.details["n_way"] == 3
    assert_toy_accuracy_is_nearest_centroid(report.details["toy_accuracy"])


def nearest_centroid_toy_accuracy() -> float:
    """Accuracy of nearest centroid on the contract check's toy episode, written out in numpy.

    Same episode and backbone as ``check_adapter``'s defaults (seed 0): a tiny random ViT's
    features, class means of the support features, squared Euclidean distance.
    """
    import numpy as np

    episode, backbone = toy_episode(seed=0), tiny_vit_backbone()
    with torch.no_grad():
        support = backbone.image_encoder(episode.support.images.pixels).numpy()
        query = backbone.image_encoder(episode.query.pixels).numpy()
    labels = episode.support.labels.numpy()
    centroids = np.stack([support[labels == c].mean(axis=0) for c in range(3)])
    distances = ((query[:, None, :] - centroids[None, :, :]) ** 2).sum(axis=-1)
    return float(np.mean(distances.argmin(axis=1) == episode.query_labels.numpy()))


def assert_toy_accuracy_is_nearest_centroid(toy_accuracy: float) -> None:
    # The toy classes differ by a per-class mean colour (centres ~ N(0, 1) per channel,
    # pixel noise 0.5): even the per-image mean colour separates them, and nearest centroid on
    # the tiny ViT's features classifies all 6 queries correctly.
    oracle = nearest_centroid_toy_accuracy()
    assert oracle == pytest.approx(1.0)
    assert toy_accuracy == pytest.approx(oracle)


class RandomLogits(CentroidAdapter):
    """Well-formed, deterministic (seeded) logits that ignore the images."""

    name = "random-logits"

    def fit(self, backbone, support, class_names, config):  # type: ignore[no-untyped-def]
        return Predict(lambda q: torch.randn(len(q), support.n_way))


def test_toy_accuracy_tells_a_broken_adapter_from_a_centroid() -> None:
    # Random logits pass the form checks but not the accuracy check: with 6 queries and
    # 3 ways, all 6 right by chance has probability (1/3)**6 < 0.2%, and the seed is fixed.
    report = check_adapter(RandomLogits)
    assert "fit_many agrees with fit" in report.passed
    with pytest.raises(AssertionError):
        assert_toy_accuracy_is_nearest_centroid(report.details["toy_accuracy"])


def _spec(backbone: Backbone, modalities: tuple[str, ...] = ("image",)) -> ModelSpec:
    return ModelSpec(
        name="tiny.check",
        loader=lambda w, d: backbone,
        family="timm",
        architecture="vit",
        source="random-init",
        modalities=modalities,
    )


def test_check_model_accepts_tiny_models() -> None:
    assert check_model(_spec(tiny_vit_backbone())).details["feature_dim"] == 32
    report = check_model(_spec(tiny_clip_backbone(), ("image", "text")))
    assert "text features" in report.passed


def test_check_model_rejects_wrong_feature_dim() -> None:
    backbone = replace(tiny_vit_backbone(), feature_dim=7)
    with pytest.raises(ContractError, match=r"expected \(3, 7\)"):
        check_model(_spec(backbone))


def test_check_model_rejects_training_mode() -> None:
    backbone = tiny_vit_backbone()
    backbone.image_encoder.train()
    with pytest.raises(ContractError, match="eval mode"):
        check_model(_spec(backbone))


def test_check_model_rejects_wrong_modalities() -> None:
    with pytest.raises(ContractError, match="modalities"):
        check_model(_spec(tiny_clip_backbone(), ("image",)))


def test_check_dataset_accepts(tiny_dataset_spec) -> None:  # type: ignore[no-untyped-def]
    report = check_dataset(tiny_dataset_spec)
    assert report.passed == ["metadata", "reader"] and report.details["items"] == 12


def test_check_dataset_rejects_traversal(tiny_dataset_spec) -> None:  # type: ignore[no-untyped-def]
    class Evil(type(tiny_dataset_spec.reader)):  # type: ignore[misc]
        def list_items(self, root, spec):  # type: ignore[no-untyped-def]
            return [["../../etc/passwd"], ["b/1.png"], ["c/1.png"]]

    with pytest.raises(ContractError, match="relative POSIX path"):
        check_dataset(replace(tiny_dataset_spec, reader=Evil()))


def test_check_dataset_rejects_missing_metadata(tiny_dataset_spec) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ContractError, match="empty 'license'"):
        check_dataset(replace(tiny_dataset_spec, license=" "))


def test_dataset_spec_rejects_bad_split(tiny_dataset_spec) -> None:  # type: ignore[no-untyped-def]
    from fewtrans_board.core.errors import RegistrationError

    with pytest.raises(RegistrationError, match="not a partition"):
        replace(tiny_dataset_spec, split=ClassSplit(base=(0, 1), novel=(1,)))
