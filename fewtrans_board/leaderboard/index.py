"""Derive the leaderboard index from the raw per-episode rows (``leaderboard rebuild``)."""

from __future__ import annotations

from typing import Any

from fewtrans_board.leaderboard.benchmarks import BENCHMARKS
from fewtrans_board.leaderboard.meta import parse_meta
from fewtrans_board.leaderboard.store import LeaderboardStore
from fewtrans_board.results.load import find_runs, load_run
from fewtrans_board.results.summary import summarize


def build_index(store: LeaderboardStore) -> dict[str, Any]:
    """Summaries of every stored submission, grouped by benchmark; deterministic."""
    entries = []
    superseded: dict[str, str] = {}
    for ident in store.submission_ids():
        meta = parse_meta(
            (store.submissions_dir / ident / "submission.toml").read_text(encoding="utf-8")
        )
        if meta.supersedes:
            superseded[meta.supersedes] = ident
        ddof = BENCHMARKS[meta.benchmark].statistic_ddof
        runs = []
        for path in find_runs([store.results_dir / ident]):
            summary = summarize(load_run(path), ddof=ddof)
            summary.pop("path", None)
            runs.append(summary)
        status = store.status(ident)
        entries.append(
            {
                "id": ident,
                "meta": meta.to_dict(),
                "status": status.get("status", "validated"),
                "runs": sorted(runs, key=lambda r: r["dataset"]),
            }
        )
    for entry in entries:
        entry["superseded_by"] = superseded.get(entry["id"])
    return {
        "schema_version": 1,
        "benchmarks": {
            name: sorted(e["id"] for e in entries if e["meta"]["benchmark"] == name)
            for name in BENCHMARKS
        },
        "submissions": entries,
    }
