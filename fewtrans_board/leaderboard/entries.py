"""Read stored entries for the index and the site: through the schema, or stop naming them.

:func:`load_entries` is the one place a build reads the store: it loads each run once and
summarises it once, and the index (:mod:`~fewtrans_board.leaderboard.index`) and the site
data are both views of the :class:`LoadedEntry` objects it yields.

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

from fewtrans_board.core.errors import describe
from fewtrans_board.leaderboard.columns import check_columns
from fewtrans_board.leaderboard.errors import SubmissionError
from fewtrans_board.leaderboard.meta import SubmissionMeta, read_meta
from fewtrans_board.leaderboard.rows import check_rows
from fewtrans_board.leaderboard.runs import GIT_ONLY, fetching, load_checked_run
from fewtrans_board.leaderboard.shapes import load_json
from fewtrans_board.leaderboard.store import LeaderboardStore
from fewtrans_board.leaderboard.sub_benchmarks import SUB_BENCHMARKS
from fewtrans_board.results.load import RunResults
from fewtrans_board.results.provenance import EntryStatus
from fewtrans_board.results.summary import summarize


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
    verification: dict[str, Any] | None = None


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


def read_status_record(store: LeaderboardStore, ident: str) -> dict[str, Any]:
    """The checked ``status.json`` of a stored entry (``validated`` when it has none).

    Raises:
        SubmissionError: ``bad-status``.
    """
    path = store.submissions_dir / ident / "status.json"
    if not path.is_file():
        return {"status": "validated"}
    record = load_json(path.read_bytes(), "status.json", "bad-status")
    return EntryStatus.from_json(record, "status.json", code="bad-status").to_json()


def read_status(store: LeaderboardStore, ident: str) -> str:
    """The checked ``status`` of a stored entry (``validated`` when it has no status.json).

    Raises:
        SubmissionError: ``bad-status``.
    """
    return str(read_status_record(store, ident)["status"])


def read_entry(store: LeaderboardStore, ident: str, with_logits: bool = False) -> StoredEntry:
    """Read a stored entry for the index or the site.

    Args:
        store: the store.
        ident: the entry's id.
        with_logits: also fetch the entry's logits blobs (checked against their hashes) and
            recheck its logit-mean fusions; without, the runs' ``logits`` column is null and
            everything else is checked.

    Raises:
        SubmissionError: naming the entry and what is wrong with it.
    """
    with entry_errors(ident):
        contents = store.entry_contents(ident)
        if contents.meta.id != ident:
            raise SubmissionError(
                "bad-store-entry", f"its submission.toml has id {contents.meta.id!r}"
            )
        record = read_status_record(store, ident)
        entry = StoredEntry(
            ident,
            contents.meta,
            str(record["status"]),
            contents.centre_search,
            verification=record.get("verification"),
        )
        for path in contents.runs:
            where = contents.name(path)
            run = load_checked_run(
                path, where, intake=False, logits=fetching(store.blobs) if with_logits else GIT_ONLY
            )
            frozen = store.frozen.get(run.provenance.manifest.sha256)
            if frozen is None:
                raise SubmissionError(
                    "unknown-manifest",
                    f"{where} was evaluated on manifest sha256 "
                    f"{run.provenance.manifest.sha256[:16]}..., which this store has not frozen",
                )
            filename, manifest = frozen
            if run.dataset != manifest.dataset:
                raise SubmissionError(
                    "dataset-mismatch",
                    f"{where} names dataset {run.dataset!r}, its frozen manifest "
                    f"{filename} is {manifest.dataset!r}'s",
                )
            check_columns(run, where, manifest.dataset)
            # Every reader recomputes what it shows: accuracies and ensembles from the
            # stored predictions (and, with the blobs, logits) against the frozen labels.
            check_rows(run, manifest, list(run.provenance.identity.grid))
            entry.runs.append(StoredRun(run, filename, manifest.dataset, manifest.meta))
        return entry


@dataclass
class LoadedEntry:
    """A stored submission with its runs loaded and summarised, once per build.

    Attributes:
        id: the submission id.
        meta: its parsed ``submission.toml``.
        status: ``validated`` or ``verified``.
        stored: the entry as read (runs with their frozen manifests, centre search).
        superseded_by: the id of the submission that supersedes it, if any.
        verification: the stored verification report (``None``: not verified).
        summaries: :func:`~fewtrans_board.results.summary.summarize` of each run (with the
            benchmark's ``ddof``; dataset and manifest from the frozen manifest), aligned
            with ``stored.runs``.
    """

    id: str
    meta: SubmissionMeta
    status: str
    stored: StoredEntry
    superseded_by: str | None = None
    summaries: list[dict[str, Any]] = field(default_factory=list)

    @property
    def verification(self) -> dict[str, Any] | None:
        """The stored verification report (``None``: not verified)."""
        return self.stored.verification if self.status == "verified" else None


def _superseded(metas: dict[str, SubmissionMeta]) -> dict[str, str]:
    """``{superseded id: superseding id}``; each entry superseded once, by a stored entry, no cycle.

    Raises:
        SubmissionError: ``bad-store-entry`` naming the entries.
    """
    superseded: dict[str, str] = {}
    for ident, meta in metas.items():
        old = meta.supersedes
        if not old:
            continue
        if old not in metas:
            raise SubmissionError(
                "bad-store-entry", f"stored entry {ident} supersedes {old!r}, which is not stored"
            )
        if old in superseded:
            raise SubmissionError(
                "bad-store-entry", f"{old} is superseded by both {superseded[old]} and {ident}"
            )
        superseded[old] = ident
    for start in superseded:
        seen, current = {start}, start
        while current in superseded:
            current = superseded[current]
            if current in seen:
                raise SubmissionError(
                    "bad-store-entry", f"stored entries supersede each other in a cycle ({start})"
                )
            seen.add(current)
    return superseded


def _check_no_foreign_folders(store: LeaderboardStore, idents: list[str]) -> None:
    """Refuse a folder under ``submissions/`` that is not a stored entry (it would be ignored)."""
    foreign = sorted(
        p.name
        for p in (store.submissions_dir.iterdir() if store.submissions_dir.is_dir() else [])
        if not p.name.startswith(".") and p.name not in idents
    )
    if foreign:
        raise SubmissionError(
            "bad-store-entry",
            f"{store.submissions_dir.name}/{foreign[0]} is not a stored entry (no "
            "submission.toml); remove it",
        )


def load_entries(store: LeaderboardStore, with_logits: bool = False) -> Iterator[LoadedEntry]:
    """Every stored submission, sorted by id, each run loaded once and summarised once.

    Entries are produced one at a time so a caller that keeps only the summaries never
    holds every run in memory at once; a caller that needs them twice keeps the list.
    ``with_logits`` fetches each entry's logits blobs and rechecks its logit-mean fusions
    (see :func:`read_entry`); the summaries are the same either way.

    Raises:
        SubmissionError: a stored entry is unreadable (named; nothing is skipped).
    """
    idents = store.submission_ids()
    _check_no_foreign_folders(store, idents)
    metas = {}
    for ident in idents:
        with entry_errors(ident):
            metas[ident] = read_meta(
                (store.submissions_dir / ident / "submission.toml").read_bytes()
            )
    superseded = _superseded(metas)
    for ident in idents:
        stored = read_entry(store, ident, with_logits)
        ddof = SUB_BENCHMARKS[stored.meta.benchmark].statistic_ddof
        entry = LoadedEntry(
            ident, stored.meta, stored.status, stored, superseded_by=superseded.get(ident)
        )
        with entry_errors(ident):
            for item in stored.runs:
                summary = summarize(item.run, ddof=ddof, manifest=item.manifest_meta)
                summary.update(dataset=item.dataset, manifest=item.manifest)
                entry.summaries.append(summary)
        yield entry
