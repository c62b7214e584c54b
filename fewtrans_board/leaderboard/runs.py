"""Load the runs of a bundle or store entry through the schema, naming members in errors.

:func:`load_checked_run` is the only way intake, the index and the site read a submitted
run: ``run.json`` strictly decoded and checked, every shard verified (checksum, Arrow
schema), every shard's provenance checked against the schema and against the others, and
the identity consistent with the provenance. Anything wrong is one
:class:`~fewtrans_board.core.errors.SubmissionError` naming the member.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fewtrans_board.core.canonical import canonical_json
from fewtrans_board.core.errors import SubmissionError, describe, shown
from fewtrans_board.results.blobs import BlobStore
from fewtrans_board.results.documents import SHARED_PROVENANCE, RunProvenance, RunRecord
from fewtrans_board.results.load import RunResults, ShardBlobError, load_run, run_progress
from fewtrans_board.results.shards import CorruptShardError, ResultsError, shard_file_name
from fewtrans_board.results.strict_json import load_json


@dataclass(frozen=True)
class LogitSource:
    """Where a reader takes the logits of a run from.

    Attributes:
        stored: the run is a stored entry's, whose shards keep their logits in blobs
            (a bundle's shards must carry theirs: :data:`BUNDLE`).
        blobs: fetch those blobs from here (each checked against its hash and the shard
            rebuilt against its seal); ``None`` reads the git side only.
    """

    stored: bool = False
    blobs: BlobStore | None = None


BUNDLE = LogitSource()
"""A bundle (or local runs): every shard carries its logits."""
GIT_ONLY = LogitSource(stored=True)
"""A stored entry read from git alone: logit-mean fusions are not rechecked."""


def fetching(blobs: BlobStore) -> LogitSource:
    """A stored entry whose logits are fetched from ``blobs``."""
    return LogitSource(stored=True, blobs=blobs)


MAX_SHARD_ROWS = 10_000_000
MAX_SHARD_DECODED_BYTES = 8 << 30
"""Refused before decoding: a small compressed shard must not expand without bound."""


def _check_footers(path: Path, where: str) -> None:
    """Bound each shard's declared rows and decoded size before reading it."""
    import pyarrow.parquet as pq

    for file in sorted((path / "shards").glob("shard-*.parquet")):
        name = f"{where}/shards/{file.name}"
        try:
            footer = pq.read_metadata(file)
            rows = footer.num_rows
            decoded = sum(footer.row_group(i).total_byte_size for i in range(footer.num_row_groups))
        except Exception as exc:  # the Parquet decoder raises many types on damaged footers
            raise SubmissionError(
                "corrupt-shard", f"{name} is not a readable Parquet file: {describe(exc)}"
            ) from exc
        if rows > MAX_SHARD_ROWS or decoded > MAX_SHARD_DECODED_BYTES:
            raise SubmissionError(
                "too-large",
                f"{name} declares {rows} rows and {decoded} decoded bytes (limits "
                f"{MAX_SHARD_ROWS} and {MAX_SHARD_DECODED_BYTES})",
            )


def _load(path: Path, where: str, logits: LogitSource) -> RunResults:
    try:
        run = load_run(path, logits.blobs)
    except ShardBlobError as exc:
        code = "missing-blob" if exc.blob.missing else "corrupt-blob"
        raise SubmissionError(code, f"{where}/shards/{exc.path.name}: {exc.blob}") from exc
    except CorruptShardError as exc:
        raise SubmissionError(
            "corrupt-shard", f"{where}/shards/{exc.path.name} is corrupt: {exc.reason}"
        ) from exc
    except ResultsError as exc:
        raise SubmissionError("bad-results", str(exc).replace(str(path), where)) from exc
    if run.blobs and not logits.stored:
        name = sorted(run.blobs)[0]
        raise SubmissionError(
            "split-shard",
            f"{where}/shards/{name} carries no logits (they are in blob "
            f"{run.blobs[name]['sha256'][:16]}...); a bundle's shards carry their logits: "
            "pack the run folder 'fewtrans-board evaluate' wrote",
        )
    return run


def load_checked_run(
    path: Path,
    where: str,
    *,
    intake: bool = True,
    consistent: bool = True,
    logits: LogitSource = BUNDLE,
) -> RunResults:
    """Load a run folder of a bundle (or store entry) and check its metadata.

    Args:
        path: the run folder on disk.
        where: its name in the bundle layout (``results/<run>``), used in messages.
        intake: check the provenance a submission needs
            (:class:`~fewtrans_board.results.documents.IntakeProvenance`); ``False`` checks
            what the index and the site read (:class:`~fewtrans_board.results.documents.RunProvenance`).
        consistent: also run :func:`check_consistent` (validation runs it last, so that a
            forged run is refused for what it forged rather than for a side effect).
        logits: where the logits come from (:data:`BUNDLE`: in every shard; a stored
            entry's: in blobs, fetched or not).

    Returns:
        The loaded run; its ``meta`` and every shard's match the schema.

    Raises:
        SubmissionError: ``bad-run-meta``, ``corrupt-shard``, ``bad-results`` or
            ``too-large``, naming the member; ``split-shard`` (a bundle shard without
            its logits), ``missing-blob`` or ``corrupt-blob`` naming the shard, the blob
            and where it was looked for.
    """
    record_name = f"{where}/run.json"
    try:
        data = (path / "run.json").read_bytes()
    except OSError as exc:
        raise SubmissionError("bad-results", f"{record_name} cannot be read ({exc})") from exc
    RunRecord.from_json(load_json(data, record_name, "bad-run-meta"), record_name)
    _check_footers(path, where)
    run = _load(path, where, logits)
    for meta in run.shard_meta:
        RunProvenance.from_json(meta, f"{where}/shards/{_shard_name(meta)} metadata", intake=intake)
    if consistent:
        check_consistent(run, where)
    return run


def unshowable_run(path: Path) -> str | None:
    """Why a local run cannot stand beside complete entries (``site build --results``).

    A table compares runs episode by episode over the whole frozen manifest, so an
    unfinished run (shards missing) or a limited one (``evaluate --limit``) has no place in
    it. Such a run is still read where it has shards, so a damaged shard is named rather
    than hidden behind the reason.

    Args:
        path: the run folder.

    Returns:
        One line naming the run, why it is left out and how to complete it; ``None`` for
        a complete run.

    Raises:
        SubmissionError: ``run.json`` or a shard is damaged (named).
    """
    try:
        progress = run_progress(path)
    except ResultsError as exc:
        raise SubmissionError("bad-results", str(exc)) from exc
    reason = progress.limited() if progress.finished else progress.unfinished()
    if reason is not None and progress.shards_present:
        load_checked_run(path, str(path), intake=False)
    return reason


def _shard_name(meta: dict[str, Any]) -> str:
    shard = meta.get("shard")
    if isinstance(shard, dict) and isinstance(shard.get("index"), int):
        return shard_file_name(shard["index"], shard.get("count", 0))
    return "shard"


def check_consistent(run: RunResults, where: str) -> None:
    """Every shard repeats the run's provenance; identity and provenance agree with run.json.

    Raises:
        SubmissionError: ``bad-run-meta`` naming what disagrees.
    """
    meta = run.meta
    first = {k: canonical_json(meta.get(k)) for k in SHARED_PROVENANCE}
    for other in run.shard_meta[1:]:
        differing = [k for k in SHARED_PROVENANCE if canonical_json(other.get(k)) != first[k]]
        if differing:
            raise SubmissionError(
                "bad-run-meta",
                f"{where}/shards/{_shard_name(other)} records other {', '.join(differing)} than "
                f"{_shard_name(meta)}; every shard of a run must come from the same run",
            )
    record = RunRecord.from_json(json.loads((run.path / "run.json").read_bytes()), "run.json")
    provenance = run.provenance
    identity = provenance.identity
    if canonical_json(identity.to_json()) != canonical_json(record.identity.to_json()):
        raise SubmissionError(
            "bad-run-meta", f"{where}: the shards' identity differs from run.json's"
        )
    pairs: dict[str, tuple[object, object]] = {
        "identity.manifest_sha256 and manifest.sha256": (
            identity.manifest_sha256,
            provenance.manifest.sha256,
        ),
        "identity.model and model.name": (identity.model, provenance.model.name),
        "identity.adapter and adapter.name": (identity.adapter, provenance.adapter.name),
        "identity.hpe and hpe.name": (identity.hpe, provenance.hpe.name),
        "hpe.grid_size and the identity's grid": (provenance.hpe.grid_size, len(identity.grid)),
    }
    for names, (a, b) in pairs.items():
        if a != b:
            raise SubmissionError(
                "bad-run-meta", f"{where}: {names} disagree ({shown(a)} vs {shown(b)})"
            )
