"""Submission bundles: a zip with a fixed layout, read into a typed, checked object.

Reading a bundle (:func:`extract_bundle`) or a store entry (:func:`read_contents`) either
yields :class:`BundleContents` (parsed ``submission.toml``, checked centre-search record,
run folders named as the layout names them) or raises one
:class:`~fewtrans_board.core.errors.SubmissionError` naming the member and the
problem. The layout and the zip checks are :mod:`~fewtrans_board.leaderboard.layout`; the
metadata documents :mod:`~fewtrans_board.results.documents`; nothing is unpickled.
"""

from __future__ import annotations

import hashlib
import json
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fewtrans_board.core.errors import SubmissionError
from fewtrans_board.leaderboard.layout import CENTRE, META, RUN, check_tree, extract_members
from fewtrans_board.leaderboard.meta import SubmissionMeta, read_meta
from fewtrans_board.leaderboard.summary_cache import file_digest
from fewtrans_board.results.documents import CentreSearch
from fewtrans_board.results.strict_json import load_json

PARQUET_MAGIC = b"PAR1"
ENTRY_FILES = frozenset({"submission.toml", "centre-search.json", "status.json"})
"""What a stored submission folder holds (``status.json`` is the store's, never a bundle's)."""


@dataclass
class BundleContents:
    """A bundle or store entry, read and checked (runs are loaded by validation).

    Attributes:
        meta: the parsed ``submission.toml``.
        centre_search: ``centre-search.json``, checked against
            :class:`~fewtrans_board.results.documents.CentreSearch`, or ``None``.
        runs: the run folders on disk.
        names: each run folder's name in the bundle layout (``results/<run>``), for messages.
        files: every file of the bundle or entry by its layout name (``status.json`` of a
            store entry excluded: it is the store's verdict, not submitted data).
        stored: a store entry (its shards are split: their logits are in blobs).
    """

    meta: SubmissionMeta
    centre_search: dict[str, Any] | None
    runs: list[Path]
    names: dict[Path, str] = field(default_factory=dict)
    files: dict[str, Path] = field(default_factory=dict)
    stored: bool = False

    def name(self, run: Path) -> str:
        """How messages name a run folder (``results/<run>``)."""
        return self.names.get(run, f"results/{run.name}")

    def file_hashes(self) -> dict[str, str]:
        """sha256 of every file by layout name (read now: compare two calls to detect change).

        A stored entry's split shard counts as the shard file it was split from (the sha256
        its sealed metadata records), so an entry's digest is its bundle's.
        """
        from fewtrans_board.results.blobs import read_record

        hashes = {}
        for name, path in sorted(self.files.items()):
            if name.endswith("/"):
                continue
            split = self.stored and name.endswith(".parquet")
            source = read_record(path).get("source_sha256") if split else None
            hashes[name] = source if isinstance(source, str) else file_digest(path)
        return hashes

    def digest(self) -> str:
        """One sha256 over every file of the contents: what verification draws its sample after."""
        text = "\n".join(f"{name} {sha}" for name, sha in self.file_hashes().items())
        return hashlib.sha256(text.encode()).hexdigest()


def _is_parquet(path: Path) -> bool:
    size = path.stat().st_size
    if size < 8:
        return False
    with path.open("rb") as handle:
        head = handle.read(4)
        handle.seek(size - 4)
        return head == PARQUET_MAGIC and handle.read(4) == PARQUET_MAGIC


def extract_bundle(bundle: Path, target: Path) -> BundleContents:
    """Check a bundle zip completely, extract it into ``target`` (empty) and read it.

    Raises:
        SubmissionError: an unreadable archive, a path outside the layout or unsafe, a
            damaged member, a size limit, or malformed metadata (see :func:`read_contents`).
    """
    extract_members(bundle, target)
    return read_contents(target)


def read_centre_search(data: bytes, where: str = "centre-search.json") -> dict[str, Any]:
    """Decode and check a centre-search record.

    Raises:
        SubmissionError: ``bad-centre-search``.
    """
    record = load_json(data, where, "bad-centre-search")
    return CentreSearch.from_json(record, where, code="bad-centre-search").to_json()


def _walk(top: Path, prefix: str) -> dict[str, Path]:
    """Every file and folder under ``top`` by its layout name (folders end in ``/``); no links."""
    found: dict[str, Path] = {}
    if not top.is_dir():
        return found
    for path in sorted(top.rglob("*")):
        name = prefix + path.relative_to(top).as_posix()
        if path.is_symlink():
            raise SubmissionError("symlink", f"{name} is a symbolic link")
        if path.is_dir():
            found[name + "/"] = path
        elif path.is_file():
            found[name] = path
        else:
            raise SubmissionError("special-file", f"{name} is not a regular file")
    return found


def _entry_files(folder: Path, results: Path) -> dict[str, Path]:
    """A store entry's files by bundle-layout name: its submission folder, then its results."""
    found = {}
    for path in sorted(folder.iterdir()):
        if path.name not in ENTRY_FILES or path.is_symlink() or not path.is_file():
            raise SubmissionError(
                "outside-layout",
                f"{folder.name}/{path.name} does not belong in a submission folder (only "
                f"{', '.join(sorted(ENTRY_FILES))})",
            )
        if path.name != "status.json":
            found[path.name] = path
    return {**found, **_walk(results, "results/")}


def read_contents(folder: Path, results: Path | None = None) -> BundleContents:
    """Read the parts of an extracted bundle or a store entry through the bundle schema.

    Args:
        folder: holds ``submission.toml`` (and ``centre-search.json`` when present).
        results: the folder of runs; ``folder / "results"`` (the bundle layout) when
            ``None``. A store entry keeps its results apart from its metadata (and its
            ``status.json`` beside its metadata).

    Returns:
        The entry's typed metadata, centre-search record and run folders.

    Raises:
        SubmissionError: a file outside the layout, a link, a fake Parquet file, missing or
            malformed metadata, no results.
    """
    files = _walk(folder, "") if results is None else _entry_files(folder, results)
    kinds = check_tree(list(files))
    for name in kinds:
        if name.endswith(".parquet") and not _is_parquet(files[name]):
            raise SubmissionError("forbidden-file", f"{name} is not a Parquet file")
    meta_names = [n for n, k in kinds.items() if k == META]
    if not meta_names:
        raise SubmissionError("missing-meta", "the bundle has no submission.toml")
    meta = read_meta(files[meta_names[0]].read_bytes())
    centre_names = [n for n, k in kinds.items() if k == CENTRE]
    centre = read_centre_search(files[centre_names[0]].read_bytes()) if centre_names else None
    runs = {files[n].parent: n.rsplit("/", 1)[0] for n, k in sorted(kinds.items()) if k == RUN}
    shard_folders = {n.split("/shards/")[0] for n in kinds if "/shards/" in n}
    orphans = sorted(shard_folders - set(runs.values()))
    if orphans:
        raise SubmissionError("no-results", f"{orphans[0]} has shards but no run.json")
    if not runs:
        raise SubmissionError("no-results", "the bundle has no results/<run>/run.json")
    return BundleContents(meta, centre, list(runs), dict(runs), dict(files), results is not None)


def run_centre_record(runs: list[Path]) -> dict[str, object] | None:
    """The centre-search record embedded in the first run's provenance that has one.

    A run that cannot be read is skipped here: validation reads it next and names the fault.
    """
    from fewtrans_board.results.load import load_run
    from fewtrans_board.results.shards import ResultsError

    for run in runs:
        try:
            record = load_run(run).meta.get("centre_search")
        except ResultsError:
            continue
        if record is not None:
            return dict(record) if isinstance(record, dict) else {"centre_search": record}
    return None


def _folder_name(meta: dict[str, object], used: set[str]) -> str:
    """A bundle folder per run, named after its manifest (several may share a dataset)."""
    manifest = meta.get("manifest")
    stem = Path(str(manifest.get("file", "") if isinstance(manifest, dict) else "")).stem
    base = re.sub(r"[^A-Za-z0-9._-]+", "-", stem)[:90].strip(".-") or "run"
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
