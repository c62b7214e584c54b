"""Everything the site shows, derived from the store's per-episode rows at build time."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from fewtrans_board.core.errors import SubmissionError, describe
from fewtrans_board.leaderboard.entries import LoadedEntry, entry_errors, load_entries
from fewtrans_board.leaderboard.label_index import LabelIndex, frozen_labels
from fewtrans_board.leaderboard.meta import SubmissionMeta
from fewtrans_board.leaderboard.runs import load_checked_run
from fewtrans_board.leaderboard.store import LeaderboardStore
from fewtrans_board.leaderboard.sub_benchmarks import (
    SUB_BENCHMARKS,
    SubBenchmark,
    statistic_ddof_of_run,
)
from fewtrans_board.leaderboard.table import column_keys
from fewtrans_board.results.digest import RunDigest
from fewtrans_board.results.load import find_runs
from fewtrans_board.results.per_shot import shot_seed_pairs
from fewtrans_board.results.summary import summarize
from fewtrans_board.website.model import (
    BaseNovelRow,
    BenchmarkView,
    MethodRun,
    MethodView,
    ProtocolSection,
    ReportedTable,
    ShotRow,
    SiteData,
    TableRow,
    protocol_description,
)
from fewtrans_board.website.regimes import EpisodeProfiles, ranked_rows, regime_views
from fewtrans_board.website.reporting import base_novel_table, shot_table

COLUMN_SETS = ("hpe", "vote", "oracle")


def _columns(benchmark: SubBenchmark, runs: dict[str, MethodRun]) -> list[str]:
    """Column keys by dataset, then in the benchmark's manifest order (5, 20, 50 shots)."""
    order = {m: i for i, m in enumerate(benchmark.manifests)}
    return sorted(runs, key=lambda k: (runs[k].dataset, order.get(runs[k].manifest, len(order)), k))


def method_run(
    run: RunDigest,
    manifest: str,
    summary: dict[str, Any],
    manifest_meta: dict[str, Any] | None = None,
    dataset: str | None = None,
) -> MethodRun:
    """A run's views; ``manifest_meta`` (the frozen manifest's) fixes (K, seed).

    ``dataset`` is the frozen manifest's (default: the run's own record, for local runs).
    """
    return MethodRun(
        dataset or run.dataset,
        manifest,
        run,
        run.aggregations(),
        summary,
        run.aggregations("novel") if run.has_novel else {},
        shot_seed_pairs(manifest_meta or run.provenance.manifest.to_json()),
    )


def _stored_methods(entries: Iterable[LoadedEntry], datasets: dict[str, str]) -> list[MethodView]:
    """Views of the loaded entries; their runs and summaries are used, never re-read.

    Args:
        entries: the store's loaded entries.
        datasets: dataset of each frozen manifest by file name.
    """
    methods = []
    for entry in entries:
        keys = column_keys(SUB_BENCHMARKS[entry.meta.benchmark], datasets)
        view = MethodView(
            id=entry.id,
            meta=entry.meta,
            status=entry.status,
            superseded_by=entry.superseded_by,
            centre_search=entry.stored.centre_search,
            verification=entry.verification,
            standing=entry.standing,
        )
        with entry_errors(entry.id):
            for item, summary in zip(entry.stored.runs, entry.summaries, strict=True):
                key = keys.get(item.manifest, item.dataset)
                if key in view.runs:
                    raise SubmissionError("bad-store-entry", f"two runs on {item.manifest}")
                view.runs[key] = method_run(
                    item.run, item.manifest, summary, item.manifest_meta, item.dataset
                )
        methods.append(view)
    return methods


def local_methods(run_dirs: list[Path], datasets: dict[str, str] | None = None) -> list[MethodView]:
    """Unsubmitted local runs (e.g. the demo's) shown as entries with status ``local``.

    Each run joins the first benchmark whose manifests include its manifest and whose
    model rule accepts its model (original vs unlearned CLIP); other runs are skipped.

    Args:
        run_dirs: folders holding runs.
        datasets: dataset of each frozen manifest by file name (the store's), so local
            runs get the same column keys as the stored entries beside them.

    Raises:
        SubmissionError: a run whose files or metadata do not match the schema (named).
    """
    views: dict[str, MethodView] = {}
    for path in find_runs(run_dirs):
        run = load_checked_run(path, str(path), intake=False)
        manifest = run.provenance.manifest.file
        model, adapter = run.provenance.model.name, run.provenance.adapter.name
        benchmark = next(
            (
                b.name
                for b in SUB_BENCHMARKS.values()
                if manifest in b.manifests and b.accepts(model, run.dataset)
            ),
            None,
        )
        if benchmark is None:
            continue
        ident = f"local-{adapter}--{model}".replace(":", "-").replace("/", "-").lower()
        key = column_keys(SUB_BENCHMARKS[benchmark], datasets or {}).get(manifest, run.dataset)
        meta = SubmissionMeta(
            id=ident,
            method=adapter,
            model=model,
            adapter=adapter,
            benchmark=benchmark,
            hpe_protocol=run.provenance.hpe.name,
            authors=("local run",),
            hardware=run.provenance.environment.device,
            plugins={},
        )
        view = views.setdefault(
            ident, MethodView(ident, meta, "local", None, run.provenance.centre_search)
        )
        view.runs[key] = method_run(
            RunDigest.of(run),
            manifest,
            summarize(run, ddof=statistic_ddof_of_run(run.provenance.manifest.to_json())),
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
    return ranked_rows(methods, values, datasets, ddof, reference)


def load_reported(store: LeaderboardStore) -> dict[str, list[ReportedTable]]:
    """Paper-reported tables grouped by benchmark."""
    grouped: dict[str, list[ReportedTable]] = {}
    for path in sorted(store.reported_dir.glob("*.json")) if store.reported_dir.is_dir() else []:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise SubmissionError(
                "bad-reported-table", f"{path.name} is unreadable: {describe(exc)}"
            ) from exc
        if not isinstance(data, dict) or data.get("benchmark") not in SUB_BENCHMARKS:
            raise SubmissionError(
                "bad-reported-table", f"{path.name} does not name a sub-benchmark in 'benchmark'"
            )
        grouped.setdefault(data["benchmark"], []).append(ReportedTable(path.stem, data))
    return grouped


def protocols_of(benchmark: SubBenchmark, methods: Iterable[MethodView]) -> list[str]:
    """The HPE protocols of ``methods``: the benchmark's accepted ones, in its order.

    Any other protocol (a local run's) follows, by name.
    """
    present = {m.protocol for m in methods}
    known = [p for p in benchmark.hpe_protocols if p in present]
    return known + sorted(present - set(known))


def protocol_section(
    benchmark: SubBenchmark,
    protocol: str,
    listed: list[MethodView],
    datasets: list[str],
    anchor: str = "",
) -> ProtocolSection:
    """The entries of ``listed`` under ``protocol``, ranked among themselves only.

    Tables, CIs, rank intervals, ties with the best and significance flags are computed
    from these entries alone; the reference is the benchmark's reference adapter's entry
    under this protocol (none if it has none here).

    Args:
        benchmark: the sub-benchmark.
        protocol: the HPE protocol.
        listed: the benchmark's current (not superseded) entries, of any protocol.
        datasets: the page's column keys.
        anchor: suffix of the section's HTML ids (see :class:`ProtocolSection`).
    """
    group = [m for m in listed if m.protocol == protocol]
    members = [m for m in group if not m.transductive and m.ranked]
    apart = [m for m in group if m.transductive and m.ranked]
    unverified = [m for m in group if not m.ranked]
    reference = next((m for m in members if m.meta.adapter == benchmark.reference_adapter), None)
    ddof = benchmark.statistic_ddof
    tables: dict[str, list[TableRow]] = {}
    base_novel: dict[str, list[BaseNovelRow]] = {}
    shots: dict[str, list[ShotRow]] = {}
    for aggregation in COLUMN_SETS if members else ():
        if benchmark.reporting == "per-shot":
            pairs = [(m, m.per_shot(aggregation)) for m in members]
            shots[aggregation] = shot_table(pairs, datasets)
            continue
        tables[aggregation] = _table(members, datasets, aggregation, ddof, reference)
        if benchmark.reporting == "base-to-novel":
            base_novel[aggregation] = base_novel_table(members, datasets, aggregation, ddof)
    return ProtocolSection(
        protocol=protocol,
        description=protocol_description(protocol),
        anchor=anchor,
        methods=members,
        tables=tables,
        reference=reference,
        base_novel=base_novel,
        shots=shots,
        transductive=_table(apart, datasets, "hpe", ddof, None) if apart else [],
        unverified=_table(unverified, datasets, "hpe", ddof, None) if unverified else [],
    )


def build_site_data(
    store: LeaderboardStore,
    local_runs: list[Path] | None = None,
    entries: Iterable[LoadedEntry] | None = None,
    labels: Mapping[str, tuple[str, LabelIndex]] | None = None,
) -> SiteData:
    """Derive tables, comparisons and dataset views of every submission (plus local runs).

    A benchmark's entries are ranked within their HPE protocol only: one
    :class:`~fewtrans_board.website.model.ProtocolSection` per protocol present, each with
    its regime tables (:mod:`~fewtrans_board.website.regimes`).

    Args:
        store: the leaderboard store.
        local_runs: result folders to show as unsubmitted local entries.
        entries: the store's entries as already loaded by
            :func:`~fewtrans_board.leaderboard.entries.load_entries`; default: load them.
        labels: the store's frozen manifests as label indexes
            (:func:`~fewtrans_board.leaderboard.label_index.frozen_labels`); default: read them.

    Raises:
        SubmissionError: a stored entry or local run is unreadable (named).
    """
    loaded = load_entries(store) if entries is None else entries
    frozen = frozen_labels(store.manifests_dir) if labels is None else labels
    of_manifest = {name: manifest.dataset for name, manifest in frozen.values()}
    local = local_methods(local_runs, of_manifest) if local_runs else []
    methods = _stored_methods(loaded, of_manifest) + local
    reported = load_reported(store)
    profiles = EpisodeProfiles(frozen)
    views = []
    datasets_index: dict[str, list[tuple[BenchmarkView, MethodView, str]]] = {}
    for name, benchmark in SUB_BENCHMARKS.items():
        listed = [m for m in methods if m.meta.benchmark == name and not m.superseded_by]
        if not listed and name not in reported:
            continue
        members = [m for m in listed if not m.transductive and m.ranked]
        apart = [m for m in listed if m.transductive and m.ranked]
        unverified = [m for m in listed if not m.ranked]
        first = (members or apart or unverified)[0] if listed else None
        datasets = _columns(benchmark, first.runs) if first is not None else []
        sections = [
            protocol_section(
                benchmark, protocol, listed, datasets, "" if i == 0 else f"-{protocol}"
            )
            for i, protocol in enumerate(protocols_of(benchmark, listed))
        ]
        for section in sections:
            section.regimes = regime_views(benchmark, section, datasets, profiles)
        view = BenchmarkView(
            benchmark,
            datasets,
            members,
            sections,
            reported.get(name, []),
            {k: r.dataset for k, r in first.runs.items()} if first is not None else {},
        )
        views.append(view)
        for method in listed:
            for key, run in method.runs.items():
                datasets_index.setdefault(run.dataset, []).append((view, method, key))
    return SiteData(benchmarks=views, methods=methods, datasets=datasets_index)


def site_files_dir() -> Path:
    """The folder with ``templates/`` and ``static/`` (packaged as fewtrans_board.site_files)."""
    from importlib import resources

    return Path(str(resources.files("fewtrans_board.site_files")))
