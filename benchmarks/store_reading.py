"""What reading a stored leaderboard costs, before and after the changes of 2026-12-07 (evening).

Run: python benchmarks/store_reading.py [--store leaderboard] [--repeats 3]

Every index, site build, ``leaderboard check`` and bundle validation reads each stored run and
rechecks it. On the store given (the committed one by default) this times, in this process:

1. Row checks: :func:`~fewtrans_board.leaderboard.row_arrays.all_rows_pass` (all groups at
   once, what ``check_rows`` runs first) against the group-by-group checks it replaces on an
   honest run, over every stored run; both must pass.
2. Shard checksums: :func:`~fewtrans_board.results.shards.shard_checksum` of every shard
   against the same hash with each text column decoded and serialised whole (as before);
   the digests must be equal.
3. Bootstrap counts: :func:`~fewtrans_board.stats.bootstrap.resample_counts` of 10,000
   resamples of 600 episodes against the former form (a second, offset copy of the draws);
   the counts must be equal.
4. Site templates: every site template loaded by a fresh environment (each site build and
   reproduction report makes one) with the process's compiled-template cache, warm, against
   an environment without it (every template parsed and compiled). That cached builds write
   the same pages is what ``tests/test_build_cache.py`` checks.

The best of ``--repeats`` runs of each is compared; ratios are printed; no absolute time is a
claim.
"""

from __future__ import annotations

import argparse
import hashlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from fewtrans_board.core.canonical import canonical_json
from fewtrans_board.leaderboard.row_arrays import RowArrays, all_rows_pass
from fewtrans_board.leaderboard.rows import _check_each_group
from fewtrans_board.leaderboard.store import LeaderboardStore
from fewtrans_board.results.load import find_runs, load_run
from fewtrans_board.results.shards import read_shard, shard_checksum, type_name
from fewtrans_board.stats.bootstrap import resample_counts


def best(repeats: int, work: Callable[[], Any]) -> tuple[float, Any]:
    """The shortest of ``repeats`` timings of ``work()``, and its last result."""
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = work()
        times.append(time.perf_counter() - start)
    return min(times), result


def stored_runs(store: Path) -> list[tuple[RowArrays, list[Any], list[str], bool]]:
    """Every stored run's rows (as git holds them), its frozen manifest's episodes and grid."""
    frozen = LeaderboardStore(store).frozen
    runs = []
    for path in find_runs([store / "results"]):
        run = load_run(path)
        _, manifest = frozen[run.provenance.manifest.sha256]
        grid = [canonical_json(c) for c in run.provenance.identity.grid]
        runs.append((RowArrays.of(run), manifest.episodes(), grid, run.logits_present))
    return runs


def former_checksum(table: Any, meta: dict[str, Any]) -> str:
    """The shard hash with text columns decoded and serialised whole (the former form)."""
    import pyarrow as pa

    from fewtrans_board.results.shards import CHECKSUM_KEY, _canonical_parts

    digest = hashlib.sha256()
    digest.update(canonical_json({k: v for k, v in meta.items() if k != CHECKSUM_KEY}).encode())
    digest.update(f"\nrows={table.num_rows}\n".encode())
    for name, column in zip(table.column_names, table.columns, strict=True):
        digest.update(f"{name}:{type_name(column.type)}\n".encode())
        array = column.combine_chunks()
        if pa.types.is_dictionary(array.type):
            array = array.dictionary_decode()
        for part in _canonical_parts(array):
            digest.update(len(part).to_bytes(8, "little"))
            digest.update(part)
    return digest.hexdigest()


def former_counts(
    rng: np.random.Generator, episodes: int, resamples: int, draws: int
) -> np.ndarray:
    index = rng.integers(0, episodes, size=(resamples, draws))
    flat = (index + episodes * np.arange(resamples)[:, None]).ravel()
    counts = np.bincount(flat, minlength=resamples * episodes)
    return counts.reshape(resamples, episodes).astype(np.float64)


def template_loads(cached: bool) -> list[str]:
    """Every site template loaded by a fresh environment (their names)."""
    from fewtrans_board.website.build import environment
    from fewtrans_board.website.data import site_files_dir

    templates = site_files_dir() / "templates"
    env = environment(templates)
    if not cached:
        env.bytecode_cache = None
    names = sorted(p.name for p in templates.glob("*.html"))
    return [env.get_template(name).name or "" for name in names]


def compare(label: str, before: float, after: float, check: str) -> None:
    print(
        f"{label}: {before * 1000:.1f} ms before, {after * 1000:.1f} ms now, speed-up {before / after:.2f}x ({check})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--store", type=Path, default=Path(__file__).resolve().parents[1] / "leaderboard"
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--resamples", type=int, default=10_000)
    args = parser.parse_args()

    runs = stored_runs(args.store)
    print(f"{len(runs)} stored runs, {sum(len(r[0].rows['episode']) for r in runs)} rows")

    def at_once() -> bool:
        return all(all_rows_pass(a, e, g, w) for a, e, g, w in runs)

    def each_group() -> bool:
        for a, e, g, w in runs:
            _check_each_group("bench", a, e, g, w)
        return True

    after, passed = best(args.repeats, at_once)
    before, _ = best(args.repeats, each_group)
    compare("row checks", before, after, f"every run passes at once: {passed}")

    shards = [read_shard(p) for p in sorted((args.store / "results").rglob("shard-*.parquet"))]
    after, now = best(args.repeats, lambda: [shard_checksum(t, m) for t, m in shards])
    before, then = best(args.repeats, lambda: [former_checksum(t, m) for t, m in shards])
    compare(f"checksums of {len(shards)} shards", before, after, f"digests equal: {now == then}")

    draw = (600, args.resamples, 600)
    after, new = best(args.repeats, lambda: resample_counts(np.random.default_rng(0), *draw))
    before, old = best(args.repeats, lambda: former_counts(np.random.default_rng(0), *draw))
    compare(
        f"bootstrap counts ({args.resamples} x 600)",
        before,
        after,
        f"counts equal: {np.array_equal(new, old)}",
    )

    template_loads(True)  # the cache warm, as from the second build of a process on
    after, loaded = best(args.repeats, lambda: template_loads(True))
    before, _ = best(args.repeats, lambda: template_loads(False))
    compare(f"loading {len(loaded)} site templates", before, after, "compiled once per process")


if __name__ == "__main__":
    main()
