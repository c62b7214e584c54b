"""Everything the site shows, derived from the store's per-episode rows at build time."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fewtrans_board.leaderboard.benchmarks import BENCHMARKS, Benchmark
from fewtrans_board.leaderboard.index import index_entries
from fewtrans_board.leaderboard.store import LeaderboardStore
from fewtrans_board.results.load import RunResults, find_runs, load_run
from fewtrans_board.results.summary import summarize
from fewtrans_board.stats.bootstrap import (
    BootstrapCI,
    averages_and_ranks,
    holm_paired,
    pool,
    tied_with_best,
)
from fewtrans_board.stats.intervals import MeanCI, mean_ci
from fewtrans_board.stats.tests import cohens_d_paired

COLUMN_SETS = ("hpe", "vote", "oracle")
BOOTSTRAP_SEED = 0
BOOTSTRAP_RESAMPLES = 2000


@dataclass
class MethodRun:
    """One submission on one dataset."""

    dataset: str
    manifest: str
    run: RunResults
    aggregations: dict[str, np.ndarray]
    summary: dict[str, Any]

    @property
    def roles(self) -> dict[str, str]:
        """HPE axis roles of the adapter's Config."""
        return dict(self.run.meta["hpe"].get("roles", {}))


@dataclass
class MethodView:
    """A stored submission."""

    id: str
    meta: dict[str, Any]
    status: str
    superseded_by: str | None
    centre_search: dict[str, Any] | None
    runs: dict[str, MethodRun] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """Human label of the method."""
        return f"{self.meta['method']} ({self.meta['model']})"

    def values(self, aggregation: str) -> dict[str, np.ndarray]:
        """Per-episode accuracies of an aggregation, per dataset."""
        return {d: r.aggregations[aggregation] for d, r in self.runs.items()}


@dataclass
class Comparison:
    """A method against the benchmark's reference baseline (paired, pooled episodes)."""

    difference: float
    p_holm: float
    cohens_d: float

    @property
    def verdict(self) -> str:
        """``better``, ``worse`` or ``n.s.`` at Holm-adjusted 5%."""
        if self.p_holm >= 0.05:
            return "n.s."
        return "better" if self.difference > 0 else "worse"


@dataclass
class TableRow:
    """One method's row of a benchmark table under one aggregation."""

    method: MethodView
    cells: dict[str, MeanCI]
    average: BootstrapCI
    rank: tuple[int, int, int]
    tied_with_best: bool
    versus_reference: Comparison | None


@dataclass
class ReportedTable:
    """Numbers transcribed from a paper (never used in tests)."""

    key: str
    data: dict[str, Any]

    @property
    def columns(self) -> list[str]:
        """Cell keys in the paper's column order."""
        return list(self.data["columns"])


@dataclass
class BenchmarkView:
    """A sub-benchmark page."""

    benchmark: Benchmark
    datasets: list[str]
    methods: list[MethodView]
    tables: dict[str, list[TableRow]]
    reference: MethodView | None
    reported: list[ReportedTable]

    @property
    def leader(self) -> TableRow | None:
        """The top-ranked row under the headline aggregation."""
        rows = self.tables.get("hpe", [])
        return rows[0] if rows else None


@dataclass
class SiteData:
    """All views of a leaderboard."""

    benchmarks: list[BenchmarkView]
    methods: list[MethodView]
    datasets: dict[str, list[tuple[BenchmarkView, MethodView]]]


def _load_methods(store: LeaderboardStore) -> list[MethodView]:
    frozen = {sha: name for sha, (name, _) in store.frozen.items()}
    methods = []
    for entry in index_entries(store):
        centre_path = store.submissions_dir / entry.id / "centre-search.json"
        view = MethodView(
            id=entry.id,
            meta=entry.meta.to_dict(),
            status=entry.status,
            superseded_by=entry.superseded_by,
            centre_search=json.loads(centre_path.read_text()) if centre_path.is_file() else None,
        )
        for run, summary in zip(entry.runs, entry.summaries, strict=True):
            view.runs[run.dataset] = MethodRun(
                dataset=run.dataset,
                manifest=frozen.get(run.meta["manifest"]["sha256"], run.meta["manifest"]["file"]),
                run=run,
                aggregations=run.aggregations(),
                summary=summary,
            )
        methods.append(view)
    return methods


def local_methods(run_dirs: list[Path]) -> list[MethodView]:
    """Unsubmitted local runs (e.g. the demo's) shown as entries with status ``local``.

    Each run joins the first benchmark whose manifests include its manifest and whose
    model rule accepts its model (original vs unlearned CLIP); other runs are skipped.
    """
    views: dict[str, MethodView] = {}
    for path in find_runs(run_dirs):
        run = load_run(path)
        manifest = run.meta["manifest"]["file"]
        model, adapter = run.meta["model"]["name"], run.meta["adapter"]["name"]
        benchmark = next(
            (
                b.name
                for b in BENCHMARKS.values()
                if manifest in b.manifests and b.accepts(model, run.dataset)
            ),
            None,
        )
        if benchmark is None:
            continue
        ident = f"local-{adapter}--{model}".replace(":", "-").replace("/", "-").lower()
        meta = {
            "method": adapter,
            "model": model,
            "adapter": adapter,
            "benchmark": benchmark,
            "hpe_protocol": run.meta["hpe"]["name"],
            "authors": ["local run"],
            "hardware": run.meta["environment"]["device"],
            "plugins": {},
            "paper": "",
            "code": "",
            "supersedes": "",
        }
        view = views.setdefault(
            ident,
            MethodView(ident, meta, "local", None, run.meta.get("centre_search")),
        )
        view.runs[run.dataset] = MethodRun(
            run.dataset, manifest, run, run.aggregations(), summarize(run)
        )
    return list(views.values())


def _table(
    methods: list[MethodView],
    datasets: list[str],
    aggregation: str,
    ddof: int,
    reference: MethodView | None,
) -> list[TableRow]:
    values = {m.id: m.values(aggregation) for m in methods}
    bootstrap = (
        averages_and_ranks(values, resamples=BOOTSTRAP_RESAMPLES, seed=BOOTSTRAP_SEED)
        if methods
        else {}
    )
    tied = tied_with_best(values) if len(methods) > 1 else {m.id: True for m in methods}
    comparisons: dict[str, Comparison] = {}
    if reference is not None:
        ref = pool(values[reference.id], datasets)
        pooled = {m.id: pool(values[m.id], datasets) for m in methods if m.id != reference.id}
        for ident, p in holm_paired(pooled, ref).items():
            comparisons[ident] = Comparison(
                difference=float(pooled[ident].mean() - ref.mean()),
                p_holm=p,
                cohens_d=cohens_d_paired(pooled[ident], ref),
            )
    rows = [
        TableRow(
            method=m,
            cells={d: mean_ci(values[m.id][d], ddof=ddof) for d in datasets},
            average=bootstrap[m.id][0],
            rank=bootstrap[m.id][1],
            tied_with_best=tied[m.id],
            versus_reference=comparisons.get(m.id),
        )
        for m in methods
    ]
    return sorted(rows, key=lambda r: (r.rank[0], r.method.id))


def load_reported(store: LeaderboardStore) -> dict[str, list[ReportedTable]]:
    """Paper-reported tables grouped by benchmark."""
    grouped: dict[str, list[ReportedTable]] = {}
    for path in sorted(store.reported_dir.glob("*.json")) if store.reported_dir.is_dir() else []:
        data = json.loads(path.read_text(encoding="utf-8"))
        grouped.setdefault(data["benchmark"], []).append(ReportedTable(path.stem, data))
    return grouped


def build_site_data(store: LeaderboardStore, local_runs: list[Path] | None = None) -> SiteData:
    """Load every submission (plus local runs) and derive tables, comparisons, dataset views."""
    methods = _load_methods(store) + (local_methods(local_runs) if local_runs else [])
    reported = load_reported(store)
    views = []
    datasets_index: dict[str, list[tuple[BenchmarkView, MethodView]]] = {}
    for name, benchmark in BENCHMARKS.items():
        members = [m for m in methods if m.meta["benchmark"] == name and not m.superseded_by]
        if not members and name not in reported:
            continue
        datasets = sorted(members[0].runs) if members else []
        reference = next(
            (m for m in members if m.meta["adapter"] == benchmark.reference_adapter), None
        )
        tables = (
            {
                aggregation: _table(
                    members, datasets, aggregation, benchmark.statistic_ddof, reference
                )
                for aggregation in COLUMN_SETS
            }
            if members
            else {}
        )
        view = BenchmarkView(
            benchmark, datasets, members, tables, reference, reported.get(name, [])
        )
        views.append(view)
        for method in members:
            for dataset in method.runs:
                datasets_index.setdefault(dataset, []).append((view, method))
    return SiteData(benchmarks=views, methods=methods, datasets=datasets_index)


def site_files_dir() -> Path:
    """The folder with ``templates/`` and ``static/`` (packaged as fewtrans_board.site_files)."""
    from importlib import resources

    return Path(str(resources.files("fewtrans_board.site_files")))
