"""Every pair of a protocol section's ranked entries, compared as ``fewtrans-board compare`` does.

A benchmark page shows, per HPE protocol, a matrix of paired comparisons of its ranked
entries on their shared episodes (headline aggregation), and each pair gets a "compare A vs
B" page. The numbers are :func:`~fewtrans_board.leaderboard.compare.compare_values`'s, the
function behind the CLI's ``compare``: per column the paired t-test, Wilcoxon, Cohen's d and
wins/ties/losses; overall the difference of the column averages with its seeded bootstrap
CI and the tests on the pooled episodes. The pooled t-test's p of every pair is then
Holm-adjusted over the pairs of the matrix (a matrix of m entries makes m(m-1)/2 tests).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from fewtrans_board.leaderboard.compare import compare_values
from fewtrans_board.stats.tests import holm
from fewtrans_board.website.downloads import Tables
from fewtrans_board.website.model import BenchmarkView, Download, MethodView, ProtocolSection

AGGREGATION = "hpe"
"""The matrix compares the headline aggregation (the protocol's fusion)."""
ALPHA = 0.05
"""Holm-adjusted p below this marks a difference as significant."""
MARKS = {"better": "▲", "worse": "▼", "n.s.": "="}
"""The text mark of a verdict (row against column): never colour alone."""
DOWNLOAD_COLUMNS = (
    "a",
    "b",
    "column",
    "episodes",
    "a_mean",
    "b_mean",
    "difference",
    "difference_ci_low",
    "difference_ci_high",
    "t_p",
    "t_p_holm_pairs",
    "t_p_holm_columns",
    "wilcoxon_p",
    "cohens_d",
    "wins",
    "ties",
    "losses",
)


def _verdict(difference: float, p_holm: float) -> str:
    """``better``, ``worse`` (for the side ``difference`` is taken from) or ``n.s.``."""
    if not p_holm < ALPHA:  # a NaN p (no spread at all) is not significant
        return "n.s."
    return "better" if difference > 0 else "worse"


@dataclass(frozen=True)
class Pair:
    """Two entries of one section, A ranked above (or level with) B.

    Attributes:
        a: the entry listed first in the headline table.
        b: the other entry.
        report: :func:`~fewtrans_board.leaderboard.compare.compare_values` of A against B.
        p_holm: the pooled t-test's p, Holm-adjusted over the matrix's pairs.
        tests: how many pairs the matrix adjusts over.
        page: the pair's "compare A vs B" page.
    """

    a: MethodView
    b: MethodView
    report: dict[str, Any]
    p_holm: float
    tests: int
    page: str

    @property
    def overall(self) -> dict[str, Any]:
        """The pooled row of the report (difference, CI, p-values, wins/ties/losses)."""
        overall: dict[str, Any] = self.report["overall"]
        return overall

    @property
    def columns(self) -> list[dict[str, Any]]:
        """The per-column rows of the report, in the page's column order."""
        rows: list[dict[str, Any]] = self.report["datasets"]
        return rows

    @property
    def difference(self) -> float:
        """A minus B: the difference of the column averages (accuracy points)."""
        return float(self.overall["difference"])

    @property
    def verdict(self) -> str:
        """A against B at Holm-adjusted 5%: ``better``, ``worse`` or ``n.s.``."""
        return _verdict(self.difference, self.p_holm)


@dataclass(frozen=True)
class Cell:
    """One cell of the matrix: its row's entry against its column's.

    Attributes:
        pair: the comparison (shared with the mirrored cell).
        flipped: whether the row's entry is the pair's B (signs are then reversed).
    """

    pair: Pair
    flipped: bool

    @property
    def row(self) -> MethodView:
        """The row's entry."""
        return self.pair.b if self.flipped else self.pair.a

    @property
    def column(self) -> MethodView:
        """The column's entry."""
        return self.pair.a if self.flipped else self.pair.b

    @property
    def difference(self) -> float:
        """Row minus column (accuracy points; a zero stays +0, never -0)."""
        return 0.0 - self.pair.difference if self.flipped else self.pair.difference

    @property
    def verdict(self) -> str:
        """The row's entry against the column's: ``better``, ``worse`` or ``n.s.``."""
        return _verdict(self.difference, self.pair.p_holm)

    @property
    def mark(self) -> str:
        """The verdict as a text mark (see :data:`MARKS`)."""
        return MARKS[self.verdict]

    @property
    def description(self) -> str:
        """The cell in words, for screen readers and tooltips."""
        words = {
            "better": "significantly better than",
            "worse": "significantly worse than",
            "n.s.": "not significantly different from",
        }[self.verdict]
        return (
            f"{self.row.name} minus {self.column.name}: {self.difference:+.2f} points, "
            f"{words} it (Holm-adjusted p = {self.pair.p_holm:.2g})"
        )


@dataclass
class PairwiseMatrix:
    """The paired comparisons of a protocol section's ranked entries.

    Attributes:
        benchmark: the sub-benchmark's name.
        protocol: the HPE protocol of the section.
        anchor: the section's anchor suffix (``""`` or ``-<protocol>``).
        methods: the entries, in headline-table order (the matrix's rows and columns).
        pairs: every pair, A the one listed first.
        seed: the bootstrap seed of the differences' CIs.
        resamples: their bootstrap resamples.
    """

    benchmark: str
    protocol: str
    anchor: str
    methods: list[MethodView]
    pairs: list[Pair]
    seed: int
    resamples: int
    _by_ids: dict[tuple[str, str], Pair] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._by_ids = {(p.a.id, p.b.id): p for p in self.pairs}

    @property
    def id(self) -> str:
        """The matrix's HTML id (also its download's table id)."""
        return f"pairwise{self.anchor}"

    def cell(self, row: MethodView, column: MethodView) -> Cell | None:
        """The cell of ``row`` against ``column`` (``None`` on the diagonal)."""
        if (row.id, column.id) in self._by_ids:
            return Cell(self._by_ids[row.id, column.id], flipped=False)
        if (column.id, row.id) in self._by_ids:
            return Cell(self._by_ids[column.id, row.id], flipped=True)
        return None

    @property
    def significant(self) -> int:
        """How many pairs differ at Holm-adjusted 5%."""
        return sum(pair.verdict != "n.s." for pair in self.pairs)


def compare_page(a: MethodView, b: MethodView) -> str:
    """The file name of the "compare A vs B" page (entry ids are unique across the store)."""
    return f"compare-{a.id}-vs-{b.id}.html"


def _episodes(method: MethodView, columns: Sequence[str]) -> dict[str, dict[int, float]]:
    """An entry's headline accuracy by episode index, per column."""
    out = {}
    for key in columns:
        run = method.runs[key]
        values = run.aggregations[AGGREGATION]
        out[key] = {int(e): float(v) for e, v in zip(run.run.episodes, values, strict=True)}
    return out


def _shared_columns(a: MethodView, b: MethodView, columns: Sequence[str]) -> list[str]:
    """The page's columns both entries ran on the same frozen manifest of."""
    return [
        k
        for k in columns
        if k in a.runs and k in b.runs and a.runs[k].manifest == b.runs[k].manifest
    ]


def ranked_order(section: ProtocolSection) -> list[MethodView]:
    """The section's ranked entries in the order its headline table lists them."""
    rows: Sequence[Any] = section.tables.get(AGGREGATION) or section.shots.get(AGGREGATION) or []
    return [row.method for row in rows]


def pairwise_matrix(
    view: BenchmarkView, section: ProtocolSection, seed: int = 0, resamples: int = 10_000
) -> PairwiseMatrix | None:
    """The section's matrix, or ``None`` when it has fewer than two ranked entries.

    Pairs without a shared manifest are left out (entries of one benchmark share them).

    Args:
        view: the benchmark page's view (its column order).
        section: the protocol section.
        seed: the bootstrap seed of the differences' CIs (``compare --seed``).
        resamples: bootstrap resamples of those CIs.
    """
    methods = ranked_order(section)
    if len(methods) < 2:
        return None
    reports: list[tuple[MethodView, MethodView, dict[str, Any]]] = []
    for i, a in enumerate(methods):
        for b in methods[i + 1 :]:
            columns = _shared_columns(a, b, view.datasets)
            if columns:
                report = compare_values(
                    _episodes(a, columns), _episodes(b, columns), seed=seed, resamples=resamples
                )
                reports.append((a, b, report))
    adjusted = holm([report["overall"]["t_p"] for _, _, report in reports])
    pairs = [
        Pair(a, b, report, p, len(reports), compare_page(a, b))
        for (a, b, report), p in zip(reports, adjusted, strict=True)
    ]
    return PairwiseMatrix(
        view.benchmark.name, section.protocol, section.anchor, methods, pairs, seed, resamples
    )


def _download_rows(matrix: PairwiseMatrix) -> list[tuple[Any, ...]]:
    rows: list[tuple[Any, ...]] = []
    for pair in matrix.pairs:
        o = pair.overall
        low, high = o["difference_ci"]
        rows.append(
            (
                *(pair.a.id, pair.b.id, "all", o["episodes"], o["a"], o["b"], o["difference"]),
                *(low, high, o["t_p"], pair.p_holm, None, o["wilcoxon_p"], o["cohens_d"]),
                *(o["wins"], o["ties"], o["losses"]),
            )
        )
        for r in pair.columns:
            rows.append(
                (
                    *(pair.a.id, pair.b.id, r["dataset"], r["episodes"], r["a"], r["b"]),
                    *(r["difference"], None, None, r["t_p"], None, r["t_p_holm"]),
                    *(r["wilcoxon_p"], r["cohens_d"], r["wins"], r["ties"], r["losses"]),
                )
            )
    return rows


def pairwise_downloads(
    view: BenchmarkView, matrices: Sequence[PairwiseMatrix]
) -> dict[str, Download]:
    """Each matrix as one long table: a row per pair pooled (``column`` ``all``) and per column.

    ``t_p_holm_pairs`` is the pooled p adjusted over the matrix's pairs (the matrix's
    marks), ``t_p_holm_columns`` a column's p adjusted over the pair's columns.
    """
    tables = Tables(f"benchmark-{view.benchmark.name}")
    for matrix in matrices:
        tables.add(
            matrix.id,
            f"{view.benchmark.title}: pairwise paired comparisons ({matrix.protocol})",
            DOWNLOAD_COLUMNS,
            _download_rows(matrix),
            benchmark=view.benchmark.name,
            hpe_protocol=matrix.protocol,
            aggregation=AGGREGATION,
            holm_over_pairs=len(matrix.pairs),
            bootstrap_seed=matrix.seed,
            bootstrap_resamples=matrix.resamples,
        )
    return dict(tables)


def pairwise_matrices(
    view: BenchmarkView, seed: int = 0, resamples: int = 10_000
) -> dict[str, PairwiseMatrix]:
    """Every section's matrix by protocol (sections with fewer than two entries have none)."""
    found = {s.protocol: pairwise_matrix(view, s, seed, resamples) for s in view.sections}
    return {protocol: matrix for protocol, matrix in found.items() if matrix is not None}
