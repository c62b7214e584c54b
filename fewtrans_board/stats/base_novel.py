"""Base-to-novel summaries: the harmonic mean of base and novel accuracy, with its CI.

CoOp's summary of base-to-novel generalisation is ``HM = 2·B·N / (B + N)`` of the mean base
accuracy ``B`` and the mean novel accuracy ``N``. Every episode scores both (its novel
queries are drawn with it), so the two means are paired and correlated; the intervals
below use that pairing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from fewtrans_board.stats.bootstrap import BootstrapCI
from fewtrans_board.stats.intervals import Z_95, MeanCI


def harmonic_mean(base: float, novel: float) -> float:
    """CoOp's base-to-novel summary: ``2 * base * novel / (base + novel)`` of mean accuracies."""
    return 0.0 if base + novel == 0 else 2 * base * novel / (base + novel)


def _paired(
    base: Sequence[float] | np.ndarray, novel: Sequence[float] | np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    b, n = np.asarray(base, dtype=np.float64), np.asarray(novel, dtype=np.float64)
    if b.shape != n.shape or b.ndim != 1:
        raise ValueError(
            f"base and novel accuracies must be paired per episode, got {b.shape} and {n.shape}"
        )
    return b, n


def harmonic_mean_ci(
    base: Sequence[float] | np.ndarray,
    novel: Sequence[float] | np.ndarray,
    ddof: int = 1,
    z: float = Z_95,
) -> MeanCI:
    """Harmonic mean of the mean base and novel accuracies with a delta-method 95% CI.

    With ``g`` the gradient of ``HM(B, N)`` at the means and ``S`` the covariance (``ddof``)
    of the per-episode (base, novel) pairs, the half-width is ``z * sqrt(g' S g / n)``: the
    same normal approximation as ``1.96 * s / sqrt(n)`` for a plain mean.

    Args:
        base: per-episode base accuracy.
        novel: the same episodes' novel accuracy.
        ddof: delta degrees of freedom of the covariance (the benchmark's).
        z: the normal quantile.
    """
    b, n = _paired(base, novel)
    count = int(b.size)
    if count == 0:
        return MeanCI(float("nan"), float("nan"), 0, ddof)
    mb, mn = float(b.mean()), float(n.mean())
    estimate = harmonic_mean(mb, mn)
    if count <= ddof or mb + mn == 0:
        return MeanCI(estimate, float("nan"), count, ddof)
    gradient = np.array([2 * mn**2, 2 * mb**2]) / (mb + mn) ** 2
    covariance = np.atleast_2d(np.cov(np.stack([b, n]), ddof=ddof))
    variance = float(gradient @ covariance @ gradient) / count
    return MeanCI(estimate, z * math.sqrt(max(variance, 0.0)), count, ddof)


def harmonic_mean_average_ci(
    base: Mapping[str, np.ndarray],
    novel: Mapping[str, np.ndarray],
    resamples: int = 2_000,
    seed: int = 0,
) -> BootstrapCI:
    """HM of the cross-dataset average base and novel accuracies, with a bootstrap CI.

    CoOp's tables average base and novel accuracy over datasets, then take the harmonic
    mean of the two averages. Episodes are resampled within each dataset, the same indices
    for base and novel (they are paired).

    Args:
        base: per dataset, per-episode base accuracy.
        novel: per dataset, the same episodes' novel accuracy.
        resamples: bootstrap replicates.
        seed: bootstrap seed.
    """
    datasets = sorted(base)
    if sorted(novel) != datasets:
        raise ValueError(f"base covers {datasets}, novel {sorted(novel)}")
    rng = np.random.default_rng(seed)
    base_total, novel_total = np.zeros(resamples), np.zeros(resamples)
    for dataset in datasets:
        b, n = _paired(base[dataset], novel[dataset])
        index = rng.integers(0, len(b), size=(resamples, len(b)))
        base_total += b[index].mean(axis=1)
        novel_total += n[index].mean(axis=1)
    average_base, average_novel = base_total / len(datasets), novel_total / len(datasets)
    replicates = 2 * average_base * average_novel / np.maximum(average_base + average_novel, 1e-300)
    estimate = harmonic_mean(
        float(np.mean([np.mean(base[d]) for d in datasets])),
        float(np.mean([np.mean(novel[d]) for d in datasets])),
    )
    low, high = np.percentile(replicates, [2.5, 97.5])
    return BootstrapCI(estimate, float(low), float(high), resamples, seed)
