"""Correlation coefficients with p-values: Pearson (with a Fisher-z CI) and Spearman.

Implemented directly from the textbook formulas; tests compare them with ``scipy.stats``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy import special

Z_95 = 1.959963984540054


@dataclass(frozen=True)
class Correlation:
    """A correlation coefficient with its two-sided p-value.

    Attributes:
        method: ``"pearson"`` or ``"spearman"``.
        coefficient: r (Pearson) or rho (Spearman).
        pvalue: two-sided p-value of "no correlation" (t-distribution, n - 2 dof).
        n: number of pairs.
        ci95: ``(low, high)`` Fisher-z 95% interval of r (Pearson, n > 3), else ``None``.
    """

    method: str
    coefficient: float
    pvalue: float
    n: int
    ci95: tuple[float, float] | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        out = asdict(self)
        out["ci95"] = list(self.ci95) if self.ci95 is not None else None
        return out


def _pairs(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> tuple[Any, Any]:
    a, b = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(
            f"correlation needs two 1-d samples of equal length, got {a.shape}, {b.shape}"
        )
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ValueError("correlation inputs must be finite")
    return a, b


def _r_and_p(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    n = len(a)
    da, db = a - a.mean(), b - b.mean()
    denominator = math.sqrt(float(da @ da) * float(db @ db))
    if n < 3 or denominator == 0.0:
        return float("nan"), float("nan")
    r = max(-1.0, min(1.0, float(da @ db) / denominator))
    if abs(r) == 1.0:
        return r, 0.0
    t = r * math.sqrt((n - 2) / (1.0 - r * r))
    return r, min(1.0, 2.0 * float(special.stdtr(n - 2, -abs(t))))


def pearson(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> Correlation:
    """Pearson's r, its t-test p-value and the Fisher-z 95% confidence interval.

    The interval is ``tanh(atanh(r) ± 1.96 / sqrt(n - 3))``; it needs ``n > 3``.

    Raises:
        ValueError: unequal lengths or non-finite values.
    """
    a, b = _pairs(x, y)
    r, p = _r_and_p(a, b)
    n = len(a)
    ci = None
    if n > 3 and math.isfinite(r):
        if abs(r) == 1.0:
            ci = (r, r)
        else:
            z, half = math.atanh(r), Z_95 / math.sqrt(n - 3)
            ci = (math.tanh(z - half), math.tanh(z + half))
    return Correlation("pearson", r, p, n, ci)


def average_ranks(values: np.ndarray) -> np.ndarray:
    """Ranks 1..n with ties sharing the mean of the ranks they span."""
    order = np.argsort(values, kind="mergesort")
    ranks = np.empty(len(values), dtype=np.float64)
    ranks[order] = np.arange(1, len(values) + 1, dtype=np.float64)
    sorted_values = values[order]
    start = 0
    for end in range(1, len(values) + 1):
        if end == len(values) or sorted_values[end] != sorted_values[start]:
            ranks[order[start:end]] = (start + 1 + end) / 2.0
            start = end
    return ranks


def spearman(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> Correlation:
    """Spearman's rho (Pearson's r of average ranks) with the t-approximation p-value.

    Raises:
        ValueError: unequal lengths or non-finite values.
    """
    a, b = _pairs(x, y)
    rho, p = _r_and_p(average_ranks(a), average_ranks(b))
    return Correlation("spearman", rho, p, len(a))
