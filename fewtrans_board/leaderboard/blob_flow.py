"""Logits blobs along a submission's path when the store keeps them at a URL.

A blob is accepted only if its bytes hash to the name its sealed shard records and, joined
with that shard, rebuild the shard as validated, so where it comes from does not matter:
the submitter stages their entry's blobs where anyone can read them and names that URL in
``blob-sources/<id>.txt``; the pull-request check fetches the new entries' blobs from there;
after the merge the one job holding write credentials copies them into the store, checking
each again (:func:`copy_entry_blobs`). CONTRIBUTING.md ("Submitting to a store that keeps
its blobs at a URL") gives the commands. A URL read from a pull request is untrusted: only
remote schemes (:data:`STAGING_SCHEMES`) are accepted, read anonymously, so a note cannot
point the check at the runner's own files.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fewtrans_board.core.errors import SubmissionError
from fewtrans_board.leaderboard.store import LeaderboardStore
from fewtrans_board.results.blobs import BlobError, BlobStore, check_split, join_shard
from fewtrans_board.results.shards import CorruptShardError, ResultsError, read_shard

SOURCES_DIR = "blob-sources"
"""``<store>/blob-sources/<id>.txt``: where a new entry's blobs are staged (one URL)."""
STAGING_SCHEMES: dict[str, dict[str, Any]] = {
    "https": {},
    "hf": {},
    "s3": {"anon": True},
    "gs": {"token": "anon"},
    "gcs": {"token": "anon"},
}
"""Schemes a pull request may name for its staged blobs, with the fsspec options that read
them anonymously (the check job holds no credentials; a staging location is public)."""
MAX_NOTE_BYTES = 4096


def source_note(store_root: Path, ident: str) -> Path:
    """The file naming where entry ``ident``'s blobs are staged."""
    return store_root / SOURCES_DIR / f"{ident}.txt"


def staging_store(url: str, where: str = "the staging URL") -> BlobStore:
    """A staging location named by a pull request, read anonymously.

    Raises:
        SubmissionError: ``bad-blob-source`` for a local path, a local or chained fsspec
            URL (``file://``, ``memory://``, ``a::b``) or a scheme not in
            :data:`STAGING_SCHEMES`.
    """
    scheme = url.split("://", 1)[0] if "://" in url else ""
    if scheme not in STAGING_SCHEMES or "::" in url or any(c.isspace() for c in url):
        raise SubmissionError(
            "bad-blob-source",
            f"{where} {url!r} is not a public URL the check can read; stage the blobs at "
            f"{', '.join(s + '://...' for s in STAGING_SCHEMES)}",
        )
    return BlobStore(url.rstrip("/"), STAGING_SCHEMES[scheme])


def read_note(store_root: Path, ident: str) -> str | None:
    """The staging URL recorded for ``ident`` (``None``: no note).

    Raises:
        SubmissionError: ``bad-blob-source``: not one URL of an accepted scheme.
    """
    path = source_note(store_root, ident)
    name = f"{SOURCES_DIR}/{path.name}"
    if path.is_symlink():
        raise SubmissionError("bad-blob-source", f"{name} is a symbolic link")
    if not path.is_file():
        return None
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = ""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    lines = [line for line in lines if not line.startswith("#")]
    if len(data) > MAX_NOTE_BYTES or len(lines) != 1:
        raise SubmissionError(
            "bad-blob-source",
            f"{name} must hold one line: the URL where the entry's blobs are staged",
        )
    staging_store(lines[0], name)
    return lines[0]


def write_note(store_root: Path, ident: str, url: str) -> Path:
    """Record where ``ident``'s blobs are staged (checked like a pull request's note).

    Raises:
        SubmissionError: ``bad-blob-source``.
    """
    staging_store(url)
    path = source_note(store_root, ident)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{url}\n", encoding="utf-8")
    return path


def storing_blobs_at(store: LeaderboardStore, blobs: BlobStore) -> LeaderboardStore:
    """A view of ``store`` whose new blobs go to ``blobs`` (a submitter's staging location)."""
    view = LeaderboardStore(store.root)
    view.__dict__["blobs"] = blobs  # the cached property's slot: git side here, blobs there
    return view


@dataclass(frozen=True)
class SplitShard:
    """A verified split shard of a stored entry.

    Attributes:
        name: its path in the entry's results folder (``<run>/shards/<file>``).
        path: the file.
        table: its rows (git side).
        meta: its metadata.
        record: its logits blob record.
    """

    name: str
    path: Path
    table: Any
    meta: dict[str, Any]
    record: dict[str, Any]

    @property
    def sha256(self) -> str:
        """The blob's name."""
        return str(self.record["sha256"])


def split_shards(store: LeaderboardStore, ident: str) -> Iterator[SplitShard]:
    """Each split shard of a stored entry, its checksum verified (unsplit ones are skipped).

    Raises:
        SubmissionError: ``unknown-submission``; ``corrupt-shard`` naming the shard.
    """
    if ident not in store.submission_ids() or not (store.results_dir / ident).is_dir():
        raise SubmissionError(
            "unknown-submission",
            f"no stored entry {ident!r} in {store.root} (see its submissions/)",
        )
    folder = store.results_dir / ident
    for path in sorted(folder.rglob("shards/shard-*.parquet")):
        name = path.relative_to(folder).as_posix()
        try:
            table, meta = read_shard(path)
            record = check_split(table, meta, path)
        except CorruptShardError as exc:
            raise SubmissionError(
                "corrupt-shard", f"entry {ident}: results/{name} is corrupt: {exc.reason}"
            ) from exc
        except ResultsError as exc:
            raise SubmissionError("corrupt-shard", f"entry {ident}: results/{name}: {exc}") from exc
        if record is not None:
            yield SplitShard(name, path, table, meta, record)


@dataclass(frozen=True)
class CopyReport:
    """What copying one entry's blobs did.

    Attributes:
        id: the entry.
        copied: blobs written to the target.
        present: blobs the target held already (each checked against its hash).
        bytes: bytes written.
    """

    id: str
    copied: int
    present: int
    bytes: int

    def line(self, target: BlobStore) -> str:
        """One line for the terminal."""
        return (
            f"{self.id}: {self.copied} blob(s) copied ({self.bytes / 1e6:.2f} MB), "
            f"{self.present} already at {target.location}"
        )


def _blob_refusal(ident: str, shard: SplitShard, exc: BlobError) -> SubmissionError:
    """One line naming the entry, the shard, the blob and where it was looked for."""
    code = "missing-blob" if exc.missing else "corrupt-blob"
    return SubmissionError(code, f"entry {ident}: results/{shard.name}: {exc}")


def _store_refusal(ident: str, shard: SplitShard, exc: BlobError) -> SubmissionError:
    """The target store could not be read or written: one line, as :func:`_blob_refusal`."""
    return SubmissionError(
        "blob-store",
        f"entry {ident}: results/{shard.name}: logits blob {shard.sha256} {exc.problem} "
        f"(at {exc.where})",
    )


def copy_entry_blobs(
    store: LeaderboardStore, ident: str, source: BlobStore, target: BlobStore
) -> CopyReport:
    """Copy the blobs of a stored entry from ``source`` to ``target``, each checked first.

    A blob is written only if its bytes hash to its recorded name and size and, joined with
    its shard, rebuild the shard as it was validated (its seal); one already at the target
    is checked against its hash and left alone, so copying again changes nothing.

    Raises:
        SubmissionError: ``missing-blob`` or ``corrupt-blob`` (refused by its hash),
            ``seal-mismatch`` (refused by the seal) or ``blob-store`` (the target refused
            the write), each one line naming the entry, the shard, the blob and where;
            blobs copied before it stay (they passed).
    """
    copied = present = written = 0
    for shard in split_shards(store, ident):
        sha, size = shard.sha256, int(shard.record["bytes"])
        try:
            there = target.has(sha)
        except BlobError as exc:
            raise _store_refusal(ident, shard, exc) from exc
        try:
            if there:
                target.get(sha, size)
                present += 1
                continue
            data = source.get(sha, size)
        except BlobError as exc:
            raise _blob_refusal(ident, shard, exc) from exc
        try:
            join_shard(shard.table, shard.meta, shard.record, data, shard.path)
        except (BlobError, CorruptShardError) as exc:
            reason = exc.problem if isinstance(exc, BlobError) else exc.reason
            raise SubmissionError(
                "seal-mismatch",
                f"entry {ident}: results/{shard.name}: logits blob {sha} from "
                f"{source.where(sha)} is refused: {reason}",
            ) from exc
        try:
            target.put(data)
        except BlobError as exc:
            raise _store_refusal(ident, shard, exc) from exc
        copied += 1
        written += len(data)
    return CopyReport(ident, copied, present, written)


def source_of(store: LeaderboardStore, ident: str, override: BlobStore | None) -> BlobStore:
    """Where to fetch ``ident``'s blobs from: ``override``, its staging note, or the store.

    Raises:
        SubmissionError: ``bad-blob-source`` for a malformed note.
    """
    if override is not None:
        return override
    url = read_note(store.root, ident)
    return store.blobs if url is None else staging_store(url)


def note_for_staging(store_root: Path, ident: str, location: str) -> str:
    """After writing ``ident``'s blobs to ``location``: record it, or say how to.

    A URL of an accepted staging scheme is recorded in ``blob-sources/<id>.txt`` at once;
    for a folder (or a URL the check cannot read, e.g. ``file://``), the line says where to
    upload it and how to record and check the public URL.
    """
    scheme = location.split("://", 1)[0] if "://" in location else ""
    if scheme in STAGING_SCHEMES:
        note = write_note(store_root, ident, location)
        return f"recorded {location} in {note}; commit it with the entry"
    note = source_note(store_root, ident)
    return (
        f"blobs of {ident} written to {location}: upload its <aa>/<sha256> files where anyone "
        f"can read them, put that URL in {note} and check it with 'fewtrans-board leaderboard "
        f"check {ident} --blobs-from URL'"
    )
