"""Measured vs reported: one cell of a paper's table and a run's summary, compared.

Both numbers are means over episodes with a printed 95% CI half-width ``h``; the standard
error of each is ``h / z(0.975)``. The difference's standard error is the root of the sum
of squares (the two are independent samples of tasks), its two-sample z is
``difference / se``, and a cell is *within the combined CI* when ``|difference| <=
z(0.975) * se``. The two CIs *overlap* when ``|difference| <= h_measured + h_reported``
(a weaker test, reported beside it because readers check it by eye).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from scipy.stats import norm

Z95 = float(norm.ppf(0.975))


@dataclass(frozen=True)
class CellComparison:
    """One cell: measured and reported means (points) with their 95% CI half-widths."""

    row: str
    column: str
    measured: float | None
    measured_ci: float | None
    reported: float | None
    reported_ci: float | None
    episodes: int = 0

    @property
    def difference(self) -> float | None:
        """Measured minus reported (points)."""
        if self.measured is None or self.reported is None:
            return None
        return self.measured - self.reported

    @property
    def se(self) -> float | None:
        """Standard error of the difference (``None`` without both CIs)."""
        if self.measured_ci is None or self.reported_ci is None:
            return None
        return math.hypot(self.measured_ci / Z95, self.reported_ci / Z95)

    @property
    def z(self) -> float | None:
        """Two-sample z of the difference."""
        if self.difference is None or not self.se:
            return None
        return self.difference / self.se

    @property
    def p(self) -> float | None:
        """Two-sided p of the z."""
        return None if self.z is None else float(2 * norm.sf(abs(self.z)))

    @property
    def overlap(self) -> bool | None:
        """Whether the two 95% CIs overlap."""
        if self.difference is None or self.measured_ci is None or self.reported_ci is None:
            return None
        return abs(self.difference) <= self.measured_ci + self.reported_ci

    @property
    def within(self) -> bool | None:
        """Whether the difference lies within the combined 95% CI."""
        if self.difference is None or self.se is None:
            return None
        return abs(self.difference) <= Z95 * self.se

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form with every derived figure."""
        return {
            **asdict(self),
            "difference": self.difference,
            "se": self.se,
            "z": self.z,
            "p": self.p,
            "overlap": self.overlap,
            "within_combined_ci": self.within,
        }


def count_within(cells: Iterable[CellComparison]) -> tuple[int, int]:
    """``(k, n)``: cells within the combined CI among the ``n`` that can be tested."""
    tested = [c.within for c in cells if c.within is not None]
    return sum(tested), len(tested)


def average_cell(row: str, column: str, cells: list[CellComparison]) -> CellComparison | None:
    """The row's measured average over ``cells`` (the reported side left empty).

    The measured average's CI treats the datasets as independent samples:
    ``h = sqrt(sum h_i^2) / n`` (``None`` if a cell has none). ``None`` unless every
    cell was measured.
    """
    if not cells or any(c.measured is None for c in cells):
        return None
    n = len(cells)
    mean = sum(c.measured for c in cells if c.measured is not None) / n
    cis = [c.measured_ci for c in cells]
    ci = None if None in cis else math.sqrt(sum(h**2 for h in cis if h is not None)) / n
    return CellComparison(row, column, mean, ci, None, None, sum(c.episodes for c in cells))
