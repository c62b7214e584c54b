"""The committed demo entries a demo run repeats: their HPE protocol, centre and number.

``fewtrans-board demo`` evaluates (model, adapter) pairs that the committed store already
ranks on the ``demo`` sub-benchmark. Run under another protocol or centre, the demo would
print numbers the board does not show (linear probe 71.14 under fewtrans-paper against the
board's 62.92 under fewtrans-reference). So each pair runs under its stored entry's protocol
and searched centre; a pair with no entry runs under the sub-benchmark's leaderboard
protocol around the adapter's default centre.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fewtrans_board.leaderboard.sub_benchmarks import SUB_BENCHMARKS

DEMO_BENCHMARK = "demo"


@dataclass(frozen=True)
class BoardEntry:
    """How the store ranks one (model, adapter) pair of the demo.

    Attributes:
        id: the entry (``None``: the store has none for the pair).
        hpe: the HPE protocol to run under.
        centre_file: the entry's ``centre-search.json`` (``None``: the default centre).
        headline: the entry's headline ``{mean, ci95, n}`` from ``index.json``, if built.
    """

    id: str | None
    hpe: str
    centre_file: Path | None = None
    headline: dict[str, Any] | None = None


def _headlines(store: Path) -> dict[str, dict[str, Any]]:
    """Each indexed entry's first run's HPE headline (the demo has one manifest)."""
    try:
        index = json.loads((store / "index.json").read_text(encoding="utf-8"))
        return {
            s["id"]: s["runs"][0]["aggregations"]["hpe"]
            for s in index["submissions"]
            if s.get("runs")
        }
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return {}


def board_entries(
    store: Path | None, pairs: list[tuple[str, str]], benchmark: str = DEMO_BENCHMARK
) -> dict[tuple[str, str], BoardEntry]:
    """The entry each ``(model, adapter)`` pair repeats, by pair.

    Args:
        store: the leaderboard folder (``None`` or missing: no entries, defaults only).
        pairs: the demo's runs.
        benchmark: the sub-benchmark.
    """
    from fewtrans_board.core.errors import SubmissionError
    from fewtrans_board.leaderboard.store import LeaderboardStore

    default = SUB_BENCHMARKS[benchmark].leaderboard_protocol
    found: dict[tuple[str, str], BoardEntry] = {}
    if store is not None and (store / "submissions").is_dir():
        board = LeaderboardStore(store)
        headlines = _headlines(store)
        metas = {}
        for ident in board.submission_ids():
            try:
                metas[ident] = board.meta(ident)
            except (SubmissionError, OSError):
                continue
        superseded = {m.supersedes for m in metas.values() if m.supersedes}
        for ident, meta in metas.items():
            pair = (meta.model, meta.adapter)
            if ident in superseded:
                continue
            if meta.benchmark != benchmark or pair not in pairs or pair in found:
                continue
            centre = board.submissions_dir / ident / "centre-search.json"
            found[pair] = BoardEntry(
                ident,
                meta.hpe_protocol,
                centre if centre.is_file() else None,
                headlines.get(ident),
            )
    return {pair: found.get(pair, BoardEntry(None, default)) for pair in pairs}
