"""Paired significance tests on shared episodes, effect size and Holm correction.

The tests are ``scipy.stats``'s, called with every choice that changed between scipy
releases pinned (method, alternative, zero handling, continuity correction, NaN policy), so
a p-value does not move when scipy is upgraded; degenerate inputs (too few pairs, no
spread) are answered here, without scipy's warnings. scipy.stats is imported where a test
runs (about a second to import), not by every command that reads a summary.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from scipy import stats

EXACT_WILCOXON_MAX_N = 50
"""Without ties or zeros, up to this many pairs get the exact null distribution."""
PERMUTATION_WILCOXON_MAX_N = 13
"""With ties or zeros, up to this many pairs are tested on every sign assignment."""


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
    if float(d.std(ddof=1)) == 0.0:  # no spread: t is +-inf (p = 0), or undefined
        mean = float(d.mean())
        infinite = math.copysign(math.inf, mean)
        return PairedTest(infinite if mean else math.nan, 0.0 if mean else math.nan, n, "t")
    from scipy import stats

    result = stats.ttest_rel(d, np.zeros(n), alternative="two-sided", nan_policy="propagate")
    return PairedTest(float(result.statistic), min(1.0, float(result.pvalue)), n, "t")


def _wilcoxon_method(d: np.ndarray) -> tuple[str, str | stats.PermutationMethod]:
    """The p-value method of scipy's ``method="auto"`` (scipy >= 1.15), chosen here."""
    from scipy import stats

    nonzero = np.abs(d[d != 0])
    ties_or_zeros = len(nonzero) < len(d) or len(np.unique(nonzero)) < len(nonzero)
    if not ties_or_zeros and len(d) <= EXACT_WILCOXON_MAX_N:
        return "exact", "exact"
    if len(d) <= PERMUTATION_WILCOXON_MAX_N:  # zeros counted: every sign assignment
        return "permutation", stats.PermutationMethod(n_resamples=math.inf)
    return "normal", "asymptotic"


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
    n = int((d != 0).sum())
    if n == 0:
        return PairedTest(float("nan"), float("nan"), 0, "none")
    name, method = _wilcoxon_method(d)
    from scipy import stats

    result = stats.wilcoxon(
        d,
        zero_method="wilcox",
        correction=False,
        alternative="two-sided",
        method=method,
        nan_policy="propagate",
    )
    return PairedTest(float(result.statistic), min(1.0, float(result.pvalue)), n, name)


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
