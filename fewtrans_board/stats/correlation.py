"""Correlation coefficients with p-values: Pearson (with a Fisher-z CI) and Spearman.

``scipy.stats.pearsonr`` and ``spearmanr`` with the alternative, the p-value method and the
NaN policy pinned; fewer than three pairs or a constant sample give NaN here, without
scipy's warnings.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy import stats


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


def _undefined(a: np.ndarray, b: np.ndarray) -> bool:
    """Fewer than three pairs, or a constant sample: no coefficient, no p-value."""
    return len(a) < 3 or bool(np.ptp(a) == 0 or np.ptp(b) == 0)


def pearson(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> Correlation:
    """Pearson's r, its t-test p-value and the Fisher-z 95% confidence interval.

    The interval is ``tanh(atanh(r) ± z_0.975 / sqrt(n - 3))``; it needs ``n > 3``.

    Raises:
        ValueError: unequal lengths or non-finite values.
    """
    a, b = _pairs(x, y)
    n = len(a)
    if _undefined(a, b):
        return Correlation("pearson", float("nan"), float("nan"), n, None)
    result = stats.pearsonr(a, b, alternative="two-sided", method=None)
    r = float(result.statistic)
    ci = None
    if n > 3:
        interval = result.confidence_interval(confidence_level=0.95, method=None)
        ci = (float(interval.low), float(interval.high))
    return Correlation("pearson", r, float(result.pvalue), n, ci)


def average_ranks(values: np.ndarray) -> np.ndarray:
    """Ranks 1..n with ties sharing the mean of the ranks they span."""
    return np.asarray(stats.rankdata(values, method="average"), dtype=np.float64)


def spearman(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> Correlation:
    """Spearman's rho (Pearson's r of average ranks) with the t-approximation p-value.

    Raises:
        ValueError: unequal lengths or non-finite values.
    """
    a, b = _pairs(x, y)
    if _undefined(a, b):
        return Correlation("spearman", float("nan"), float("nan"), len(a))
    result = stats.spearmanr(a, b, alternative="two-sided", nan_policy="propagate")
    return Correlation("spearman", float(result.statistic), float(result.pvalue), len(a))
