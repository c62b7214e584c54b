"""Derive the leaderboard index from the raw per-episode rows (``leaderboard rebuild``).

The index is a view of the entries :func:`~fewtrans_board.leaderboard.entries.load_entries`
loads and summarises; it reads nothing itself.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from fewtrans_board.leaderboard.entries import LoadedEntry, load_entries
from fewtrans_board.leaderboard.store import LeaderboardStore
from fewtrans_board.leaderboard.sub_benchmarks import SUB_BENCHMARKS
from fewtrans_board.leaderboard.summary_cache import SummaryCache

VERIFIED_FIELDS = (
    *("dataset", "mode", "rerun_episodes", "episodes", "catch_probability", "claimed"),
    *("claimed_on_rerun_episodes", "rerun_accuracy", "difference_bound"),
)
"""What the index repeats of each dataset's verification (the full report is in status.json)."""


def verification_summary(entry: LoadedEntry) -> dict[str, Any] | None:
    """The re-run's headline numbers per dataset, or ``None`` (not verified, or an older report)."""
    report = entry.verification
    if not report or not isinstance(report.get("datasets"), list):
        return None
    return {
        "seed_source": report.get("seed_source"),
        "isolation": report.get("isolation"),
        "datasets": [
            {k: d.get(k) for k in VERIFIED_FIELDS}
            for d in report["datasets"]
            if isinstance(d, dict)
        ],
    }


def index_record(entry: LoadedEntry) -> dict[str, Any]:
    """An entry as written to ``index.json``: run summaries by dataset, no local paths.

    ``status`` is the shared vocabulary (:mod:`~fewtrans_board.leaderboard.status`);
    ``status_detail`` adds a re-run's date, sample and mode.
    """
    runs = [{k: v for k, v in s.items() if k != "path"} for s in entry.summaries]
    first = entry.summaries[0] if entry.summaries else {}
    return {
        "id": entry.id,
        "meta": entry.meta.to_dict(),
        "status": entry.status,
        "status_detail": entry.standing.to_dict(),
        "verification": verification_summary(entry),
        "transductive": bool(first.get("transductive")),
        "configuration": first.get("configuration", {}),
        "runs": sorted(runs, key=lambda r: (r["dataset"], r["manifest"])),
        "superseded_by": entry.superseded_by,
    }


def build_index(
    store: LeaderboardStore,
    entries: Iterable[LoadedEntry] | None = None,
    with_logits: bool = False,
    cache: SummaryCache | None = None,
) -> dict[str, Any]:
    """Summaries of every stored submission, grouped by benchmark; deterministic.

    Args:
        store: the leaderboard store.
        entries: the store's entries as already loaded by
            :func:`~fewtrans_board.leaderboard.entries.load_entries` (a build that also
            renders the site passes them, so no run is read twice); default: load them.
        with_logits: when loading them, fetch their logits blobs and recheck the logit-mean
            fusions (the index is the same either way).
        cache: when loading them, the build cache of entry summaries (see
            :func:`~fewtrans_board.leaderboard.entries.load_entries`; default none).

    Raises:
        SubmissionError: a stored entry is unreadable (named; nothing is skipped).
    """
    loaded = load_entries(store, with_logits, cache) if entries is None else entries
    submissions = [index_record(entry) for entry in loaded]
    return {
        "schema_version": 1,
        "benchmarks": {
            name: sorted(e["id"] for e in submissions if e["meta"]["benchmark"] == name)
            for name in SUB_BENCHMARKS
        },
        "submissions": submissions,
    }


INDEX_REL_TOL = 1e-9
"""Relative difference below which two index numbers are the same number.

The index is derived from stored rows with float sums whose last bits follow the CPU's
summation order (AMD and Intel differ around the 16th digit); any real change to a stored
row moves an accuracy or CI far more than this.
"""


def index_difference(committed: Any, rebuilt: Any, path: str = "index") -> str | None:
    """Where a committed index differs from a rebuilt one, or ``None`` if they agree.

    Numbers agree within :data:`INDEX_REL_TOL`; everything else must be equal.

    Args:
        committed: the decoded committed ``index.json``.
        rebuilt: the decoded index built from the store now.
        path: the key path of these values, for the message.

    Returns:
        ``"<path>: <committed> != <rebuilt>"`` for the first difference, or ``None``.
    """
    if isinstance(committed, dict) and isinstance(rebuilt, dict):
        if committed.keys() != rebuilt.keys():
            keys = sorted(committed.keys() ^ rebuilt.keys())
            return f"{path}: keys differ ({', '.join(map(str, keys))})"
        for key in committed:
            found = index_difference(committed[key], rebuilt[key], f"{path}.{key}")
            if found:
                return found
        return None
    if isinstance(committed, list) and isinstance(rebuilt, list):
        if len(committed) != len(rebuilt):
            return f"{path}: {len(committed)} items != {len(rebuilt)}"
        for i, (a, b) in enumerate(zip(committed, rebuilt, strict=True)):
            found = index_difference(a, b, f"{path}[{i}]")
            if found:
                return found
        return None
    if _is_number(committed) and _is_number(rebuilt):
        if math.isclose(committed, rebuilt, rel_tol=INDEX_REL_TOL, abs_tol=1e-12):
            return None
    elif committed == rebuilt and type(committed) is type(rebuilt):
        return None
    return f"{path}: {committed!r} != {rebuilt!r}"


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
