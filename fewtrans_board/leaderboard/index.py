"""Derive the leaderboard index from the raw per-episode rows (``leaderboard rebuild``)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from fewtrans_board.leaderboard.benchmarks import BENCHMARKS
from fewtrans_board.leaderboard.meta import SubmissionMeta, parse_meta
from fewtrans_board.leaderboard.store import LeaderboardStore
from fewtrans_board.results.load import RunResults, find_runs, load_run
from fewtrans_board.results.summary import summarize


@dataclass
class IndexEntry:
    """One stored submission with its loaded runs.

    Attributes:
        id: the submission id.
        meta: its parsed ``submission.toml``.
        status: ``validated`` or ``verified``.
        superseded_by: the id of the submission that supersedes it, if any.
        runs: its runs, in the order they are found on disk.
        summaries: :func:`~fewtrans_board.results.summary.summarize` of each run (with the
            benchmark's ``ddof``), aligned with ``runs``.
    """

    id: str
    meta: SubmissionMeta
    status: str
    superseded_by: str | None = None
    runs: list[RunResults] = field(default_factory=list)
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
            "runs": sorted(runs, key=lambda r: r["dataset"]),
            "superseded_by": self.superseded_by,
        }


def index_entries(store: LeaderboardStore) -> Iterator[IndexEntry]:
    """Every stored submission, sorted by id, with its runs loaded and summarised.

    Entries are produced one at a time so a caller that keeps only the summaries never
    holds every run in memory at once.
    """
    metas = {
        ident: parse_meta(
            (store.submissions_dir / ident / "submission.toml").read_text(encoding="utf-8")
        )
        for ident in store.submission_ids()
    }
    superseded = {meta.supersedes: ident for ident, meta in metas.items() if meta.supersedes}
    for ident, meta in metas.items():
        ddof = BENCHMARKS[meta.benchmark].statistic_ddof
        entry = IndexEntry(
            ident,
            meta,
            store.status(ident).get("status", "validated"),
            superseded_by=superseded.get(ident),
        )
        for path in find_runs([store.results_dir / ident]):
            run = load_run(path)
            frozen = store.frozen.get(run.meta["manifest"]["sha256"])
            entry.runs.append(run)
            entry.summaries.append(
                summarize(run, ddof=ddof, manifest=frozen[1].meta if frozen else None)
            )
        yield entry


def build_index(store: LeaderboardStore) -> dict[str, Any]:
    """Summaries of every stored submission, grouped by benchmark; deterministic."""
    submissions = [entry.to_dict() for entry in index_entries(store)]
    return {
        "schema_version": 1,
        "benchmarks": {
            name: sorted(e["id"] for e in submissions if e["meta"]["benchmark"] == name)
            for name in BENCHMARKS
        },
        "submissions": submissions,
    }
