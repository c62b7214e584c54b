"""The shared contract checks catch each kind of broken plugin object."""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Any

import pytest
import torch

from fewtrans_board import Backbone, ClassSplit, ModelSpec
from fewtrans_board.errors import ContractError
from fewtrans_board.testing import (
    check_adapter,
    check_dataset,
    check_model,
    tiny_clip_backbone,
    tiny_vit_backbone,
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
    assert 0.0 <= report.details["toy_accuracy"] <= 1.0


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
    from fewtrans_board.errors import RegistrationError

    with pytest.raises(RegistrationError, match="not a partition"):
        replace(tiny_dataset_spec, split=ClassSplit(base=(0, 1), novel=(1,)))
