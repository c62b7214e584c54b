"""Seeded bootstrap over episodes: cross-dataset averages, rank intervals, ties with the best.

Episodes are resampled within each dataset (datasets are fixed, as in the benchmark); all
methods share the resampled indices because they were evaluated on the same frozen
episodes, so their averages are compared pairwise.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from fewtrans_board.stats.tests import holm, paired_ttest


@dataclass(frozen=True)
class BootstrapCI:
    """A point estimate with a percentile bootstrap interval."""

    estimate: float
    low: float
    high: float
    resamples: int
    seed: int

    def to_dict(self) -> dict[str, float | int]:
        """JSON-friendly form."""
        return {
            "estimate": self.estimate,
            "low": self.low,
            "high": self.high,
            "resamples": self.resamples,
            "seed": self.seed,
        }


def _replicates(
    methods: Mapping[str, Mapping[str, np.ndarray]], resamples: int, seed: int
) -> tuple[list[str], np.ndarray]:
    """Bootstrap replicates of each method's cross-dataset average: ``[methods, resamples]``."""
    names = sorted(methods)
    datasets = sorted(next(iter(methods.values())))
    rng = np.random.default_rng(seed)
    totals = np.zeros((len(names), resamples))
    for dataset in datasets:
        n = len(methods[names[0]][dataset])
        index = rng.integers(0, n, size=(resamples, n))
        for i, name in enumerate(names):
            values = np.asarray(methods[name][dataset], dtype=np.float64)
            if len(values) != n:
                raise ValueError(f"{name} has {len(values)} episodes on {dataset}, others {n}")
            totals[i] += values[index].mean(axis=1)
    return names, totals / len(datasets)


def average_ci(
    per_dataset: Mapping[str, np.ndarray], resamples: int = 10_000, seed: int = 0
) -> BootstrapCI:
    """Cross-dataset average of per-dataset means with a 95% percentile bootstrap CI."""
    _, replicates = _replicates({"m": per_dataset}, resamples, seed)
    estimate = float(np.mean([np.mean(v) for v in per_dataset.values()]))
    low, high = np.percentile(replicates[0], [2.5, 97.5])
    return BootstrapCI(estimate, float(low), float(high), resamples, seed)


def rank_intervals(
    methods: Mapping[str, Mapping[str, np.ndarray]], resamples: int = 2_000, seed: int = 0
) -> dict[str, tuple[int, int, int]]:
    """Rank (1 = best) of each method's average and its 95% bootstrap interval.

    Returns:
        ``{method: (rank, low, high)}``.
    """
    names, replicates = _replicates(methods, resamples, seed)
    point = np.array([np.mean([np.mean(v) for v in methods[n].values()]) for n in names])
    point_rank = (-point).argsort(kind="mergesort").argsort() + 1
    # Rank of every method within each replicate (higher average = better rank).
    ranks = (-replicates).argsort(axis=0, kind="mergesort").argsort(axis=0) + 1
    out = {}
    for i, name in enumerate(names):
        low, high = np.percentile(ranks[i], [2.5, 97.5])
        out[name] = (int(point_rank[i]), int(np.floor(low)), int(np.ceil(high)))
    return out


def tied_with_best(
    methods: Mapping[str, Mapping[str, np.ndarray]], alpha: float = 0.05
) -> dict[str, bool]:
    """Whether each method is statistically tied with the best average.

    The best method is the one with the highest cross-dataset average. Every other method
    is compared with it by a paired t-test over all shared episodes (pooled across
    datasets); p-values are Holm-adjusted over those comparisons, and a method is tied when
    its adjusted p is at least ``alpha``.
    """
    names = sorted(methods)
    averages = {n: float(np.mean([np.mean(v) for v in methods[n].values()])) for n in names}
    best = max(names, key=lambda n: (averages[n], n))
    datasets = sorted(methods[best])
    pooled = {n: np.concatenate([np.asarray(methods[n][d]) for d in datasets]) for n in names}
    others = [n for n in names if n != best]
    adjusted = holm([paired_ttest(pooled[best], pooled[n]).pvalue for n in others])
    tied = {best: True}
    tied.update({n: bool(p >= alpha) for n, p in zip(others, adjusted, strict=True)})
    return tied
