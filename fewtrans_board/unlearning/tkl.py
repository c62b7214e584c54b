"""Total knowledge loss: the weighted zero-shot accuracy drop on the validation datasets.

``TKL = sum_v w_v * (acc_original(v) - acc_unlearned(v))`` with weights summing to one.
Each drop is a paired difference over the same test images, so its variance is the
sample variance of the per-image differences over ``n_v``; the datasets are independent
and the weights fixed, so ``Var(TKL) = sum_v w_v^2 Var(drop_v)`` and the 95% CI is
``1.96 * sqrt(Var(TKL))`` (percentage points).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from fewtrans_board.core.errors import FewtransError
from fewtrans_board.unlearning.zeroshot import ZeroShotResult

WEIGHTINGS = ("mmd", "wordnet", "pad", "uniform")
"""The paper's four weightings, MMD first (its primary metric)."""


@dataclass(frozen=True)
class KnowledgeLoss:
    """Zero-shot accuracy drop on one validation dataset (percentage points).

    Attributes:
        dataset: the validation dataset.
        before: accuracy of the original model.
        after: accuracy of the unlearned model.
        drop: ``before - after``.
        variance: variance of ``drop`` (of the mean over images).
        n: test images.
    """

    dataset: str
    before: float
    after: float
    drop: float
    variance: float
    n: int


def knowledge_loss(before: ZeroShotResult, after: ZeroShotResult) -> KnowledgeLoss:
    """The paired accuracy drop between two zero-shot runs on the same images.

    Raises:
        FewtransError: the runs cover different datasets or image counts.
    """
    if before.dataset != after.dataset or len(before.correct) != len(after.correct):
        raise FewtransError("knowledge loss compares two runs on the same test images")
    diff = (before.correct - after.correct) * 100.0
    n = len(diff)
    variance = float(diff.var(ddof=1) / n) if n > 1 else 0.0
    return KnowledgeLoss(
        before.dataset, before.accuracy, after.accuracy, float(diff.mean()), variance, n
    )


def normalized(distances: Mapping[str, float]) -> dict[str, float]:
    """Weights proportional to ``distances`` (larger distance, larger weight).

    Raises:
        FewtransError: a negative distance or all distances zero.
    """
    values = np.array([distances[k] for k in distances], dtype=float)
    if (values < 0).any() or not values.sum() > 0:
        raise FewtransError(
            f"weights need non-negative distances with a positive sum: {dict(distances)}"
        )
    return {k: float(v / values.sum()) for k, v in zip(distances, values, strict=True)}


def uniform(datasets: list[str]) -> dict[str, float]:
    """Equal weights."""
    return {d: 1.0 / len(datasets) for d in datasets}


@dataclass(frozen=True)
class TklResult:
    """TKL under one weighting (``value``/``ci95`` are ``None`` when unavailable).

    Attributes:
        weighting: ``mmd``, ``wordnet``, ``pad`` or ``uniform``.
        weights: validation dataset -> weight.
        value: TKL in percentage points.
        ci95: half-width of its 95% CI.
        note: why it is unavailable, or extra detail.
    """

    weighting: str
    weights: dict[str, float]
    value: float | None
    ci95: float | None
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return dict(self.__dict__)


def total_knowledge_loss(
    losses: Mapping[str, KnowledgeLoss], weights: Mapping[str, float]
) -> tuple[float, float]:
    """``(TKL, 95% CI half-width)`` for given weights.

    Raises:
        FewtransError: weights and losses cover different datasets, or weights do not sum to 1.
    """
    if set(weights) != set(losses):
        raise FewtransError(f"weights cover {sorted(weights)}, losses {sorted(losses)}")
    if not math.isclose(sum(weights.values()), 1.0, abs_tol=1e-9):
        raise FewtransError(f"TKL weights must sum to 1, got {sum(weights.values())}")
    value = sum(weights[d] * losses[d].drop for d in losses)
    variance = sum(weights[d] ** 2 * losses[d].variance for d in losses)
    return float(value), float(1.96 * math.sqrt(variance))


def tkl_under(
    weighting: str, losses: Mapping[str, KnowledgeLoss], distances: Mapping[str, float] | str
) -> TklResult:
    """TKL under one weighting; ``distances`` is a reason string when it is unavailable."""
    if weighting == "uniform":
        weights = uniform(list(losses))
    elif isinstance(distances, str):
        return TklResult(weighting, {}, None, None, distances)
    else:
        weights = normalized(distances)
    value, ci = total_knowledge_loss(losses, weights)
    return TklResult(weighting, weights, value, ci)
