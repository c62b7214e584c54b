"""Every table of the site as CSV and JSON files next to its page.

A table's download is made from the very view objects its HTML is rendered from
(:class:`~fewtrans_board.website.views.TableRow`, ``BaseNovelRow``, ``ShotRow``, the dataset
page's entries, the CLIP settings pairs), so the files hold the numbers the page shows,
unrounded. Files are named ``<page>--<table id>.csv`` / ``.json``, the table id being the
``id`` of the table's section on the page (``benchmark-demo--table-hpe.csv``); the JSON
holds the same columns (``rows``: one object per row) and what the table is (``about``).
CSV text cells are guarded against spreadsheet formulas like ``leaderboard.csv``'s
(:func:`~fewtrans_board.leaderboard.table.csv_cell`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fewtrans_board.core.version import __version__
from fewtrans_board.leaderboard.table import csv_text
from fewtrans_board.stats.bootstrap import BootstrapCI
from fewtrans_board.stats.intervals import MeanCI
from fewtrans_board.website.clip_settings import SettingsComparison
from fewtrans_board.website.reporting import BaseNovelRow
from fewtrans_board.website.views import BenchmarkView, MethodView, TableRow


@dataclass(frozen=True)
class Download:
    """One table of a page, written as ``<stem>.csv`` and ``<stem>.json``.

    Attributes:
        stem: the files' name without suffix: ``<page>--<table id>``.
        title: what the table shows.
        columns: the column names.
        rows: the rows, aligned with ``columns`` (``None``: no value).
        about: what the rows are (benchmark, protocol, aggregation, ddof ...).
    """

    stem: str
    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    about: dict[str, Any] = field(default_factory=dict)

    @property
    def csv_name(self) -> str:
        """The CSV file's name."""
        return f"{self.stem}.csv"

    @property
    def json_name(self) -> str:
        """The JSON file's name."""
        return f"{self.stem}.json"

    def records(self) -> list[dict[str, Any]]:
        """The rows as ``{column: value}`` (NaN as ``None``)."""
        return [{c: _plain(v) for c, v in zip(self.columns, row, strict=True)} for row in self.rows]

    def csv(self) -> str:
        """The CSV text."""
        return csv_text(self.columns, self.rows)

    def json(self) -> str:
        """The JSON text."""
        document = {
            "title": self.title,
            "about": self.about,
            "fewtrans_board_version": __version__,
            "columns": list(self.columns),
            "rows": self.records(),
        }
        return json.dumps(document, indent=1, ensure_ascii=False, allow_nan=False) + "\n"

    def write(self, folder: Path) -> list[Path]:
        """Write both files into ``folder``; returns their paths."""
        csv_path, json_path = folder / self.csv_name, folder / self.json_name
        csv_path.write_text(self.csv(), encoding="utf-8", newline="")
        json_path.write_text(self.json(), encoding="utf-8")
        return [csv_path, json_path]


def _plain(value: Any) -> Any:
    return None if isinstance(value, float) and math.isnan(value) else value


def _table(
    page: str,
    ident: str,
    title: str,
    columns: Sequence[str],
    rows: Iterable[Sequence[Any]],
    **about: Any,
) -> tuple[str, Download]:
    return ident, Download(
        f"{page}--{ident}", title, tuple(columns), tuple(tuple(r) for r in rows), about
    )


def _entry(method: MethodView) -> list[Any]:
    return [method.id, method.label, method.status]


ENTRY = ("entry_id", "method", "status")


def _cells(cells: dict[str, MeanCI], datasets: Sequence[str]) -> list[Any]:
    out: list[Any] = []
    for d in datasets:
        cell = cells.get(d)
        out += [cell.mean, cell.ci95, cell.n] if cell is not None else [None, None, None]
    return out


def _cell_columns(datasets: Sequence[str], prefix: str = "") -> list[str]:
    return [f"{d}.{prefix}{part}" for d in datasets for part in ("mean", "ci95", "n")]


def _boot(stats: BootstrapCI) -> list[float]:
    return [stats.estimate, stats.low, stats.high]


def _verdict(row: TableRow, reference: MethodView | None) -> list[Any]:
    versus = row.versus_reference
    if versus is not None:
        return [versus.verdict, versus.difference, versus.p_holm, versus.cohens_d]
    is_reference = reference is not None and row.method.id == reference.id
    return ["reference" if is_reference else None, None, None, None]


def mean_table_rows(
    rows: Sequence[TableRow],
    datasets: Sequence[str],
    reference: MethodView | None,
    ranked: bool = True,
    compared: bool = True,
) -> tuple[list[str], list[list[Any]]]:
    """Columns and rows of a mean ± CI table (ranked, transductive or unverified)."""
    columns = [
        *(["rank", "rank_low", "rank_high"] if ranked else []),
        *(["tied_with_best"] if compared else []),
        *ENTRY,
        *_cell_columns(datasets),
        *(["average", "average_low", "average_high"] if ranked else []),
        *(["vs_reference", "difference", "p_holm", "cohens_d"] if compared else []),
    ]
    out = [
        [
            *(list(row.rank) if ranked else []),
            *([row.tied_with_best] if compared else []),
            *_entry(row.method),
            *_cells(row.cells, datasets),
            *(_boot(row.average) if ranked else []),
            *(_verdict(row, reference) if compared else []),
        ]
        for row in rows
    ]
    return columns, out


def base_novel_rows(
    rows: Sequence[BaseNovelRow], datasets: Sequence[str]
) -> tuple[list[str], list[list[Any]]]:
    """Columns and rows of a base-to-novel table."""
    columns = ["rank", *ENTRY]
    for d in datasets:
        columns += [f"{d}.{s}.{p}" for s in ("base", "novel", "hm") for p in ("mean", "ci95", "n")]
    for name in ("average_base", "average_novel", "hm_of_averages"):
        columns += [name, f"{name}_low", f"{name}_high"]
    out = []
    for row in rows:
        values: list[Any] = [row.rank, *_entry(row.method)]
        for d in datasets:
            cell = row.cells[d]
            for stats in (cell.base, cell.novel, cell.harmonic):
                values += [stats.mean, stats.ci95, stats.n]
        values += [*_boot(row.base), *_boot(row.novel), *_boot(row.harmonic)]
        out.append(values)
    return columns, out


def _shots(result: Any, shots: Sequence[int]) -> list[Any]:
    values: list[Any] = []
    for k in shots:
        s = result.by_shots.get(k)
        values += [s.mean, s.std] if s is not None else [None, None]
    return [*values, result.average, result.average_std]


def _shot_columns(shots: Sequence[int]) -> list[str]:
    return [f"K={k}.{p}" for k in shots for p in ("mean", "std")] + ["average", "average_std"]


def benchmark_downloads(view: BenchmarkView, shots: Sequence[int]) -> dict[str, Download]:
    """The downloads of a benchmark page, by table id (``table-hpe``, ``per-shot-hpe`` ...).

    Args:
        view: the benchmark page's view.
        shots: the K values its per-shot tables show (the page's ``shot_values``).
    """
    page = f"benchmark-{view.benchmark.name}"
    name = view.benchmark.name
    ddof = view.benchmark.statistic_ddof
    out: dict[str, Download] = {}
    for section in view.sections:
        anchor, protocol = section.anchor, section.protocol
        common: dict[str, Any] = {"benchmark": name, "hpe_protocol": protocol}
        if section.methods and section.shots:
            for agg, shot_rows in section.shots.items():
                columns = ["rank", *ENTRY, *_shot_columns(shots)]
                rows = [[r.rank, *_entry(r.method), *_shots(r.average, shots)] for r in shot_rows]
                about = dict(
                    common, aggregation=agg, statistic="mean over seeds ± their std (ddof 0)"
                )
                title = f"{view.benchmark.title}: per K, averaged over datasets ({agg}, {protocol})"
                key, download = _table(
                    page, f"per-shot-{agg}{anchor}", title, columns, rows, **about
                )
                out[key] = download
            for d in view.datasets:
                hpe = section.shots.get("hpe", [])
                columns = [*ENTRY, *_shot_columns(shots)]
                rows = [[*_entry(r.method), *_shots(r.per_dataset[d], shots)] for r in hpe]
                about = dict(common, aggregation="hpe", column=d, dataset=view.dataset_of.get(d, d))
                title = f"{view.benchmark.title}: {d} per K ({protocol})"
                key, download = _table(page, f"per-shot-{d}{anchor}", title, columns, rows, **about)
                out[key] = download
        elif section.methods:
            for agg, bn_rows in section.base_novel.items():
                columns, rows = base_novel_rows(bn_rows, view.datasets)
                about = dict(common, aggregation=agg, ddof=ddof)
                title = f"{view.benchmark.title}: base, novel and harmonic mean ({agg}, {protocol})"
                key, download = _table(
                    page, f"base-novel-{agg}{anchor}", title, columns, rows, **about
                )
                out[key] = download
            for agg, table_rows in section.tables.items():
                columns, rows = mean_table_rows(table_rows, view.datasets, section.reference)
                reference = section.reference.id if section.reference else None
                about = dict(common, aggregation=agg, ddof=ddof, reference=reference)
                title = f"{view.benchmark.title}: {agg} ({protocol})"
                key, download = _table(page, f"table-{agg}{anchor}", title, columns, rows, **about)
                out[key] = download
        if section.transductive:
            columns, rows = mean_table_rows(
                section.transductive, view.datasets, None, compared=False
            )
            about = dict(common, aggregation="hpe", ddof=ddof)
            title = f"{view.benchmark.title}: transductive methods ({protocol})"
            key, download = _table(
                page, f"table-transductive{anchor}", title, columns, rows, **about
            )
            out[key] = download
        if section.unverified:
            columns, rows = mean_table_rows(
                section.unverified, view.datasets, None, ranked=False, compared=False
            )
            about = dict(common, aggregation="hpe", ddof=ddof)
            title = f"{view.benchmark.title}: not verified ({protocol})"
            key, download = _table(page, f"table-unverified{anchor}", title, columns, rows, **about)
            out[key] = download
    for table in view.reported:
        key, download = _reported(page, table.key, table.data, table.columns)
        out[key] = download
    return out


def _reported(
    page: str, key: str, data: dict[str, Any], table_columns: Sequence[str]
) -> tuple[str, Download]:
    """A paper's transcribed table: each column's mean (or value) and its ± where given."""
    columns = ["row", "method"]
    for c in table_columns:
        columns += [c, f"{c}.ci95"]
    rows = []
    for row in data.get("rows", []):
        values: list[Any] = [row.get("row"), row.get("method")]
        for c in table_columns:
            cell = row.get("cells", {}).get(c)
            if not isinstance(cell, dict):
                values += [None, None]
                continue
            values += [cell.get("mean", cell.get("value")), cell.get("ci95")]
        rows.append(values)
    source = data.get("source", {})
    return _table(
        page,
        f"reported-{key}",
        f"{source.get('short', key)} Table {data.get('table', '')} (reported in the paper)",
        columns,
        rows,
        benchmark=data.get("benchmark"),
        source=source.get("citation"),
        reported=True,
    )


def dataset_download(name: str, entries: Sequence[dict[str, Any]]) -> Download:
    """The dataset page's table.

    Args:
        name: the dataset.
        entries: the page's entries as the build lists them (``stats``, ``novel``,
            ``harmonic`` mean ± CI, or ``per_shot`` for per-shot benchmarks).
    """
    columns = [
        "benchmark",
        "column",
        "hpe_protocol",
        *ENTRY,
        "mean",
        "ci95",
        "n",
        "ddof",
        "novel_mean",
        "novel_ci95",
        "hm_mean",
        "hm_ci95",
        "shot_average",
        "shot_average_std",
    ]
    rows = []
    for e in entries:
        method: MethodView = e["method"]
        shots = e["per_shot"]
        stats = None if shots is not None else e["stats"]
        novel, harmonic = e["novel"], e["harmonic"]
        rows.append(
            [
                e["view"].benchmark.name,
                e["key"],
                method.protocol,
                *_entry(method),
                stats.mean if stats else None,
                stats.ci95 if stats else None,
                stats.n if stats else None,
                stats.ddof if stats else None,
                novel.mean if novel else None,
                novel.ci95 if novel else None,
                harmonic.mean if harmonic else None,
                harmonic.ci95 if harmonic else None,
                shots.average if shots is not None else None,
                shots.average_std if shots is not None else None,
            ]
        )
    _, download = _table(
        f"dataset-{name}",
        "entries",
        f"Entries on {name} (HPE aggregation)",
        columns,
        rows,
        dataset=name,
        aggregation="hpe",
    )
    return download


def settings_downloads(cmp: SettingsComparison) -> dict[str, Download]:
    """The CLIP settings page's tables: measured pairs and the paper's reported ones."""
    page = f"clip-settings-{cmp.inductive.benchmark.name}"
    about = {
        "original": cmp.original.benchmark.name,
        "inductive": cmp.inductive.benchmark.name,
        "datasets": list(cmp.datasets),
        "aggregation": "hpe",
    }
    columns = [
        "method",
        "hpe_protocol",
        "original_entry",
        "original_average",
        "original_std",
        "rank_original",
        "inductive_entry",
        "inductive_model",
        "inductive_average",
        "inductive_std",
        "rank_inductive",
        "gap",
    ]
    rows = [
        [
            p.name,
            p.protocol,
            p.original.method.id,
            p.original.average.average,
            p.original.average.average_std,
            p.rank_original,
            p.inductive.method.id,
            next(iter(p.inductive.method.runs.values())).run.provenance.model.name,
            p.inductive.average.average,
            p.inductive.average.average_std,
            p.rank_inductive,
            p.gap,
        ]
        for p in cmp.pairs
    ]
    out = {}
    if cmp.pairs:  # the page shows the table only then
        key, download = _table(
            page,
            "clip-settings",
            "Both settings, per method (average over shots and datasets ± std over seeds)",
            columns,
            rows,
            **about,
        )
        out[key] = download
    if cmp.reported:
        reported = [[r.method, r.original, r.inductive, r.gap, r.source] for r in cmp.reported]
        key, download = _table(
            page,
            "clip-settings-reported",
            "Both settings as the paper reports them",
            ["method", "original", "inductive", "gap", "source"],
            reported,
            **about,
            reported=True,
        )
        out[key] = download
    return out
