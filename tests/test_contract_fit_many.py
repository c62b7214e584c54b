"""The contract's "fit_many agrees with fit" check judges predictions, not raw logits.

Honest batched fits pass even when float noise separates them from ``fit``; a ``fit_many``
that ignores its configurations, mixes them up or computes something else fails.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
import torch

from fewtrans_board import Adapter, AdapterConfig, hparam
from fewtrans_board.core.errors import ContractError
from fewtrans_board.testing import check_adapter


class _Predictor:
    def __init__(self, fn: Any) -> None:
        self.predict = fn


class RandomHead(Adapter):
    """Nearest centroid plus a random linear head whose size is the learning rate.

    The head is drawn from torch's global generator (seeded before each fit), so both the
    configuration and the seed change the predictions on many toy queries: that is what
    lets the check tell configurations apart.
    """

    name = "test-random-head"
    description = "Nearest centroid plus a seeded random head (test helper)."
    trains = "nothing (a seeded random head)"
    frozen_backbone = True

    @dataclass(frozen=True)
    class Config(AdapterConfig):
        lr: float = hparam(1.0, "Size of the random head.", hpe="lr")
        epochs: int = hparam(1, "Unused epoch count.", hpe="epochs")

    def fit(self, backbone, support, class_names, config):  # type: ignore[no-untyped-def]
        feats = support.images.features(backbone)
        cents = torch.stack([feats[support.labels == c].mean(0) for c in range(support.n_way)])
        head = torch.randn(feats.shape[1], support.n_way) * config.lr

        def predict(query):  # type: ignore[no-untyped-def]
            q = query.features(backbone)
            return -torch.cdist(q, cents) + q @ head

        return _Predictor(predict)

    def loop(self, backbone, support, class_names, configs, seeds):  # type: ignore[no-untyped-def]
        """What an honest fit_many computes: each configuration fitted with its seed."""
        return Adapter.fit_many(self, backbone, support, class_names, configs, seeds)


class Honest(RandomHead):
    name = "test-fit-many-honest"

    def fit_many(self, backbone, support, class_names, configs, seeds):  # type: ignore[no-untyped-def]
        return self.loop(backbone, support, class_names, configs, seeds)


class FloatNoise(RandomHead):
    """Honest, but its logits differ from fit's by float-level noise (another kernel path)."""

    name = "test-fit-many-noise"

    def fit_many(self, backbone, support, class_names, configs, seeds):  # type: ignore[no-untyped-def]
        predictors = self.loop(backbone, support, class_names, configs, seeds)
        g = torch.Generator().manual_seed(123)

        def noisy(p):  # type: ignore[no-untyped-def]
            def predict(query):  # type: ignore[no-untyped-def]
                logits = p.predict(query)
                return logits + 1e-4 * logits.abs().max() * torch.randn(logits.shape, generator=g)

            return _Predictor(predict)

        return [noisy(p) for p in predictors]


class FirstConfigForAll(RandomHead):
    """Returns configuration 0's predictor for every configuration."""

    name = "test-fit-many-first"

    def fit_many(self, backbone, support, class_names, configs, seeds):  # type: ignore[no-untyped-def]
        first = self.loop(backbone, support, class_names, configs[:1], seeds[:1])[0]
        return [first for _ in configs]


class Reversed(RandomHead):
    """Fits every configuration but returns them in the wrong order."""

    name = "test-fit-many-reversed"

    def fit_many(self, backbone, support, class_names, configs, seeds):  # type: ignore[no-untyped-def]
        return self.loop(backbone, support, class_names, configs, seeds)[::-1]


class SomethingElse(RandomHead):
    """Returns predictors that rank the classes the opposite way."""

    name = "test-fit-many-negated"

    def fit_many(self, backbone, support, class_names, configs, seeds):  # type: ignore[no-untyped-def]
        predictors = self.loop(backbone, support, class_names, configs, seeds)
        return [_Predictor(lambda q, p=p: -p.predict(q)) for p in predictors]


class NegatedCentroid(Adapter):
    """Nearest centroid (no learning rate, no randomness) whose fit_many negates the logits.

    Its configurations predict alike, so only the agreement test can catch it.
    """

    name = "test-fit-many-negated-centroid"
    description = "Nearest centroid with a broken fit_many (test helper)."
    trains = "nothing (class means)"
    frozen_backbone = True
    training_free = True

    @dataclass(frozen=True)
    class Config(AdapterConfig):
        scale: float = hparam(1.0, "Logit scale.", above=0)

    def fit(self, backbone, support, class_names, config):  # type: ignore[no-untyped-def]
        feats = support.images.features(backbone)
        cents = torch.stack([feats[support.labels == c].mean(0) for c in range(support.n_way)])
        return _Predictor(lambda q: -config.scale * torch.cdist(q.features(backbone), cents))

    def fit_many(self, backbone, support, class_names, configs, seeds):  # type: ignore[no-untyped-def]
        predictors = Adapter.fit_many(self, backbone, support, class_names, configs, seeds)
        return [_Predictor(lambda q, p=p: -p.predict(q)) for p in predictors]


@pytest.mark.parametrize("adapter", [Honest, FloatNoise], ids=["honest", "float-noise"])
def test_an_honest_fit_many_passes(adapter: type[Adapter]) -> None:
    report = check_adapter(adapter)
    assert report.passed[-1] == "fit_many agrees with fit"
    details = report.details["fit_many"]
    assert details["configs"] == 2 and details["queries"] == 60


def test_an_honest_fit_many_agrees_exactly_on_the_toy_queries() -> None:
    # Same computation, same process: every prediction matches (compares like with like).
    assert check_adapter(Honest).details["fit_many"]["prediction_agreement"] == 1.0


def test_the_toy_configurations_are_told_apart() -> None:
    """The failing cases below rest on fit giving the two configurations different classes
    on many toy queries: far more than the 7 a sign test at p < 0.01 needs."""
    from fewtrans_board.testing import tiny_vit_backbone, toy_episode
    from fewtrans_board.testing.fit_many import FIT_MANY_QUERIES_PER_CLASS, _neighbour_config

    backbone = tiny_vit_backbone()
    probe = toy_episode(
        image_size=backbone.image_size, n_query_per_class=FIT_MANY_QUERIES_PER_CLASS
    )
    configs = [RandomHead.Config(), _neighbour_config(RandomHead.Config())]
    assert configs[1].lr == pytest.approx(0.2)
    predictors = RandomHead().loop(backbone, probe.support, probe.class_names, configs, [0, 1])
    first, second = (p.predict(probe.query).argmax(1) for p in predictors)
    assert int((first != second).sum()) >= 20


@pytest.mark.parametrize(
    ("adapter", "message"),
    [
        (FirstConfigForAll, "configuration 1 predicts like configuration 0"),
        (Reversed, "configuration 0 predicts like configuration 1"),
        (SomethingElse, "fit_many's predictor for configuration 0"),
        (NegatedCentroid, "disagrees with fit on the same configuration and seed"),
    ],
    ids=["first-for-all", "reversed", "negated", "negated-centroid"],
)
def test_a_fit_many_that_does_not_compute_fit_fails(adapter: type[Adapter], message: str) -> None:
    with pytest.raises(ContractError, match=message):
        check_adapter(adapter)
