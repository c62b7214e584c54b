"""Every table of the site as CSV and JSON files next to its page.

README.md ("Downloads, the Python API and badges") describes the files: made from the view
objects the HTML is rendered from (so they hold the page's numbers unrounded), named
``<page>--<table id>.csv`` / ``.json``, CSV text cells guarded against spreadsheet formulas
(:func:`~fewtrans_board.leaderboard.table.csv_cell`). The JSON holds the same columns
(``rows``: one object per row) and what the table is (``about``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from fewtrans_board.core.version import __version__
from fewtrans_board.leaderboard.table import csv_text
from fewtrans_board.stats.bootstrap import BootstrapCI
from fewtrans_board.stats.intervals import MeanCI
from fewtrans_board.website.model import (
    BaseNovelRow,
    BenchmarkView,
    Download,
    MethodView,
    TableRow,
)
from fewtrans_board.website.settings_model import SettingsComparison


def json_value(value: Any) -> Any:
    """``value``, or ``None`` for a NaN or an infinity: JSON has neither (``null``: no value)."""
    return None if isinstance(value, float) and not math.isfinite(value) else value


def download_json(download: Download) -> str:
    """The JSON text of a table: ``rows`` as ``{column: value}``, non-finite numbers ``null``."""
    rows = [
        {c: json_value(v) for c, v in zip(download.columns, row, strict=True)}
        for row in download.rows
    ]
    document = {
        "title": download.title,
        "about": download.about,
        "fewtrans_board_version": __version__,
        "columns": list(download.columns),
        "rows": rows,
    }
    return json.dumps(document, indent=1, ensure_ascii=False, allow_nan=False) + "\n"


def write_download(download: Download, folder: Path) -> list[Path]:
    """Write a table's CSV and JSON files into ``folder``; returns their paths."""
    csv_path, json_path = folder / download.csv_name, folder / download.json_name
    csv_path.write_text(csv_text(download.columns, download.rows), encoding="utf-8", newline="")
    json_path.write_text(download_json(download), encoding="utf-8")
    return [csv_path, json_path]


class Tables(dict[str, Download]):
    """A page's downloads by table id, each file named ``<page>--<table id>``."""

    def __init__(self, page: str) -> None:
        super().__init__()
        self.page = page

    def add(
        self,
        ident: str,
        title: str,
        columns: Sequence[str],
        rows: Iterable[Sequence[Any]],
        **about: Any,
    ) -> None:
        """Add the table ``ident``: what it shows, its columns, rows and what they are."""
        rows_ = tuple(tuple(r) for r in rows)
        self[ident] = Download(f"{self.page}--{ident}", title, tuple(columns), rows_, about)


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
    out = Tables(f"benchmark-{view.benchmark.name}")
    title, ddof = view.benchmark.title, view.benchmark.statistic_ddof
    for section in view.sections:
        anchor, protocol = section.anchor, section.protocol
        common: dict[str, Any] = {"benchmark": view.benchmark.name, "hpe_protocol": protocol}
        if section.methods and section.shots:
            spread = "mean over seeds ± their std (ddof 0)"
            for agg, shot_rows in section.shots.items():
                columns = ["rank", *ENTRY, *_shot_columns(shots)]
                rows = [[r.rank, *_entry(r.method), *_shots(r.average, shots)] for r in shot_rows]
                what = f"{title}: per K, averaged over datasets ({agg}, {protocol})"
                about = dict(common, aggregation=agg, statistic=spread)
                out.add(f"per-shot-{agg}{anchor}", what, columns, rows, **about)
            for d in view.datasets:
                hpe = section.shots.get("hpe", [])
                rows = [[*_entry(r.method), *_shots(r.per_dataset[d], shots)] for r in hpe]
                about = dict(common, aggregation="hpe", column=d, dataset=view.dataset_of.get(d, d))
                what = f"{title}: {d} per K ({protocol})"
                out.add(
                    f"per-shot-{d}{anchor}", what, [*ENTRY, *_shot_columns(shots)], rows, **about
                )
        elif section.methods:
            for agg, bn_rows in section.base_novel.items():
                columns, rows = base_novel_rows(bn_rows, view.datasets)
                what = f"{title}: base, novel and harmonic mean ({agg}, {protocol})"
                out.add(
                    f"base-novel-{agg}{anchor}",
                    what,
                    columns,
                    rows,
                    **common,
                    aggregation=agg,
                    ddof=ddof,
                )
            reference = section.reference.id if section.reference else None
            for agg, table_rows in section.tables.items():
                columns, rows = mean_table_rows(table_rows, view.datasets, section.reference)
                about = dict(common, aggregation=agg, ddof=ddof, reference=reference)
                out.add(
                    f"table-{agg}{anchor}", f"{title}: {agg} ({protocol})", columns, rows, **about
                )
        headline = dict(common, aggregation="hpe", ddof=ddof)
        if section.transductive:
            columns, rows = mean_table_rows(
                section.transductive, view.datasets, None, compared=False
            )
            what = f"{title}: transductive methods ({protocol})"
            out.add(f"table-transductive{anchor}", what, columns, rows, **headline)
        if section.unverified:
            columns, rows = mean_table_rows(
                section.unverified, view.datasets, None, ranked=False, compared=False
            )
            what = f"{title}: not verified ({protocol})"
            out.add(f"table-unverified{anchor}", what, columns, rows, **headline)
    for table in view.reported:
        _reported(out, table.key, table.data, table.columns)
    return out


def _reported(out: Tables, key: str, data: dict[str, Any], table_columns: Sequence[str]) -> None:
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
    out.add(
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
        *("benchmark", "column", "hpe_protocol", *ENTRY),
        *("mean", "ci95", "n", "ddof", "novel_mean", "novel_ci95", "hm_mean", "hm_ci95"),
        *("shot_average", "shot_average_std"),
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
                *((stats.mean, stats.ci95, stats.n, stats.ddof) if stats else (None,) * 4),
                *((novel.mean, novel.ci95) if novel else (None, None)),
                *((harmonic.mean, harmonic.ci95) if harmonic else (None, None)),
                *((shots.average, shots.average_std) if shots is not None else (None, None)),
            ]
        )
    out = Tables(f"dataset-{name}")
    out.add(
        "entries",
        f"Entries on {name} (HPE aggregation)",
        columns,
        rows,
        dataset=name,
        aggregation="hpe",
    )
    return out["entries"]


def settings_downloads(cmp: SettingsComparison) -> dict[str, Download]:
    """The CLIP settings page's tables: measured pairs and the paper's reported ones."""
    out = Tables(f"clip-settings-{cmp.inductive.benchmark.name}")
    about = {
        "original": cmp.original.benchmark.name,
        "inductive": cmp.inductive.benchmark.name,
        "datasets": list(cmp.datasets),
        "aggregation": "hpe",
    }
    columns = [
        *("method", "hpe_protocol"),
        *("original_entry", "original_average", "original_std", "rank_original"),
        *("inductive_entry", "inductive_model", "inductive_average", "inductive_std"),
        *("rank_inductive", "gap"),
    ]
    rows = [
        [
            *(p.name, p.protocol),
            *(p.original.method.id, p.original.average.average, p.original.average.average_std),
            p.rank_original,
            p.inductive.method.id,
            next(iter(p.inductive.method.runs.values())).run.provenance.model.name,
            *(p.inductive.average.average, p.inductive.average.average_std, p.rank_inductive),
            p.gap,
        ]
        for p in cmp.pairs
    ]
    if cmp.pairs:  # the page shows the table only then
        what = "Both settings, per method (average over shots and datasets ± std over seeds)"
        out.add("clip-settings", what, columns, rows, **about)
    if cmp.reported:
        reported = [[r.method, r.original, r.inductive, r.gap, r.source] for r in cmp.reported]
        what = "Both settings as the paper reports them"
        columns = ["method", "original", "inductive", "gap", "source"]
        out.add("clip-settings-reported", what, columns, reported, **about, reported=True)
    return out
