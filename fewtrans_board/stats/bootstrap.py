"""Seeded bootstrap over episodes: cross-dataset averages, rank intervals, ties with the best.

Episodes are resampled within each dataset (datasets are fixed, as in the benchmark); all
methods share the resampled indices because they were evaluated on the same frozen
episodes, so their averages are compared pairwise. A dataset's resamples are a matrix of
how often each episode is drawn, so every method's replicate means come from one matrix
product (:func:`resampled_means`) rather than a gather per method.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

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
        return asdict(self)


def cross_dataset_mean(per_dataset: Mapping[str, np.ndarray]) -> float:
    """Average over datasets of the per-dataset mean accuracies (datasets weigh equally)."""
    return float(np.mean([np.mean(v) for v in per_dataset.values()]))


def resample_counts(
    rng: np.random.Generator, episodes: int, resamples: int, draws: int
) -> np.ndarray:
    """How often each episode is drawn in each resample, ``[resamples, episodes]`` (float64).

    The draws are the single call ``rng.integers(0, episodes, size=(resamples, draws))``,
    so a seeded generator gives the same resamples as gathering those indices would.
    """
    index = rng.integers(0, episodes, size=(resamples, draws))
    index += (episodes * np.arange(resamples))[:, None]  # in place: a resample's own bins
    counts = np.bincount(index.ravel(), minlength=resamples * episodes)
    return counts.reshape(resamples, episodes).astype(np.float64)


def resampled_means(counts: np.ndarray, rows: np.ndarray, draws: int) -> np.ndarray:
    """Each row's mean over each resample: ``counts @ rows.T / draws``, ``[resamples, rows]``.

    Args:
        counts: ``[resamples, episodes]`` from :func:`resample_counts`.
        rows: ``[rows, episodes]`` per-episode values (one row per method or entry).
        draws: episodes drawn per resample (each row of ``counts`` sums to it).

    Identical rows are multiplied once and share the result: a BLAS product may round a
    column differently depending on where it sits, and equal rows must stay exactly tied.
    """
    rows = np.ascontiguousarray(rows, dtype=np.float64)
    first: dict[bytes, int] = {}
    inverse = [first.setdefault(r.tobytes(), len(first)) for r in rows]
    if len(first) == len(rows):
        out: np.ndarray = (counts @ rows.T) / draws
        return out
    unique = rows[np.unique(inverse, return_index=True)[1]]
    means: np.ndarray = (counts @ unique.T) / draws
    return means[:, inverse]


def _replicates(
    methods: Mapping[str, Mapping[str, np.ndarray]], resamples: int, seed: int
) -> tuple[list[str], list[str], np.ndarray]:
    """Bootstrap replicates of each method's cross-dataset average.

    Per dataset, one matrix of resample counts times the methods' values (one BLAS
    product) rather than a gather per method; the resamples are the seed's as before.

    Returns:
        ``(sorted method names, the datasets resampled, replicates [methods, resamples])``;
        the datasets are the first method's, sorted.
    """
    names = sorted(methods)
    datasets = sorted(next(iter(methods.values())))
    rng = np.random.default_rng(seed)
    totals = np.zeros((resamples, len(names)))
    for dataset in datasets:
        n = len(methods[names[0]][dataset])
        rows = np.empty((len(names), n))
        for i, name in enumerate(names):
            values = np.asarray(methods[name][dataset], dtype=np.float64)
            if len(values) != n:
                raise ValueError(f"{name} has {len(values)} episodes on {dataset}, others {n}")
            rows[i] = values
        totals += resampled_means(resample_counts(rng, n, resamples, n), rows, n)
    return names, datasets, totals.T / len(datasets)


def _percentile_ci(
    estimate: float, replicates: np.ndarray, resamples: int, seed: int
) -> BootstrapCI:
    low, high = np.percentile(replicates, [2.5, 97.5])
    return BootstrapCI(estimate, float(low), float(high), resamples, seed)


def _ranks(
    methods: Mapping[str, Mapping[str, np.ndarray]], names: list[str], replicates: np.ndarray
) -> dict[str, tuple[int, int, int]]:
    point = np.array([cross_dataset_mean(methods[n]) for n in names])
    point_rank = (-point).argsort(kind="mergesort").argsort() + 1
    # Rank of every method within each replicate (higher average = better rank).
    ranks = (-replicates).argsort(axis=0, kind="mergesort").argsort(axis=0) + 1
    out = {}
    for i, name in enumerate(names):
        low, high = np.percentile(ranks[i], [2.5, 97.5])
        out[name] = (int(point_rank[i]), int(np.floor(low)), int(np.ceil(high)))
    return out


def average_ci(
    per_dataset: Mapping[str, np.ndarray], resamples: int = 10_000, seed: int = 0
) -> BootstrapCI:
    """Cross-dataset average of per-dataset means with a 95% percentile bootstrap CI."""
    _, _, replicates = _replicates({"m": per_dataset}, resamples, seed)
    return _percentile_ci(cross_dataset_mean(per_dataset), replicates[0], resamples, seed)


def rank_intervals(
    methods: Mapping[str, Mapping[str, np.ndarray]], resamples: int = 2_000, seed: int = 0
) -> dict[str, tuple[int, int, int]]:
    """Rank (1 = best) of each method's average and its 95% bootstrap interval.

    Returns:
        ``{method: (rank, low, high)}``.
    """
    names, _, replicates = _replicates(methods, resamples, seed)
    return _ranks(methods, names, replicates)


def averages_and_ranks(
    methods: Mapping[str, Mapping[str, np.ndarray]], resamples: int = 2_000, seed: int = 0
) -> dict[str, tuple[BootstrapCI, tuple[int, int, int]]]:
    """:func:`average_ci` and :func:`rank_intervals` of every method from one bootstrap draw.

    The results equal those of the two functions called with the same ``resamples`` and
    ``seed`` up to rounding: a method's replicates are drawn the same whichever other
    methods are drawn with it (the product that averages them may sum in another order).

    Returns:
        ``{method: (average with CI, (rank, low, high))}``.
    """
    names, datasets, replicates = _replicates(methods, resamples, seed)
    ranks = _ranks(methods, names, replicates)
    out = {}
    for i, name in enumerate(names):
        if sorted(methods[name]) == datasets:
            average = _percentile_ci(
                cross_dataset_mean(methods[name]), replicates[i], resamples, seed
            )
        else:
            # Ranks use the first method's datasets; this method's average uses all of its own.
            average = average_ci(methods[name], resamples, seed)
        out[name] = (average, ranks[name])
    return out


def holm_paired(pooled: Mapping[str, np.ndarray], reference: np.ndarray) -> dict[str, float]:
    """Holm-adjusted p-values of paired t-tests of each sample against ``reference``.

    Args:
        pooled: per-episode values of each method, paired with ``reference`` episode by
            episode (e.g. from :func:`pool`).
        reference: the reference method's per-episode values.

    Returns:
        ``{method: adjusted p}``, Holm-adjusted over all methods of ``pooled``.
    """
    names = list(pooled)
    adjusted = holm([paired_ttest(pooled[n], reference).pvalue for n in names])
    return dict(zip(names, adjusted, strict=True))


def pool(per_dataset: Mapping[str, np.ndarray], datasets: Sequence[str]) -> np.ndarray:
    """One method's per-episode values of ``datasets``, concatenated in that order."""
    return np.concatenate([np.asarray(per_dataset[d]) for d in datasets])


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
    averages = {n: cross_dataset_mean(methods[n]) for n in names}
    best = max(names, key=lambda n: (averages[n], n))
    datasets = sorted(methods[best])
    adjusted = holm_paired(
        {n: pool(methods[n], datasets) for n in names if n != best}, pool(methods[best], datasets)
    )
    tied = {best: True}
    tied.update({n: bool(p >= alpha) for n, p in adjusted.items()})
    return tied
