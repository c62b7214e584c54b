"""Mean and normal-approximation 95% confidence interval over episodes."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

Z_95 = 1.96


@dataclass(frozen=True)
class MeanCI:
    """A mean with its 95% half-width.

    Attributes:
        mean: the mean.
        ci95: the half-width ``1.96 * s / sqrt(n)``.
        n: number of values.
        ddof: delta degrees of freedom of ``s`` (1 = sample std, FewTrans; 0 = BSCD-FSL).
    """

    mean: float
    ci95: float
    n: int
    ddof: int

    def to_dict(self) -> dict[str, float | int]:
        """JSON-friendly form."""
        return {"mean": self.mean, "ci95": self.ci95, "n": self.n, "ddof": self.ddof}

    def __str__(self) -> str:
        return f"{self.mean:.2f} ± {self.ci95:.2f}"


def mean_ci(values: Sequence[float] | np.ndarray, ddof: int = 1, z: float = Z_95) -> MeanCI:
    """Mean and ``z * std(ddof) / sqrt(n)`` of per-episode values.

    FewTrans uses the sample standard deviation (``ddof=1``, torch.std's default); BSCD-FSL
    uses numpy's population standard deviation (``ddof=0``).
    """
    array = np.asarray(values, dtype=np.float64)
    n = int(array.size)
    if n == 0:
        return MeanCI(float("nan"), float("nan"), 0, ddof)
    spread = float(array.std(ddof=ddof)) if n > ddof else float("nan")
    return MeanCI(float(array.mean()), z * spread / math.sqrt(n), n, ddof)
