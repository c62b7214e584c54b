"""``leaderboard migrate-blobs``: move the logits of an existing store's entries into blobs.

Each entry is migrated on its own, atomically as far as a reader can see: its results are
split in a staging copy (each blob stored and read back, each run then read back with its
blobs against the seals it was split from) that only then replaces the old folder. An
interrupted migration leaves the old folder or the new one (a leftover is recovered on the
next run); running again migrates what is left and changes nothing else.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass

from fewtrans_board.core.errors import SubmissionError
from fewtrans_board.leaderboard.store import LeaderboardStore
from fewtrans_board.results.blobs import BlobError, SplitReport, read_record, split_results_folder
from fewtrans_board.results.load import find_runs, load_run
from fewtrans_board.results.shards import ResultsError

STAGING = ".migrating-"
OLD = ".migrated-"


@dataclass(frozen=True)
class EntryMigration:
    """What migrating one entry did.

    Attributes:
        id: the entry.
        report: shards split now and before, bytes in git and in blobs.
    """

    id: str
    report: SplitReport

    def line(self) -> str:
        """One line for the terminal."""
        r = self.report
        done = f"{r.shards} shard(s) split" if r.shards else "already split"
        return (
            f"{self.id}: {done}; {r.git_bytes / 1e6:.2f} MB in git, "
            f"{r.blob_bytes / 1e6:.2f} MB in blobs"
        )


def _recover(store: LeaderboardStore, ident: str) -> None:
    """Finish or undo an interrupted swap of ``ident``'s results folder."""
    target = store.results_dir / ident
    old = store.root / f"{OLD}{ident}"
    if old.exists():
        if target.exists():  # the new folder is in place: the old one is leftover
            shutil.rmtree(old)
        else:  # interrupted between the two renames: put the old folder back
            old.rename(target)
    shutil.rmtree(store.root / f"{STAGING}{ident}", ignore_errors=True)


def migrate_entry(store: LeaderboardStore, ident: str) -> EntryMigration:
    """Split every shard of one stored entry into git side and blob (idempotent).

    Raises:
        SubmissionError: ``corrupt-shard``, ``blob-store`` or ``bad-results`` naming the
            entry; the entry is left as it was.
    """
    _recover(store, ident)
    target = store.results_dir / ident
    if not target.is_dir():
        raise SubmissionError("unknown-submission", f"stored entry {ident} has no results folder")
    # Already split: checked below by reading, like any other entry.
    if all(read_record(path).get("sha256") for path in target.rglob("shards/shard-*.parquet")):
        return EntryMigration(ident, split_results_folder(target, store.blobs))
    staging = store.root / f"{STAGING}{ident}"
    shutil.copytree(target, staging)
    try:
        report = split_results_folder(staging, store.blobs)
        for run in find_runs([staging]):
            load_run(run, store.blobs)  # every blob fetched, every shard rebuilt and sealed
    except (BlobError, ResultsError) as exc:
        shutil.rmtree(staging, ignore_errors=True)
        code = "blob-store" if isinstance(exc, BlobError) else "corrupt-shard"
        message = str(exc).replace(str(staging), str(target))
        raise SubmissionError(
            code, f"stored entry {ident} was not migrated (left as it was): {message}"
        ) from exc
    old = store.root / f"{OLD}{ident}"
    target.rename(old)
    staging.rename(target)
    shutil.rmtree(old)
    return EntryMigration(ident, report)


def migrate_store(
    store: LeaderboardStore, progress: Callable[[EntryMigration], None] | None = None
) -> list[EntryMigration]:
    """Migrate every stored entry (see :func:`migrate_entry`), in id order.

    Args:
        store: the store.
        progress: called with each entry's outcome as it is done.

    Raises:
        SubmissionError: the first entry that cannot be migrated (those before it are).
    """
    done = []
    for ident in store.submission_ids():
        outcome = migrate_entry(store, ident)
        done.append(outcome)
        if progress is not None:
            progress(outcome)
    return done
