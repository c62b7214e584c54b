"""The whole leaderboard as one table: a row per entry x column x aggregation.

``site build`` writes it as ``leaderboard.parquet`` and ``leaderboard.csv`` at the site's
root; :func:`leaderboard_table` computes it from a store without building the site, and
:func:`load_leaderboard` (exported as ``fewtrans_board.load_leaderboard``) reads it from a
store, a built site, either file, or a URL of the Parquet file.

Each row carries its provenance (:data:`COLUMNS`: entry, benchmark, protocol, status and
its re-run's date, mode and sample, manifest, run id, plugin pins, the version that wrote
it). ``mean`` and ``ci95`` are the site's cells:
:func:`~fewtrans_board.stats.intervals.mean_ci` of the run's per-episode accuracy under the
aggregation, with the benchmark's ``ddof``; base-to-novel runs add the
novel and harmonic-mean ones, k-shot (CLIP) runs the average over shots (± over seeds).
Stored entries only: local runs a site shows beside them are not entries.

CSV cells of text that a spreadsheet would run as a formula (beginning with ``=``, ``+``,
``-``, ``@``, a tab or a carriage return) or that begin with ``'`` get a leading ``'``;
:func:`read_csv_table` removes it, so the CSV reads back as the Parquet file.
"""

from __future__ import annotations

import csv
import io
import math
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fewtrans_board.core.errors import FewtransError
from fewtrans_board.leaderboard.sub_benchmarks import SUB_BENCHMARKS, SubBenchmark

if TYPE_CHECKING:
    import pyarrow as pa

    from fewtrans_board.leaderboard.entries import LoadedEntry
    from fewtrans_board.leaderboard.store import LeaderboardStore

PARQUET_NAME = "leaderboard.parquet"
CSV_NAME = "leaderboard.csv"
AGGREGATIONS = ("hpe", "vote", "oracle")
"""The aggregations of the table, as the site's column sets."""


def _typed(kind: str, names: str) -> tuple[tuple[str, str], ...]:
    return tuple((name, kind) for name in names.split())


COLUMNS: tuple[tuple[str, str], ...] = (
    *_typed("string", "entry_id benchmark hpe_protocol status rerun_date rerun_mode"),
    *_typed("int64", "rerun_episodes"),
    *_typed("string", "superseded_by method model adapter"),
    *_typed("string", "column dataset manifest manifest_sha256 aggregation"),
    *_typed("int64", "episodes"),
    *_typed("float64", "mean ci95"),
    *_typed("int64", "ddof n"),
    *_typed("float64", "novel_mean novel_ci95 hm_mean hm_ci95 shot_average shot_average_std"),
    *_typed("string", "plugins run_id fewtrans_board_version"),
)
"""The table's columns and their Arrow types, in order (the float columns after ``ci95``
are empty where a run has no such number). ``status`` is the shared vocabulary
(:mod:`~fewtrans_board.leaderboard.status`: ``re-run``, ``legacy check``, ``not verified``);
``rerun_date``, ``rerun_mode`` and ``rerun_episodes`` (over the entry's datasets) describe a
``re-run`` and are empty otherwise."""

FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "'")


class LeaderboardTableError(FewtransError):
    """A leaderboard table source that is not a store, a site, a table file or its URL."""


def schema() -> pa.Schema:
    """The Arrow schema of :data:`COLUMNS`."""
    import pyarrow as pa

    return pa.schema([(name, pa.type_for_alias(kind)) for name, kind in COLUMNS])


def column_keys(benchmark: SubBenchmark, datasets: dict[str, str]) -> dict[str, str]:
    """The column key of each of a benchmark's manifests.

    A benchmark's columns are its manifests. A column is named after its dataset, or
    ``dataset@variant`` when the benchmark holds several manifests of that dataset
    (BSCD-FSL's 5-, 20- and 50-shot manifests of each dataset), so no run hides another.

    Args:
        benchmark: the sub-benchmark.
        datasets: dataset of each frozen manifest by file name (others are read from
            the ``<variant>--<dataset>.parquet`` naming).

    Returns:
        ``{manifest file name: column key}``.
    """
    stems = {m: m.removesuffix(".parquet") for m in benchmark.manifests}
    of = {m: datasets.get(m) or stem.rsplit("--", 1)[-1] for m, stem in stems.items()}
    counts = Counter(of.values())
    keys = {}
    for manifest, dataset in of.items():
        variant = stems[manifest].removesuffix("--" + dataset)
        keys[manifest] = dataset if counts[dataset] == 1 else f"{dataset}@{variant}"
    return keys


def _number(value: Any) -> float | None:
    return None if value is None else float(value)


def entry_rows(entry: LoadedEntry, datasets: dict[str, str]) -> list[dict[str, Any]]:
    """The table's rows of one loaded entry (its summaries are used, nothing is recomputed).

    Args:
        entry: a stored entry as :func:`~fewtrans_board.leaderboard.entries.load_entries`
            yields it.
        datasets: dataset of each frozen manifest by file name.
    """
    from fewtrans_board.core.version import __version__

    keys = column_keys(SUB_BENCHMARKS[entry.meta.benchmark], datasets)
    pins = ";".join(f"{d}=={v}" for d, v in sorted(entry.meta.plugins.items()))
    standing = entry.standing
    rows = []
    for item, summary in zip(entry.stored.runs, entry.summaries, strict=True):
        record = item.run.provenance
        for aggregation in AGGREGATIONS:
            stats = summary["aggregations"][aggregation]
            novel = summary.get("novel", {}).get(aggregation, {})
            harmonic = summary.get("harmonic_mean", {}).get(aggregation, {})
            shots = summary.get("per_shot", {}).get(aggregation, {})
            rows.append(
                {
                    "entry_id": entry.id,
                    "benchmark": entry.meta.benchmark,
                    "hpe_protocol": entry.meta.hpe_protocol,
                    "status": entry.status,
                    "rerun_date": standing.date or "",
                    "rerun_mode": standing.mode or "",
                    "rerun_episodes": standing.rerun_episodes,
                    "superseded_by": entry.superseded_by or "",
                    "method": entry.meta.method,
                    "model": entry.meta.model,
                    "adapter": entry.meta.adapter,
                    "column": keys.get(item.manifest, item.dataset),
                    "dataset": item.dataset,
                    "manifest": item.manifest,
                    "manifest_sha256": record.manifest.sha256,
                    "aggregation": aggregation,
                    "episodes": int(summary["episodes"]),
                    "mean": float(stats["mean"]),
                    "ci95": float(stats["ci95"]),
                    "ddof": int(stats["ddof"]),
                    "n": int(stats["n"]),
                    "novel_mean": _number(novel.get("mean")),
                    "novel_ci95": _number(novel.get("ci95")),
                    "hm_mean": _number(harmonic.get("mean")),
                    "hm_ci95": _number(harmonic.get("ci95")),
                    "shot_average": _number(shots.get("average")),
                    "shot_average_std": _number(shots.get("average_std")),
                    "plugins": pins,
                    "run_id": record.run_id,
                    "fewtrans_board_version": __version__,
                }
            )
    return rows


def leaderboard_table(
    store: LeaderboardStore,
    entries: Iterable[LoadedEntry] | None = None,
    dataset_of: dict[str, str] | None = None,
) -> pa.Table:
    """The whole leaderboard of a store, one row per entry x column x aggregation.

    Rows are sorted by benchmark, HPE protocol, entry, column and aggregation (``hpe``,
    ``vote``, ``oracle``); every stored entry is listed, superseded ones too (with
    ``superseded_by``) and entries that were only validated (``status``).

    Args:
        store: the leaderboard store.
        entries: the store's entries as already loaded (a site build's); default: load them.
        dataset_of: the dataset of each frozen manifest, by file name (a site build's label
            indexes know them); default: read the manifests.

    Raises:
        SubmissionError: a stored entry is unreadable (named).
    """
    import pyarrow as pa

    from fewtrans_board.leaderboard.entries import load_entries

    if dataset_of is None:
        dataset_of = {name: manifest.dataset for name, manifest in store.frozen.values()}
    rows = [
        row
        for entry in (load_entries(store) if entries is None else entries)
        for row in entry_rows(entry, dataset_of)
    ]
    order = {a: i for i, a in enumerate(AGGREGATIONS)}
    keys = ("benchmark", "hpe_protocol", "entry_id", "column")
    rows.sort(key=lambda r: (*(r[k] for k in keys), order[r["aggregation"]]))
    return pa.Table.from_pylist(rows, schema=schema())


def _csv_text(value: str) -> str:
    return "'" + value if value.startswith(FORMULA_START) else value


def csv_cell(value: Any) -> str:
    """A value as a CSV cell: text guarded against formulas, floats exact, ``None`` empty."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return "" if math.isnan(value) else repr(value)
    if isinstance(value, int):
        return str(value)
    return _csv_text(str(value))


def csv_text(columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """CSV of a header and rows (see :func:`csv_cell`), CRLF line ends (RFC 4180)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow([_csv_text(c) for c in columns])
    for row in rows:
        writer.writerow([csv_cell(v) for v in row])
    return buffer.getvalue()


def write_leaderboard(table: pa.Table, folder: Path) -> list[Path]:
    """Write ``leaderboard.parquet`` and ``leaderboard.csv`` into ``folder``.

    Returns:
        The two paths.
    """
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    parquet, text = folder / PARQUET_NAME, folder / CSV_NAME
    pq.write_table(table, parquet)
    names = table.column_names
    rows = (tuple(row[n] for n in names) for row in table.to_pylist())
    text.write_text(csv_text(names, rows), encoding="utf-8", newline="")
    return [parquet, text]


def read_csv_table(data: bytes) -> pa.Table:
    """A ``leaderboard.csv`` as the table it was written from (:data:`COLUMNS` types).

    Raises:
        LeaderboardTableError: the header is not the table's.
    """
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.csv as pacsv

    target = schema()
    options = pacsv.ConvertOptions(
        column_types=target, strings_can_be_null=False, quoted_strings_can_be_null=False
    )
    try:
        table = pacsv.read_csv(pa.BufferReader(data), convert_options=options)
    except pa.ArrowInvalid as exc:
        raise LeaderboardTableError(f"not a leaderboard CSV: {exc}") from exc
    if table.column_names != target.names:
        raise LeaderboardTableError(
            f"not a leaderboard CSV: its columns are {table.column_names[:5]}..., expected "
            f"{target.names[:5]}..."
        )
    columns = []
    for column in table.columns:
        if pa.types.is_string(column.type):
            guarded = pc.starts_with(column, "'")
            column = pc.if_else(guarded, pc.utf8_slice_codeunits(column, 1), column)
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=target)


def _read_bytes(data: bytes, name: str) -> pa.Table:
    """A table file's bytes: CSV when ``name`` ends in ``.csv``, else Parquet."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if name.lower().endswith(".csv"):
        return read_csv_table(data)
    try:
        table = pq.read_table(pa.BufferReader(data))
    except (pa.ArrowInvalid, OSError) as exc:
        raise LeaderboardTableError(f"{name} is not a Parquet file: {exc}") from exc
    if table.column_names != schema().names:
        raise LeaderboardTableError(
            f"{name} is not a leaderboard table: its columns are {table.column_names[:5]}..."
        )
    return table.cast(schema()) if table.schema != schema() else table


def _read_path(path: Path) -> pa.Table:
    from fewtrans_board.leaderboard.store import LeaderboardStore

    if path.is_dir():
        if (path / PARQUET_NAME).is_file():
            return _read_bytes((path / PARQUET_NAME).read_bytes(), PARQUET_NAME)
        if (path / "submissions").is_dir() or (path / "manifests").is_dir():
            return leaderboard_table(LeaderboardStore(path))
        raise LeaderboardTableError(
            f"{path} is neither a leaderboard store (no submissions/ or manifests/) nor a "
            f"built site (no {PARQUET_NAME})"
        )
    if path.is_file():
        return _read_bytes(path.read_bytes(), path.name)
    raise LeaderboardTableError(f"{path} does not exist")


def load_leaderboard(source: str | Path) -> pa.Table:
    """The whole leaderboard as a pyarrow Table (see ``fewtrans_board.load_leaderboard``).

    Args:
        source: a store folder (computed from its rows), a built site's folder, a
            ``leaderboard.parquet`` or ``leaderboard.csv`` file, a ``file://`` URL of any
            of these, or an ``http(s)://`` URL of the Parquet file (or the CSV, by its
            ``.csv`` ending; a URL ending in ``/`` is a site and gets ``leaderboard.parquet``).

    Raises:
        LeaderboardTableError: the source is none of these, or unreadable.
        SubmissionError: a store with an unreadable entry (named).
    """
    if isinstance(source, Path):
        return _read_path(source)
    text = str(source)
    scheme = urllib.parse.urlsplit(text).scheme.lower()
    if scheme == "file":
        parts = urllib.parse.urlsplit(text)
        if parts.netloc not in ("", "localhost"):
            raise LeaderboardTableError(f"{text}: a file URL on another host")
        return _read_path(Path(urllib.request.url2pathname(parts.path)))
    if scheme in ("http", "https"):
        url = text + PARQUET_NAME if text.endswith("/") else text
        try:
            with urllib.request.urlopen(url, timeout=60) as response:
                data = response.read()
        except OSError as exc:
            raise LeaderboardTableError(f"cannot download {url}: {exc}") from exc
        return _read_bytes(data, urllib.parse.urlsplit(url).path)
    if scheme and len(scheme) > 1:  # C:\... is a Windows path, not a scheme
        raise LeaderboardTableError(f"{text}: only file, http and https URLs are read")
    return _read_path(Path(text))
