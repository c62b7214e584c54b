"""Regime views: a benchmark's headline table restricted to episodes of few shots or many ways.

README.md ("Leaderboard, submissions and the site") describes the regime tables. Each
protocol section of a benchmark page gets one per non-empty bucket (:data:`BUCKETS`),
computed at build time from the stored per-episode rows exactly as the section's headline
table is (:func:`ranked_rows`). Bucket rules: :data:`SHOT_RULE`, :data:`WAY_RULE` (the
FewTrans paper defines no buckets; it draws 2-15 ways and at most 10 shots per class).
Per-shot (CLIP k-shot) benchmarks get none (:data:`PER_SHOT_NOTE`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fewtrans_board.episodes.manifest import Manifest
from fewtrans_board.leaderboard.label_index import LabelIndex
from fewtrans_board.leaderboard.sub_benchmarks import SubBenchmark
from fewtrans_board.stats.bootstrap import averages_and_ranks, holm_paired, pool, tied_with_best
from fewtrans_board.stats.intervals import mean_ci
from fewtrans_board.stats.tests import cohens_d_paired
from fewtrans_board.website.downloads import Tables, json_value, mean_table_rows
from fewtrans_board.website.model import (
    BenchmarkView,
    Bucket,
    Comparison,
    Download,
    MethodView,
    ProtocolSection,
    RegimeTable,
    RegimeViews,
    TableRow,
)
from fewtrans_board.website.reporting import BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED

AGGREGATION = "hpe"
"""Regime tables show the headline aggregation (the protocol's fusion)."""

SHOT_RULE = (
    "An episode's shot count is the lower median of its classes' support sizes (sort the "
    "per-class counts and take the middle one, the smaller of the two middle ones for an "
    "even number of classes): K for a K-shot episode; for a variable-shot episode the "
    "support size of a typical class, not its rarest one."
)
WAY_RULE = "An episode's ways are its classes."
SOURCE_RULE = (
    "Both come from the frozen manifest (support items per class), never from a submission."
)
PER_SHOT_NOTE = (
    "No regime views here: every episode of a k-shot manifest has the same K for all of "
    "its classes, already reported per K in the tables above, and uses all of its "
    "dataset's classes, so a way regime would group datasets rather than episodes."
)


SHOT_BUCKETS = (
    Bucket("shots-1", "shots", 1, 1),
    Bucket("shots-2-4", "shots", 2, 4),
    Bucket("shots-5-10", "shots", 5, 10),
    Bucket("shots-11plus", "shots", 11, None),
)
WAY_BUCKETS = (
    Bucket("ways-2-5", "ways", 2, 5),
    Bucket("ways-6-10", "ways", 6, 10),
    Bucket("ways-11plus", "ways", 11, None),
)
BUCKETS = SHOT_BUCKETS + WAY_BUCKETS


def shot_count(per_class: Sequence[int]) -> int:
    """An episode's shot count: the lower median of its per-class support sizes."""
    counts = sorted(per_class)
    return int(counts[(len(counts) - 1) // 2])


@dataclass(frozen=True)
class EpisodeProfile:
    """Ways and shot count of every episode of a frozen manifest, by episode index."""

    ways: dict[int, int]
    shots: dict[int, int]

    @classmethod
    def of(cls, manifest: Manifest | LabelIndex) -> EpisodeProfile:
        """Read from the manifest's support items (see :func:`shot_count`)."""
        if isinstance(manifest, LabelIndex):
            index = [int(i) for i in manifest.index]
            return cls(
                dict(zip(index, (int(w) for w in manifest.ways), strict=True)),
                dict(zip(index, (shot_count(s.tolist()) for s in manifest.shots()), strict=True)),
            )
        episodes = manifest.episodes()
        return cls(
            {e.index: e.ways for e in episodes},
            {e.index: shot_count(e.shots()) for e in episodes},
        )

    def counts(self, dimension: str, episodes: np.ndarray) -> np.ndarray:
        """The ``shots`` or ``ways`` of ``episodes`` (manifest indices)."""
        table = self.shots if dimension == "shots" else self.ways
        return np.array([table[int(e)] for e in episodes], dtype=np.int64)


class EpisodeProfiles:
    """Profiles of a store's frozen manifests by content sha256, each read once, on demand.

    Args:
        frozen: ``{sha256: (file name, manifest)}``: ``LeaderboardStore.frozen``, or the
            label indexes of :func:`~fewtrans_board.leaderboard.label_index.frozen_labels`.
    """

    def __init__(self, frozen: Mapping[str, tuple[str, Manifest | LabelIndex]]) -> None:
        self._frozen = frozen
        self._profiles: dict[str, EpisodeProfile] = {}

    def get(self, sha256: str) -> EpisodeProfile | None:
        """The profile of a frozen manifest, ``None`` if the store has not frozen it."""
        if sha256 not in self._profiles:
            if sha256 not in self._frozen:
                return None
            self._profiles[sha256] = EpisodeProfile.of(self._frozen[sha256][1])
        return self._profiles[sha256]


def ranked_rows(
    methods: Sequence[MethodView],
    values: Mapping[str, Mapping[str, np.ndarray]],
    columns: Sequence[str],
    ddof: int,
    reference: MethodView | None,
) -> list[TableRow]:
    """A mean ± CI table of ``values``, with the statistics of the section's headline table.

    Per column the mean ± ``1.96 s / sqrt(n)`` (``ddof``); the average over columns and each
    entry's rank interval from one seeded bootstrap over episodes
    (:func:`~fewtrans_board.stats.bootstrap.averages_and_ranks`); ties with the best; a
    paired t-test of each entry against ``reference`` on the pooled episodes, Holm-adjusted
    over the entries (none when fewer than two episodes pair up).

    Args:
        methods: the entries, ranked among themselves.
        values: per entry id, per column, the per-episode accuracies (aligned on episodes).
        columns: the columns to show (each entry has values on each).
        ddof: the benchmark's CI ddof.
        reference: the reference entry (one of ``methods``), or ``None``.
    """
    if not methods:
        return []
    picked = {m.id: {c: np.asarray(values[m.id][c]) for c in columns} for m in methods}
    bootstrap = averages_and_ranks(picked, resamples=BOOTSTRAP_RESAMPLES, seed=BOOTSTRAP_SEED)
    tied = tied_with_best(picked) if len(methods) > 1 else {m.id: True for m in methods}
    comparisons: dict[str, Comparison] = {}
    if reference is not None:
        ref = pool(picked[reference.id], columns)
        pooled = {m.id: pool(picked[m.id], columns) for m in methods if m.id != reference.id}
        if len(ref) >= 2:
            for ident, p in holm_paired(pooled, ref).items():
                comparisons[ident] = Comparison(
                    difference=float(pooled[ident].mean() - ref.mean()),
                    p_holm=p,
                    cohens_d=cohens_d_paired(pooled[ident], ref),
                )
    rows = [
        TableRow(
            method=m,
            cells={c: mean_ci(picked[m.id][c], ddof=ddof) for c in columns},
            average=bootstrap[m.id][0],
            rank=bootstrap[m.id][1],
            tied_with_best=tied[m.id],
            versus_reference=comparisons.get(m.id),
        )
        for m in methods
    ]
    return sorted(rows, key=lambda r: (r.rank[0], r.method.id))


def regime_views(
    benchmark: SubBenchmark,
    section: ProtocolSection,
    columns: Sequence[str],
    profiles: EpisodeProfiles,
) -> RegimeViews:
    """The regime tables of one protocol section (its ranked entries, headline aggregation).

    Args:
        benchmark: the sub-benchmark.
        section: the protocol section (its ``methods`` and ``reference``).
        columns: the page's column keys.
        profiles: the store's manifest profiles.
    """
    methods = section.methods
    if benchmark.reporting == "per-shot":
        return RegimeViews(note=PER_SHOT_NOTE if methods else "")
    if not methods:
        return RegimeViews()
    episodes: dict[tuple[str, str], np.ndarray] = {}
    counts: dict[tuple[str, str, str], np.ndarray] = {}
    lacking = []
    for method in methods:
        for column in columns:
            run = method.runs[column]
            profile = profiles.get(run.run.provenance.manifest.sha256)
            if profile is None:
                lacking.append(f"{method.id} ({run.manifest})")
                continue
            indices = run.run.episodes
            episodes[method.id, column] = indices
            for dimension in ("shots", "ways"):
                counts[method.id, column, dimension] = profile.counts(dimension, indices)
    if lacking:
        return RegimeViews(
            note="No regime views here: the ways and shots of an episode come from its frozen "
            "manifest, and this store has not frozen the manifest of "
            + ", ".join(sorted(lacking))
            + "."
        )
    values = {m.id: m.values(AGGREGATION) for m in methods}
    first = methods[0].id
    views = RegimeViews(episodes=sum(len(episodes[first, c]) for c in columns))
    for bucket in BUCKETS:
        masks = {
            (m.id, c): bucket.contains(counts[m.id, c, bucket.dimension])
            for m in methods
            for c in columns
        }
        present = [c for c in columns if masks[first, c].any()]
        if not present:
            views.empty.append(bucket)
            continue
        picked = {m.id: {c: values[m.id][c][masks[m.id, c]] for c in present} for m in methods}
        views.tables.append(
            RegimeTable(
                bucket,
                section.anchor,
                present,
                {c: int(masks[first, c].sum()) for c in present},
                ranked_rows(methods, picked, present, benchmark.statistic_ddof, section.reference),
            )
        )
    return views


def regime_downloads(view: BenchmarkView) -> dict[str, Download]:
    """The CSV and JSON of every regime table of a benchmark page, by table id.

    The columns are the headline table's (:func:`~fewtrans_board.website.downloads.
    mean_table_rows`) over the bucket's columns; ``about`` names the bucket and its rule.
    """
    out = Tables(f"benchmark-{view.benchmark.name}")
    for section in view.sections:
        regimes = section.regimes
        for table in regimes.tables if regimes else []:
            columns, rows = mean_table_rows(table.rows, table.columns, section.reference)
            about = {
                "benchmark": view.benchmark.name,
                "hpe_protocol": section.protocol,
                "aggregation": AGGREGATION,
                "ddof": view.benchmark.statistic_ddof,
                "reference": section.reference.id if section.reference else None,
                "regime": table.bucket.to_json(),
                "rule": SHOT_RULE if table.bucket.dimension == "shots" else WAY_RULE,
                "episodes": table.n,
                "episodes_per_column": dict(table.episodes),
            }
            title = (
                f"{view.benchmark.title}: {table.bucket.label} ({AGGREGATION}, {section.protocol})"
            )
            out.add(table.id, title, columns, rows, **about)
    return out


def regime_page_data(view: BenchmarkView) -> dict[str, Any]:
    """What a benchmark page embeds for its regime selector (JSON, no NaN).

    ``regimes`` lists the buckets that have a table on the page (the selector's choices);
    ``tables`` summarises each table (its HTML id, bucket, protocol, episodes and, per row,
    the entry, its rank interval, average and verdict against the reference), the same
    numbers the HTML tables show.
    """
    present = {t.bucket.id for s in view.sections if s.regimes for t in s.regimes.tables}
    tables = []
    for section in view.sections:
        for table in section.regimes.tables if section.regimes else []:
            rows = []
            for row in table.rows:
                versus = row.versus_reference
                rows.append(
                    {
                        "entry_id": row.method.id,
                        "rank": list(row.rank),
                        "average": json_value(row.average.estimate),
                        "vs_reference": versus.verdict if versus else None,
                        "difference": json_value(versus.difference) if versus else None,
                        "p_holm": json_value(versus.p_holm) if versus else None,
                    }
                )
            tables.append(
                {
                    "id": table.id,
                    "regime": table.bucket.id,
                    "protocol": section.protocol,
                    "episodes": table.n,
                    "columns": dict(table.episodes),
                    "rows": rows,
                }
            )
    return {
        "aggregation": AGGREGATION,
        "shot_rule": SHOT_RULE,
        "way_rule": WAY_RULE,
        "regimes": [b.to_json() for b in BUCKETS if b.id in present],
        "tables": tables,
    }
