"""Internal consistency of statistics a paper reports: p against effect size against N.

A transcribed table is kept as printed; this module recomputes what its own numbers imply
and the site shows a note where they do not add up (computed at build time, never typed):

- **paired t-test** (a table with a ``p`` and a Cohen's ``d`` column, e.g. FewTrans Table
  VIII): for a paired t-test on N pairs, ``d = mean diff / sd diff`` and ``t = d * sqrt(N)``,
  so ``p = 2 * t_sf(|d| sqrt(N), N - 1)``. N is the caption's ``N = ...`` per row; a row
  pooling the others (``average``) has N times the number of those rows;
- **Spearman's rho** with its p over n points (FewTrans Fig. 6): scipy's p (the
  t-approximation), ``t = rho * sqrt((n - 2) / (1 - rho^2))`` on ``n - 2`` degrees of freedom.

A printed number stands for an interval (``-0.10`` is anything in [-0.105, -0.095]), so a
row is consistent when the p-values its effect allows at the stated N overlap the printed
p's own interval. Otherwise the note gives the p the printed effect implies and the N (or
n) at which the printed effect and p agree.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

__all__ = [
    "Check",
    "ReportedCorrelation",
    "correlation_check",
    "fitting_n",
    "half_unit",
    "paired_t_p",
    "paired_table_checks",
    "reported_correlations",
    "spearman_p",
    "table_checks",
]

MAX_N = 10**7
"""The largest N searched for a fit."""


def paired_t_p(d: float, n: float) -> float:
    """Two-sided p of a paired t-test with Cohen's ``d`` (mean/sd of the differences) on ``n``."""
    from scipy import stats

    t = abs(d) * math.sqrt(n)
    return float(2 * stats.t.sf(t, n - 1))


def spearman_p(rho: float, n: float) -> float:
    """Two-sided p scipy's ``spearmanr`` gives ``rho`` over ``n`` points (t-approximation)."""
    from scipy import stats

    if abs(rho) >= 1:
        return 0.0
    t = abs(rho) * math.sqrt((n - 2) / (1 - rho * rho))
    return float(2 * stats.t.sf(t, n - 2))


def half_unit(literal: str) -> float:
    """Half a unit of the last printed digit: ``"0.4859"`` -> 5e-05, ``"9e-7"`` -> 5e-08."""
    exponent = Decimal(literal.strip()).as_tuple().exponent
    if not isinstance(exponent, int):
        raise ValueError(f"{literal!r} is not a finite number")
    return 0.5 * 10.0**exponent


def fitting_n(p_of: Callable[[float], float], p: float, low: float = 3.0) -> float | None:
    """The (real) N at which ``p_of(N)`` equals ``p``; ``None`` where no N in range does.

    ``p_of`` falls as N grows for any non-zero effect, so the root is bracketed.
    """
    from scipy.optimize import brentq

    if not 0 < p < 1:
        return None

    def gap(n: float) -> float:
        return math.log(max(p_of(n), 1e-300)) - math.log(p)

    if gap(low) < 0 or gap(MAX_N) > 0:
        return None
    return float(brentq(gap, low, MAX_N, xtol=1e-6))


@dataclass(frozen=True)
class Check:
    """One reported (effect, p, N) triple, recomputed.

    Attributes:
        label: the row (or figure) it belongs to.
        statistic: ``d`` (paired t) or ``rho`` (Spearman).
        effect: the printed effect size.
        p: the printed p.
        n: the stated N (pairs) or n (points).
        implied_p: p of the printed effect at the stated N.
        implied_range: the p-values the effect's printed interval allows at that N.
        fit: the N at which the printed effect gives the printed p (``None``: none does).
        fit_range: the fits of both ends of the effect's printed interval.
        consistent: whether ``implied_range`` meets the printed p's interval.
        printed: the effect and the p as printed (``"-0.10"``, ``"0.4859"``).
    """

    label: str
    statistic: str
    effect: float
    p: float
    n: int
    implied_p: float
    implied_range: tuple[float, float]
    fit: float | None
    fit_range: tuple[float | None, float | None]
    consistent: bool
    printed: tuple[str, str] = ("", "")

    @property
    def line(self) -> str:
        """What does not add up, in one sentence (``""`` when consistent)."""
        if self.consistent:
            return ""
        fit = f"they agree at N ≈ {self.fit:.0f}" if self.fit else "no N makes them agree"
        name = "n" if self.statistic == "rho" else "N"
        fit = fit.replace("N ≈", f"{name} ≈")
        return (
            f"{self.label}: {self.statistic} = {self.effect:g} with {name} = {self.n:,} "
            f"gives p = {self.implied_p:.2g}, not the printed {self.p:g}; {fit}."
        )


def _check(
    label: str,
    statistic: str,
    literals: tuple[str, str],
    n: int,
    p_of: Callable[[float, float], float],
) -> Check:
    effect_text, p_text = literals
    effect, p = float(effect_text), float(p_text)
    de, dp = half_unit(effect_text), half_unit(p_text)
    ends = (abs(effect) - de, abs(effect) + de)
    implied = p_of(effect, n)
    # A larger |effect| gives a smaller p: the interval's ends swap.
    high, low = (p_of(max(e, 0.0), n) for e in ends)

    def fit_of(size: float) -> float | None:
        return fitting_n(lambda m: p_of(size, m), p) if size > 0 else None

    fits = [fit_of(e) for e in ends]
    return Check(
        label=label,
        statistic=statistic,
        effect=effect,
        p=p,
        n=n,
        implied_p=implied,
        implied_range=(low, high),
        fit=fit_of(abs(effect)),
        fit_range=(fits[1], fits[0]),
        consistent=low <= p + dp and p - dp <= high,
        printed=(effect_text, p_text),
    )


def stated_n(caption: str) -> int | None:
    """The ``N = 600`` of a caption (TeX ``$N=600$`` too), or ``None``."""
    found = re.search(r"\bN\s*=\s*([\d,]+)", caption)
    return int(found.group(1).replace(",", "")) if found else None


def _literal(cell: Any) -> str | None:
    value = cell.get("value") if isinstance(cell, dict) else None
    if isinstance(value, str):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return repr(value)
    return None


def paired_table_checks(literal_data: dict[str, Any]) -> list[Check]:
    """Checks of a paired t-test table (columns ``p`` and ``d``), as printed.

    Args:
        literal_data: the reported table read with its numbers as printed strings
            (``json.loads(text, parse_float=str)``), so ``-0.10`` keeps its two decimals.

    Returns:
        One check per row with both numbers; ``[]`` for a table without ``p`` and ``d``
        columns or without a stated N.
    """
    columns = literal_data.get("columns", [])
    n = stated_n(str(literal_data.get("caption", "")))
    if "p" not in columns or "d" not in columns or n is None:
        return []
    rows = [r for r in literal_data.get("rows", []) if isinstance(r, dict)]
    pooled = sum(1 for r in rows if r.get("method") != "average")
    checks = []
    for row in rows:
        cells = row.get("cells", {})
        d, p = _literal(cells.get("d")), _literal(cells.get("p"))
        if d is None or p is None:
            continue
        size = n * pooled if row.get("method") == "average" else n
        label = str(row.get("extra", {}).get("label") or row.get("method"))
        checks.append(_check(label, "d", (d, p), size, paired_t_p))
    return checks


def table_checks(path: Path) -> list[Check]:
    """:func:`paired_table_checks` of a reported table file (read with its literals)."""
    text = path.read_text(encoding="utf-8")
    return paired_table_checks(json.loads(text, parse_float=str))


@dataclass(frozen=True)
class ReportedCorrelation:
    """A correlation a paper reports in a figure or its text (no table to transcribe).

    Attributes:
        source: where it is printed.
        benchmark: the sub-benchmark page that shows it.
        rho: the printed coefficient, as printed.
        p: the printed p, as printed.
        points: what one point is, for the note.
    """

    source: str
    benchmark: str
    rho: str
    p: str
    points: str


def reported_correlations() -> list[ReportedCorrelation]:
    """The reported correlations the site checks: FewTrans Fig. 6 (Zipf vs gain)."""
    from fewtrans_board.analysis.zipf import PAPER_P, PAPER_RHO

    return [
        ReportedCorrelation(
            source="FewTrans Fig. 6 (§VI-C): adjusted Zipf score vs CLIP adaptation gain",
            benchmark="fewtrans-multimodal",
            rho=repr(PAPER_RHO),
            p=repr(PAPER_P),
            points="one point per FewTrans dataset of the CLIP experiments",
        )
    ]


def correlation_check(reported: ReportedCorrelation, n: int) -> Check:
    """The check of a reported Spearman rho and p over ``n`` points."""
    return _check(reported.source, "rho", (reported.rho, reported.p), n, spearman_p)


def page_checks(view: Any, reported_dir: Path) -> dict[str, Any]:
    """What a benchmark page shows of these checks.

    Args:
        view: the page's ``BenchmarkView`` (its reported tables and sub-benchmark).
        reported_dir: the store's ``reported/`` folder (the tables as printed).

    Returns:
        ``consistency``: ``{table key: checks}`` of its reported tables with a paired test;
        ``correlations``: ``[(reported, check)]`` of the correlations printed for this
        benchmark, over one point per dataset of the benchmark.
    """
    tables = {}
    for table in view.reported:
        path = reported_dir / f"{table.key}.json"
        checks = table_checks(path) if path.is_file() else []
        if checks:
            tables[table.key] = checks
    benchmark = view.benchmark
    correlations = [
        (r, correlation_check(r, len(benchmark.manifests)))
        for r in reported_correlations()
        if r.benchmark == benchmark.name
    ]
    return {"consistency": tables, "correlations": correlations}
