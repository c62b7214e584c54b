"""What a site build reads and computes per stored run, and what loading once saves.

Run: python benchmarks/site_build.py [LEADERBOARD]   (default: the repository's leaderboard/)

Prints, for one ``build_site`` over the store: ``load_run``, ``summarize`` and full-column
conversions per run folder (each should be 1, 1 and the handful of columns the views
read), and the build's wall time (best of three). Then two ratios measured in this run:

- column conversion: ``np.asarray(column.to_pylist())`` (the previous conversion) against
  :func:`~fewtrans_board.results.load.column_array` over every scalar column of every run;
- the sensitivity analysis summarising each run again (what the site did before it reused
  the summaries of the load) against reusing them.
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import fewtrans_board.results.load as results_load
import fewtrans_board.results.summary as results_summary
from fewtrans_board.analysis.sensitivity import sensitivity_report
from fewtrans_board.leaderboard.entries import load_entries
from fewtrans_board.leaderboard.store import LeaderboardStore
from fewtrans_board.website.build import build_site

ROOT = Path(__file__).resolve().parents[1]


def counting(module: Any, name: str, counts: Counter[str]) -> Callable[[], None]:
    """Count calls of ``module.name`` by run folder in every module that imported it."""
    original = getattr(module, name)

    def wrapper(first: Any, *args: Any, **kwargs: Any) -> Any:
        counts[str(getattr(first, "path", first))] += 1
        return original(first, *args, **kwargs)

    patched = [
        m
        for m in list(sys.modules.values())
        if getattr(m, "__name__", "").startswith("fewtrans_board")
        and getattr(m, name, None) is original
    ]
    for m in patched:
        setattr(m, name, wrapper)

    def restore() -> None:
        for m in patched:
            setattr(m, name, original)

    return restore


def best_of(repeats: int, work: Callable[[], object]) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        work()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    store_root = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "leaderboard"
    loads: Counter[str] = Counter()
    summaries: Counter[str] = Counter()
    conversions: Counter[str] = Counter()
    original_column = results_load.RunResults.column

    def counted_column(self: results_load.RunResults, name: str) -> np.ndarray:
        if name not in self._columns:
            conversions[str(self.path)] += 1
        return original_column(self, name)

    restore = [
        counting(results_load, "load_run", loads),
        counting(results_summary, "summarize", summaries),
    ]
    results_load.RunResults.column = counted_column  # type: ignore[method-assign]
    with tempfile.TemporaryDirectory() as tmp:
        build_site(store_root, Path(tmp) / "site")
        results_load.RunResults.column = original_column  # type: ignore[method-assign]
        for undo in restore:
            undo()
        seconds = best_of(3, lambda: build_site(store_root, Path(tmp) / "site"))
    runs = sorted(loads)
    print(f"store: {store_root} ({len(runs)} runs)")
    print(
        f"one site build: load_run {sum(loads.values())}, summarize {sum(summaries.values())}, "
        f"column conversions {sum(conversions.values())}"
    )
    print(
        f"per run: load_run {sorted(set(loads.values()))}, summarize "
        f"{sorted(set(summaries.values()))}, column conversions {sorted(set(conversions.values()))}"
    )
    print(f"site build wall time: {seconds:.2f} s (best of 3)")

    entries = list(load_entries(LeaderboardStore(store_root)))
    # Entries hold run digests; the column and sensitivity measures need the runs' rows.
    loaded = [
        (results_load.load_run(item.run.path), s)
        for e in entries
        for item, s in zip(e.stored.runs, e.summaries, strict=True)
    ]
    columns = [
        run.table.column(field.name)
        for run, _ in loaded
        for field in run.table.schema
        if not str(field.type).startswith(("list", "large_list"))
    ]
    as_list = best_of(3, lambda: [np.asarray(c.to_pylist()) for c in columns])
    as_arrow = best_of(3, lambda: [results_load.column_array(c) for c in columns])
    rows = sum(len(c) for c in columns)
    print(
        f"column conversion ({len(columns)} columns, {rows} values): to_pylist {as_list:.4f} s, "
        f"arrow {as_arrow:.4f} s, {as_list / as_arrow:.1f}x"
    )
    run_list = [run for run, _ in loaded]
    summary_list = [s for _, s in loaded]
    again = best_of(3, lambda: sensitivity_report(run_list))
    reused = best_of(3, lambda: sensitivity_report(run_list, summary_list))
    print(
        f"sensitivity over {len(run_list)} runs: summarising again {again:.4f} s, reusing the "
        f"load's summaries {reused:.4f} s, {again / reused:.1f}x"
    )


if __name__ == "__main__":
    main()
