"""Derive the leaderboard index from the raw per-episode rows (``leaderboard rebuild``)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from fewtrans_board.leaderboard.entries import StoredEntry, entry_errors, read_entry
from fewtrans_board.leaderboard.errors import SubmissionError
from fewtrans_board.leaderboard.meta import SubmissionMeta, read_meta
from fewtrans_board.leaderboard.store import LeaderboardStore
from fewtrans_board.leaderboard.sub_benchmarks import SUB_BENCHMARKS
from fewtrans_board.results.summary import summarize


@dataclass
class IndexEntry:
    """One stored submission with its loaded runs.

    Attributes:
        id: the submission id.
        meta: its parsed ``submission.toml``.
        status: ``validated`` or ``verified``.
        superseded_by: the id of the submission that supersedes it, if any.
        stored: the entry as read (runs with their frozen manifests, centre search).
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

    def to_dict(self) -> dict[str, Any]:
        """The entry as written to ``index.json``: run summaries by dataset, no local paths."""
        runs = [{k: v for k, v in s.items() if k != "path"} for s in self.summaries]
        first = self.summaries[0] if self.summaries else {}
        return {
            "id": self.id,
            "meta": self.meta.to_dict(),
            "status": self.status,
            "transductive": bool(first.get("transductive")),
            "configuration": first.get("configuration", {}),
            "runs": sorted(runs, key=lambda r: (r["dataset"], r["manifest"])),
            "superseded_by": self.superseded_by,
        }


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


def index_entries(store: LeaderboardStore) -> Iterator[IndexEntry]:
    """Every stored submission, sorted by id, with its runs loaded and summarised.

    Entries are produced one at a time so a caller that keeps only the summaries never
    holds every run in memory at once.

    Raises:
        SubmissionError: a stored entry is unreadable (named; nothing is skipped).
    """
    idents = store.submission_ids()
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
    metas = {}
    for ident in idents:
        with entry_errors(ident):
            metas[ident] = read_meta(
                (store.submissions_dir / ident / "submission.toml").read_bytes()
            )
    superseded = _superseded(metas)
    for ident in idents:
        stored = read_entry(store, ident)
        ddof = SUB_BENCHMARKS[stored.meta.benchmark].statistic_ddof
        entry = IndexEntry(
            ident, stored.meta, stored.status, stored, superseded_by=superseded.get(ident)
        )
        with entry_errors(ident):
            for item in stored.runs:
                summary = summarize(item.run, ddof=ddof, manifest=item.manifest_meta)
                summary.update(dataset=item.dataset, manifest=item.manifest)
                entry.summaries.append(summary)
        yield entry


def build_index(store: LeaderboardStore) -> dict[str, Any]:
    """Summaries of every stored submission, grouped by benchmark; deterministic."""
    submissions = [entry.to_dict() for entry in index_entries(store)]
    return {
        "schema_version": 1,
        "benchmarks": {
            name: sorted(e["id"] for e in submissions if e["meta"]["benchmark"] == name)
            for name in SUB_BENCHMARKS
        },
        "submissions": submissions,
    }
