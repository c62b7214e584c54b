"""Paired significance tests on shared episodes, effect size and Holm correction."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import special

EXACT_WILCOXON_MAX_N = 50
PERMUTATION_WILCOXON_MAX_N = 13
"""With ties or zeros, up to this many pairs are tested on every sign assignment (scipy)."""


@dataclass(frozen=True)
class PairedTest:
    """Result of a paired test.

    Attributes:
        statistic: the test statistic (t, or Wilcoxon's T = min(R+, R-)).
        pvalue: two-sided p-value.
        n: number of pairs used.
        method: how the p-value was obtained.
    """

    statistic: float
    pvalue: float
    n: int
    method: str


def _pairs(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> np.ndarray:
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(
            f"paired samples must be 1-d and equally long, got {x.shape} and {y.shape}"
        )
    return x - y


def paired_ttest(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> PairedTest:
    """Two-sided paired t-test of ``a - b`` against zero (Student's t, n - 1 dof)."""
    d = _pairs(a, b)
    n = len(d)
    if n < 2:
        return PairedTest(float("nan"), float("nan"), n, "t")
    sd = float(d.std(ddof=1))
    if sd == 0.0:
        mean = float(d.mean())
        return PairedTest(
            math.copysign(math.inf, mean) if mean else float("nan"),
            0.0 if mean else float("nan"),
            n,
            "t",
        )
    t = float(d.mean()) / (sd / math.sqrt(n))
    p = 2.0 * float(special.stdtr(n - 1, -abs(t)))
    return PairedTest(t, min(1.0, p), n, "t")


def _average_ranks(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Ranks 1..n with ties averaged, and the sizes of the tie groups."""
    order = np.argsort(values, kind="mergesort")
    sorted_values = values[order]
    ranks = np.empty(len(values))
    groups = []
    start = 0
    while start < len(values):
        end = start
        while end + 1 < len(values) and sorted_values[end + 1] == sorted_values[start]:
            end += 1
        ranks[order[start : end + 1]] = (start + end) / 2.0 + 1.0
        groups.append(end - start + 1)
        start = end + 1
    return ranks, np.array(groups)


def _exact_signed_rank_cdf(n: int, t: int) -> float:
    """P(S <= t) for the signed-rank sum S of n distinct ranks under H0 (by counting)."""
    top = n * (n + 1) // 2
    counts = np.zeros(top + 1, dtype=np.float64)
    counts[0] = 1.0
    for k in range(1, n + 1):
        counts[k:] = counts[k:] + counts[: top + 1 - k].copy()
    return float(counts[: t + 1].sum() / 2.0**n)


def _sign_flip_pvalue(ranks: np.ndarray, r_plus: float) -> float:
    """Two-sided p of R+ over all 2^n sign assignments of (possibly tied) ranks.

    Average ranks are multiples of 1/2, so the null distribution of 2·R+ is counted exactly
    on integers: ``2 * min(P(R+ <= r), P(R+ >= r))``, capped at 1 (scipy's permutation test
    with every assignment enumerated).
    """
    doubled = np.rint(2 * ranks).astype(np.int64)
    top = int(doubled.sum())
    counts = np.zeros(top + 1, dtype=np.float64)
    counts[0] = 1.0
    for value in doubled:
        counts[value:] = counts[value:] + counts[: top + 1 - value].copy()
    observed = round(2 * r_plus)
    total = 2.0 ** len(doubled)
    lower = counts[: observed + 1].sum() / total
    upper = counts[observed:].sum() / total
    return float(min(1.0, 2.0 * min(lower, upper)))


def wilcoxon_signed_rank(
    a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray
) -> PairedTest:
    """Two-sided Wilcoxon signed-rank test of ``a - b`` (scipy's default method choice).

    Zero differences are dropped ("wilcox"). Without ties or zeros and with at most 50
    pairs the p-value comes from the exact null distribution; with ties or zeros and at
    most 13 pairs (zeros counted) from every sign assignment of the observed ranks, which
    is exact too (the normal approximation is anti-conservative there: five equal
    differences would give p = 0.025 instead of 0.0625); otherwise from the normal
    approximation with the tie-corrected variance and no continuity correction.
    """
    d = _pairs(a, b)
    pairs = len(d)
    had_zeros = bool((d == 0).any())
    d = d[d != 0]
    n = len(d)
    if n == 0:
        return PairedTest(float("nan"), float("nan"), 0, "none")
    ranks, groups = _average_ranks(np.abs(d))
    r_plus = float(ranks[d > 0].sum())
    r_minus = float(ranks[d < 0].sum())
    statistic = min(r_plus, r_minus)
    ties = bool((groups > 1).any())
    if not ties and not had_zeros and n <= EXACT_WILCOXON_MAX_N:
        p = 2.0 * _exact_signed_rank_cdf(n, int(statistic))
        return PairedTest(statistic, min(1.0, p), n, "exact")
    if pairs <= PERMUTATION_WILCOXON_MAX_N:
        return PairedTest(statistic, _sign_flip_pvalue(ranks, r_plus), n, "permutation")
    mean = n * (n + 1) / 4.0
    variance = n * (n + 1) * (2 * n + 1) / 24.0 - float((groups**3 - groups).sum()) / 48.0
    z = (statistic - mean) / math.sqrt(variance)
    p = float(special.erfc(abs(z) / math.sqrt(2.0)))
    return PairedTest(statistic, min(1.0, p), n, "normal")


def cohens_d_paired(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> float:
    """Paired Cohen's d: mean of ``a - b`` over its sample standard deviation."""
    d = _pairs(a, b)
    if len(d) < 2:
        return float("nan")
    sd = float(d.std(ddof=1))
    return (
        float(d.mean()) / sd
        if sd > 0
        else (0.0 if d.mean() == 0 else math.copysign(math.inf, d.mean()))
    )


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values, in the input order.

    The i-th smallest p (1-based) is multiplied by ``m - i + 1``; adjusted values are made
    monotone by a running maximum and capped at 1.
    """
    p = np.asarray(pvalues, dtype=np.float64)
    m = len(p)
    order = np.argsort(p, kind="mergesort")
    adjusted = np.empty(m)
    running = 0.0
    for i, index in enumerate(order):
        running = max(running, min(1.0, (m - i) * p[index]))
        adjusted[index] = running
    return [float(v) for v in adjusted]
