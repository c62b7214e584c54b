"""Submission bundles: a zip with a fixed layout, read defensively (it is untrusted).

Layout::

    submission.toml
    centre-search.json                  (when the adapter has HPE axes)
    results/<manifest>/run.json          (one folder per frozen manifest evaluated)
    results/<manifest>/shards/shard-*.parquet

Only these file types are accepted, paths are checked for traversal, links and
duplicates, sizes are bounded before anything is extracted, and nothing is unpickled.
"""

from __future__ import annotations

import json
import re
import stat
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO

from fewtrans_board.leaderboard.errors import SubmissionError
from fewtrans_board.results.load import find_runs

MAX_TOTAL_BYTES = 2 << 30
MAX_FILE_BYTES = 512 << 20
MAX_ENTRIES = 5000
ALLOWED_SUFFIXES = {".toml", ".json", ".parquet"}
PARQUET_MAGIC = b"PAR1"


@dataclass
class BundleContents:
    """Where an extracted (or store) submission's parts are."""

    meta_text: str
    centre_search: dict[str, object] | None
    runs: list[Path]


def _check_entry(info: zipfile.ZipInfo, seen: set[str]) -> PurePosixPath:
    name = info.filename
    path = PurePosixPath(name)
    if (
        "\\" in name
        or path.is_absolute()
        or ".." in path.parts
        or name.startswith("/")
        or ":" in path.parts[0]
    ):
        raise SubmissionError(
            "unsafe-path", f"bundle entry {name!r} escapes the bundle (absolute or '..')"
        )
    mode = info.external_attr >> 16
    if stat.S_ISLNK(mode):
        raise SubmissionError("symlink", f"bundle entry {name!r} is a symbolic link")
    if name in seen:
        raise SubmissionError("duplicate-entry", f"bundle entry {name!r} appears twice")
    seen.add(name)
    if not info.is_dir() and path.suffix not in ALLOWED_SUFFIXES:
        raise SubmissionError(
            "forbidden-file",
            f"bundle entry {name!r} is not allowed: only {', '.join(sorted(ALLOWED_SUFFIXES))} "
            "files (no pickles, checkpoints or code)",
        )
    if info.file_size > MAX_FILE_BYTES:
        raise SubmissionError(
            "too-large", f"bundle entry {name!r} is {info.file_size} bytes (limit {MAX_FILE_BYTES})"
        )
    return path


def _bounded_copy(source: IO[bytes], sink: IO[bytes], declared: int) -> int:
    """Copy at most ``declared + 1`` bytes, so a lying header cannot fill the disk."""
    written = 0
    while chunk := source.read(min(1 << 20, declared + 1 - written)):
        sink.write(chunk)
        written += len(chunk)
        if written > declared:
            break
    return written


def _is_parquet(path: Path) -> bool:
    size = path.stat().st_size
    if size < 8:
        return False
    with path.open("rb") as handle:
        head = handle.read(4)
        handle.seek(size - 4)
        return head == PARQUET_MAGIC and handle.read(4) == PARQUET_MAGIC


def extract_bundle(bundle: Path, target: Path) -> BundleContents:
    """Check and extract a bundle into ``target`` (an empty folder).

    Raises:
        SubmissionError: unreadable archive, unsafe or forbidden entries, size limits.
    """
    try:
        archive = zipfile.ZipFile(bundle)
    except (zipfile.BadZipFile, OSError) as exc:
        raise SubmissionError("not-a-zip", f"{bundle} is not a readable zip bundle: {exc}") from exc
    with archive:
        infos = archive.infolist()
        if len(infos) > MAX_ENTRIES:
            raise SubmissionError(
                "too-large", f"bundle has {len(infos)} entries (limit {MAX_ENTRIES})"
            )
        total = sum(i.file_size for i in infos)
        if total > MAX_TOTAL_BYTES:
            raise SubmissionError(
                "too-large", f"bundle unpacks to {total} bytes (limit {MAX_TOTAL_BYTES})"
            )
        seen: set[str] = set()
        for info in infos:
            path = _check_entry(info, seen)
            if info.is_dir():
                continue
            destination = target.joinpath(*path.parts)
            destination.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(info) as source, destination.open("wb") as sink:
                written = _bounded_copy(source, sink, info.file_size)
            if written != info.file_size:
                raise SubmissionError(
                    "too-large", f"bundle entry {info.filename!r} does not match its declared size"
                )
    return read_contents(target)


def read_contents(folder: Path, results: Path | None = None) -> BundleContents:
    """Read the parts of an extracted bundle or a store entry.

    Args:
        folder: holds ``submission.toml`` (and ``centre-search.json`` when present).
        results: the folder of per-dataset runs; ``folder / "results"`` (the bundle
            layout) when ``None``. A store entry keeps its results apart from its metadata.

    Returns:
        The entry's metadata text, centre-search record and run folders.

    Raises:
        SubmissionError: missing metadata, bad json, fake Parquet files, no results.
    """
    meta = folder / "submission.toml"
    if not meta.is_file():
        raise SubmissionError("missing-meta", "the bundle has no submission.toml")
    results = folder / "results" if results is None else results
    # Paths are reported as the bundle layout names them, wherever the results live.
    tops = [(folder, Path())]
    if not results.is_relative_to(folder) and results.is_dir():
        tops.append((results, Path("results")))
    for top, prefix in tops:
        for path in top.rglob("*"):
            name = prefix / path.relative_to(top)
            if path.is_symlink():
                raise SubmissionError("symlink", f"{name} is a symbolic link")
            if path.suffix == ".parquet" and not _is_parquet(path):
                raise SubmissionError("forbidden-file", f"{name} is not a Parquet file")
    centre = None
    centre_path = folder / "centre-search.json"
    if centre_path.is_file():
        try:
            centre = json.loads(centre_path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise SubmissionError(
                "bad-centre-search", f"centre-search.json is not valid JSON: {exc}"
            ) from exc
    try:
        runs = find_runs([results]) if results.is_dir() else []
    except Exception as exc:
        raise SubmissionError("no-results", f"cannot read the bundle's results: {exc}") from exc
    if not runs:
        raise SubmissionError("no-results", "the bundle has no results/<dataset>/run.json")
    return BundleContents(meta.read_text(encoding="utf-8"), centre, runs)


def run_centre_record(runs: list[Path]) -> dict[str, object] | None:
    """The centre-search record embedded in the first run's provenance that has one."""
    from fewtrans_board.results.load import load_run

    for run in runs:
        record = load_run(run).meta.get("centre_search")
        if record is not None:
            return dict(record)
    return None


def _folder_name(meta: dict[str, object], used: set[str]) -> str:
    """A bundle folder per run, named after its manifest (several may share a dataset)."""
    manifest = meta.get("manifest")
    stem = Path(str(manifest.get("file", "") if isinstance(manifest, dict) else "")).stem
    base = re.sub(r"[^A-Za-z0-9._-]+", "-", stem).strip(".-") or "run"
    name, n = base, 1
    while name in used:
        n += 1
        name = f"{base}-{n}"
    used.add(name)
    return name


def pack_bundle(runs: list[Path], meta: Path, out: Path, centre: Path | None = None) -> Path:
    """Write a bundle zip from run folders, a ``submission.toml`` and an optional centre file.

    The centre-search record embedded in the runs' provenance is used when ``centre`` is
    not given.
    """
    from fewtrans_board.results.load import load_run

    record = json.loads(centre.read_text()) if centre is not None else run_centre_record(runs)
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.write(meta, "submission.toml")
        used: set[str] = set()
        for run in runs:
            folder = _folder_name(load_run(run).meta, used)
            archive.write(run / "run.json", f"results/{folder}/run.json")
            for shard in sorted((run / "shards").glob("shard-*.parquet")):
                archive.write(shard, f"results/{folder}/shards/{shard.name}")
        if record is not None:
            archive.writestr(
                "centre-search.json", json.dumps(record, indent=2, sort_keys=True) + "\n"
            )
    return out
