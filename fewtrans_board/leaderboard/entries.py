"""Read stored entries for the index and the site: through the schema, or stop naming them.

``leaderboard rebuild`` and ``site build`` tolerate nothing silently: an entry whose files
are outside the layout, whose metadata does not match the schema, whose runs are damaged or
point at a manifest this store has not frozen, is refused with one
:class:`~fewtrans_board.leaderboard.errors.SubmissionError` that names the entry. What the
site shows of a run's dataset and manifest comes from the frozen manifest, not the run.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from fewtrans_board.errors import describe
from fewtrans_board.leaderboard.columns import check_columns
from fewtrans_board.leaderboard.errors import SubmissionError
from fewtrans_board.leaderboard.meta import SubmissionMeta
from fewtrans_board.leaderboard.runs import load_checked_run
from fewtrans_board.leaderboard.schema import STATUS
from fewtrans_board.leaderboard.shapes import check, load_json
from fewtrans_board.leaderboard.store import LeaderboardStore
from fewtrans_board.results.load import RunResults


@dataclass
class StoredRun:
    """One run of a stored entry, with what its frozen manifest says.

    Attributes:
        run: the loaded, checked run.
        manifest: the frozen manifest's file name.
        dataset: the frozen manifest's dataset.
        manifest_meta: the frozen manifest's metadata (fixes each k-shot episode's K, seed).
    """

    run: RunResults
    manifest: str
    dataset: str
    manifest_meta: dict[str, Any]


@dataclass
class StoredEntry:
    """A stored submission, read through the bundle schema."""

    id: str
    meta: SubmissionMeta
    status: str
    centre_search: dict[str, Any] | None
    runs: list[StoredRun] = field(default_factory=list)


@contextlib.contextmanager
def entry_errors(ident: str) -> Iterator[None]:
    """Name the entry in every refusal; an unanticipated error while using it becomes one.

    Args:
        ident: the stored entry being read, summarised or rendered.

    Raises:
        SubmissionError: the original code with the entry named, or ``unreadable-entry``.
    """
    prefix = f"stored entry {ident}: "
    try:
        yield
    except SubmissionError as exc:
        if exc.message.startswith(prefix):
            raise
        raise SubmissionError(exc.code, prefix + exc.message) from exc
    except Exception as exc:  # a damaged store must not become a traceback
        raise SubmissionError(
            "unreadable-entry", f"stored entry {ident} cannot be read: {describe(exc)}"
        ) from exc


def read_status(store: LeaderboardStore, ident: str) -> str:
    """The checked ``status`` of a stored entry (``validated`` when it has no status.json).

    Raises:
        SubmissionError: ``bad-status``.
    """
    path = store.submissions_dir / ident / "status.json"
    if not path.is_file():
        return "validated"
    record = load_json(path.read_bytes(), "status.json", "bad-status")
    check(record, STATUS, "status.json", "bad-status")
    return str(record["status"])


def read_entry(store: LeaderboardStore, ident: str) -> StoredEntry:
    """Read a stored entry for the index or the site.

    Raises:
        SubmissionError: naming the entry and what is wrong with it.
    """
    with entry_errors(ident):
        contents = store.entry_contents(ident)
        if contents.meta.id != ident:
            raise SubmissionError(
                "bad-store-entry", f"its submission.toml has id {contents.meta.id!r}"
            )
        entry = StoredEntry(ident, contents.meta, read_status(store, ident), contents.centre_search)
        for path in contents.runs:
            where = contents.name(path)
            run = load_checked_run(path, where, intake=False)
            frozen = store.frozen.get(run.meta["manifest"]["sha256"])
            if frozen is None:
                raise SubmissionError(
                    "unknown-manifest",
                    f"{where} was evaluated on manifest sha256 "
                    f"{run.meta['manifest']['sha256'][:16]}..., which this store has not frozen",
                )
            filename, manifest = frozen
            if run.dataset != manifest.dataset:
                raise SubmissionError(
                    "dataset-mismatch",
                    f"{where} names dataset {run.dataset!r}, its frozen manifest "
                    f"{filename} is {manifest.dataset!r}'s",
                )
            check_columns(run, where, manifest.dataset)
            entry.runs.append(StoredRun(run, filename, manifest.dataset, manifest.meta))
        return entry
