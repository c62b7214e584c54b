"""A store the size of a real community: bytes in git and in blobs, build and add costs.

Run: python benchmarks/store_scale.py                      # 10 and 100 entries, 27 configs
     python benchmarks/store_scale.py --configs 15         # a one-learning-rate method
     python benchmarks/store_scale.py --thousand           # also 1,000 entries
     python benchmarks/store_scale.py --entries 100 --profile 100   # cProfile a warm build
     python benchmarks/store_scale.py --entries 100,1000 --ranked   # entries verified: ranked

Synthetic FewTrans-sized entries: the episode shapes of the project's ``fewtrans-varied``
sampler on a 100-class dataset (600 episodes; the script prints their mean ways and
queries), 10 datasets (one frozen manifest each), 15 or 27 configurations of the HPE grid
(``fewtrans-paper`` around the committed ``finetune`` / ``linear-probe`` entry's centre),
random float16 logits written as the runner writes them (row-shifted, zstd Parquet), with
predictions, accuracies and both ensembles derived from them exactly as ``evaluate`` does,
so every entry passes validation.

One entry is built and added with ``leaderboard add`` (validation of the full bundle, no
re-run, the split, the index): its bytes in git (its submission folder and split shards),
in blobs and in the bundle (what git held before the split) are measured. A second entry
(other logits) is added once, timed, and its stored form kept aside. The other entries of
each store are the first under other ids (hard links: the same bytes, read again by every
build). Each measure runs in a fresh process (``--measure``), which reports its wall time
and its peak resident memory (``VmHWM``), the frozen manifests read inside the clock:
``leaderboard rebuild`` without the build cache, then with it cold and warm; ``site build``
cold and warm (its own cache); and with the kept entry put into the store, rebuild and site
build again over the warm caches (the cost of adding one entry). A cold build summarises
every entry (seconds each), so above ``--cold-max`` entries the clones' cached summaries
are seeded from the first entry's instead (:func:`seed_cache`). Figures are printed as
measured in this run; nothing is asserted. Disk: the clones are hard links (about 2.5 GB
for any size, mostly the two entries' blobs).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
from scale_entries import REPO, TEMPLATES, build_bundle, build_manifests, register

# --- stores ------------------------------------------------------------------------------------


def entry_bytes(store: Path, ident: str) -> tuple[int, int]:
    """``(bytes in git, bytes in blobs)`` of one stored entry."""
    from fewtrans_board.results.blobs import BlobStore, read_record

    git = sum(
        p.stat().st_size
        for folder in (store / "submissions" / ident, store / "results" / ident)
        for p in folder.rglob("*")
        if p.is_file()
    )
    blobs = BlobStore.for_store(store)
    shas = {read_record(p)["sha256"] for p in (store / "results" / ident).rglob("*.parquet")}
    return git, sum(Path(blobs.where(s)).stat().st_size for s in shas)


def clone_entry(store: Path, source: str, ident: str) -> None:
    """The stored entry ``source`` under id ``ident``: hard-linked results, its own metadata."""
    submissions = store / "submissions"
    shutil.copytree(submissions / source, submissions / ident)
    toml = submissions / ident / "submission.toml"
    toml.write_text(toml.read_text().replace(f'id = "{source}"', f'id = "{ident}"'))
    shutil.copytree(store / "results" / source, store / "results" / ident, copy_function=os.link)


def seed_cache(store: Path, cache: Path, source: str) -> int:
    """Give every clone of ``source`` the cached summaries ``source`` has in ``cache``.

    A clone's files are ``source``'s, so its payload is ``source``'s (paths are not
    cached): this writes what a build would, as a store that grew one entry at a time has
    it, without summarising a thousand identical entries. Returns how many were seeded.
    """
    from fewtrans_board.leaderboard.entries import entry_cache_key
    from fewtrans_board.leaderboard.store import LeaderboardStore
    from fewtrans_board.leaderboard.summary_cache import SummaryCache

    lb = LeaderboardStore(store)
    summaries = SummaryCache(cache)
    key = entry_cache_key(lb, source)
    payload = summaries.get(key) if key is not None else None
    if payload is None:
        raise SystemExit(f"no cached summaries of {source} in {cache}: build once first")
    seeded = 0
    for ident in lb.submission_ids():
        clone = entry_cache_key(lb, ident)
        if clone is not None and ident != source and summaries.get(clone) is None:
            summaries.put(clone, payload)
            seeded += 1
    return seeded


def mark_verified(store: Path, ident: str, manifests: list[Path]) -> None:
    """Give a stored entry a ``verified`` status, so the site ranks it (clones copy it).

    The report is simulated from a verified entry of the repository's store (its
    environment, isolation and rule): per dataset of ``manifests`` the same outcome, every
    re-run episode identical. Nothing checks it at build time; only a pull request's check
    would refuse a status its run did not establish.
    """
    template = next(
        report
        for path in sorted((REPO / "leaderboard" / "submissions").glob("*/status.json"))
        if (report := json.loads(path.read_text()))["status"] == "verified"
        and report["verification"].get("datasets")
    )
    verification = dict(template["verification"])
    row = verification["datasets"][0]
    verification["datasets"] = [
        {**row, "dataset": path.name.removesuffix(".parquet").split("--")[-1]} for path in manifests
    ]
    verification["simulated"] = "store_scale.py --ranked"
    target = store / "submissions" / ident / "status.json"
    # Unlinked first: the file may be a hard link shared with another copy of the entry.
    target.unlink(missing_ok=True)
    status = {"status": "verified", "verification": verification}
    target.write_text(json.dumps(status, indent=2, sort_keys=True) + "\n")


def grow(store: Path, source: str, count: int) -> None:
    """Clone entries until the store holds ``count``."""
    have = len(list((store / "submissions").iterdir()))
    for i in range(have, count):
        clone_entry(store, source, f"scale-{i:04d}")


def measure(args: list[str]) -> dict[str, Any]:
    """Run ``--measure ...`` in a fresh process; its JSON report."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [sys.executable, __file__, "--measure", *args],
        check=True,
        capture_output=True,
        text=True,
        env=env,
    ).stdout
    report: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return report


def measured(kind: str, store: Path, arg: str | None) -> dict[str, Any]:
    """In this (fresh) process: one build, add or withdrawal; wall time and peak memory.

    Kinds: ``rebuild`` (no cache), ``rebuild-logits`` (no cache, blobs fetched),
    ``rebuild-cached`` and ``site`` (the build cache in folder ``arg``; ``site`` without
    one when ``arg`` is ``-``), ``add`` (the bundle ``arg``: validation, split, index),
    ``withdraw`` (the entry ``arg``). The frozen manifests are read inside the clock.
    """
    from fewtrans_board.leaderboard.index import build_index
    from fewtrans_board.leaderboard.intake import Verification, add_bundle
    from fewtrans_board.leaderboard.store import LeaderboardStore
    from fewtrans_board.leaderboard.summary_cache import SummaryCache
    from fewtrans_board.website.build import build_site

    register(sorted(p.name for p in (store / "manifests").glob("*.parquet")))
    lb = LeaderboardStore(store)
    cache = SummaryCache(None if arg in (None, "-") else Path(str(arg)))
    start = time.perf_counter()
    extra: dict[str, Any] = {}
    if kind == "rebuild":
        build_index(lb)
    elif kind == "rebuild-logits":
        build_index(lb, with_logits=True)
    elif kind == "rebuild-cached":
        build_index(lb, cache=cache)
    elif kind == "site":
        site = store.parent / "_site"
        shutil.rmtree(site, ignore_errors=True)
        extra["pages"] = len(build_site(store, site, cache=cache))
    elif kind == "add":
        extra["id"] = add_bundle(Path(str(arg)), lb, Verification(enabled=False)).validation.meta.id
    else:
        lb.withdraw(str(arg))
    seconds = time.perf_counter() - start
    peak = peak_rss()
    return {"kind": kind, "seconds": seconds, "peak_rss_bytes": peak, **extra}


def peak_rss() -> int:
    """This process's peak resident memory in bytes.

    ``VmHWM`` (Linux) restarts at ``exec``; ``ru_maxrss`` would carry the parent's peak
    into the measuring child.
    """
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def profile(store: Path, out: Path, cache: Path) -> None:
    """cProfile of one site build over ``store`` with the build cache in ``cache``."""
    import cProfile
    import pstats

    from fewtrans_board.leaderboard.summary_cache import SummaryCache
    from fewtrans_board.website.build import build_site

    register(sorted(p.name for p in (store / "manifests").glob("*.parquet")))
    profiler = cProfile.Profile()
    profiler.enable()
    build_site(store, out, cache=SummaryCache(cache))
    profiler.disable()
    pstats.Stats(profiler).sort_stats("cumulative").print_stats(45)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--entries", default="10,100", help="store sizes, comma-separated")
    parser.add_argument("--thousand", action="store_true", help="also 1,000 entries")
    parser.add_argument("--configs", type=int, choices=sorted(TEMPLATES), default=27)
    parser.add_argument("--datasets", type=int, default=10)
    parser.add_argument("--episodes", type=int, default=600)
    parser.add_argument("--classes", type=int, default=100)
    parser.add_argument("--out", type=Path, default=None, help="work folder (default: temporary)")
    parser.add_argument(
        "--cold-max", type=int, default=10, help="cold (uncached) builds up to N entries"
    )
    parser.add_argument("--logits-at", type=int, default=10, help="rebuild --with-logits at N")
    parser.add_argument(
        "--profile", type=int, default=0, help="cProfile a warm site build at N entries"
    )
    parser.add_argument(
        "--ranked",
        action="store_true",
        help="mark the entries verified (a simulated status.json): ranked, with the bootstrap "
        "tables, regime tables and sampling lottery",
    )
    parser.add_argument("--measure", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        kind, store, *rest = args.measure
        print(json.dumps(measured(kind, Path(store), rest[0] if rest else None)))
        return
    sizes = sorted({int(n) for n in args.entries.split(",")} | ({1000} if args.thousand else set()))
    work = args.out or Path(tempfile.mkdtemp(prefix="store-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        run(work, sizes, args)
    finally:
        if args.out is None:
            shutil.rmtree(work, ignore_errors=True)


def mib(n: float) -> str:
    """Bytes as MiB."""
    return f"{n / 2**20:.0f} MiB"


def place(store: Path, kept: Path, ident: str) -> None:
    """Put the stored entry kept in ``kept`` back into ``store`` (hard links)."""
    for part in ("submissions", "results"):
        shutil.copytree(kept / part / ident, store / part / ident, copy_function=os.link)


def remove(store: Path, ident: str) -> None:
    """Take a stored entry out of ``store`` (its blobs stay)."""
    for part in ("submissions", "results"):
        shutil.rmtree(store / part / ident)


def measure_size(
    store: Path, kept: Path, extra: str, size: int, args: argparse.Namespace
) -> dict[str, Any]:
    """Every measure at one store size; the store is left with ``size`` entries.

    Up to ``--cold-max`` entries the cache is filled by a cold build (every entry
    summarised); above, the clones' cached summaries are seeded (:func:`seed_cache`) as a
    store that grew one entry at a time has them. "Adding one entry" puts the stored form
    of a new entry (``leaderboard add`` of another bundle, kept aside) into the store, then
    rebuilds and builds the site with the cache of the store before.
    """
    cache, cache_site = store.parent / "cache", store.parent / "cache-site"
    row: dict[str, Any] = {"entries": size}
    cold = size <= args.cold_max
    if cold:
        row["rebuild"] = measure(["rebuild", str(store)])
    for name in (cache, cache_site):
        shutil.rmtree(name, ignore_errors=True)
    if cold:
        row["rebuild_cold"] = measure(["rebuild-cached", str(store), str(cache)])
        row["site_cold"] = measure(["site", str(store), str(cache_site)])
    else:
        measure(["rebuild-cached", str(store.parent / "seed"), str(cache)])
        start = time.perf_counter()
        seeded = seed_cache(store, cache, "scale-0000")
        row["seeded"] = {"entries": seeded, "seconds": time.perf_counter() - start}
        shutil.copytree(cache, cache_site)
    row["rebuild_warm"] = measure(["rebuild-cached", str(store), str(cache)])
    row["site_warm"] = measure(["site", str(store), str(cache_site)])
    place(store, kept, extra)
    row["rebuild_plus_one"] = measure(["rebuild-cached", str(store), str(cache)])
    row["site_plus_one"] = measure(["site", str(store), str(cache_site)])
    remove(store, extra)
    if size == args.logits_at:
        row["rebuild_logits"] = measure(["rebuild-logits", str(store)])
    return row


def run(work: Path, sizes: list[int], args: argparse.Namespace) -> None:
    from fewtrans_board.episodes.manifest import Manifest
    from fewtrans_board.leaderboard.intake import Verification, add_bundle
    from fewtrans_board.leaderboard.store import LeaderboardStore

    store = work / "leaderboard"
    start = time.perf_counter()
    manifests = build_manifests(store / "manifests", args.datasets, args.episodes, args.classes)
    episodes = Manifest.load(manifests[0]).episodes()
    ways = np.mean([e.ways for e in episodes])
    queries = [len(e.query) for e in episodes]
    print(
        f"{args.datasets} datasets x {len(episodes)} episodes of fewtrans-varied on a "
        f"{args.classes}-class dataset: mean {ways:.1f} ways, mean {np.mean(queries):.1f} "
        f"queries (max {max(queries)}); {args.configs} configurations, float16 logits, zstd",
        flush=True,
    )
    register([p.name for p in manifests])
    first = build_bundle(work, "scale-0000", manifests, args.configs)
    extra = build_bundle(work, "scale-extra", manifests, args.configs, seed=1)
    print(f"built the entries' bundles in {time.perf_counter() - start:.1f} s", flush=True)
    add_bundle(first, LeaderboardStore(store), Verification(enabled=False))
    if args.ranked:
        mark_verified(store, "scale-0000", manifests)
    git, blobs = entry_bytes(store, "scale-0000")
    bundle_results = sum(
        i.file_size for i in zipfile.ZipFile(first).infolist() if i.filename.endswith(".parquet")
    )
    print(
        f"per entry: {git / 1e6:.2f} MB in git, {blobs / 1e6:.1f} MB in blobs "
        f"({bundle_results / 1e6:.1f} MB of shards in the bundle, i.e. in git before the "
        f"split: {bundle_results / git:.0f}x the split entry)",
        flush=True,
    )
    # A one-entry store to fill the cache with scale-0000's summaries before seeding clones.
    seed = work / "seed"
    shutil.copytree(store, seed, copy_function=os.link, ignore=shutil.ignore_patterns("blobs"))
    # The stored form of one more entry, kept aside: "adding one entry" at every size.
    kept = work / "kept"
    added = measure(["add", str(store), str(extra)])
    print(
        f"leaderboard add of one entry to a 1-entry store (validation of the full bundle, "
        f"split, index): {added['seconds']:.1f} s, peak {mib(added['peak_rss_bytes'])}",
        flush=True,
    )
    for folder in ("submissions", "results"):
        shutil.copytree(
            store / folder / added["id"], kept / folder / added["id"], copy_function=os.link
        )
    if args.ranked:
        mark_verified(kept, added["id"], manifests)
    remove(store, added["id"])
    rows = []
    for size in sizes:
        grow(store, "scale-0000", size)
        row = measure_size(store, kept, added["id"], size, args)
        if size == args.profile:  # a warm build: the cache measure_size left
            profile(store, work / "_profile_site", store.parent / "cache")
        row.update(git_bytes=size * git, blob_bytes=size * blobs)
        rows.append(row)

        def part(label: str, key: str, row: dict[str, Any] = row) -> str:
            m = row.get(key)
            return f"{label} {m['seconds']:.1f} s / {mib(m['peak_rss_bytes'])}" if m else ""

        parts = [
            part("rebuild (no cache)", "rebuild"),
            part("rebuild cold", "rebuild_cold"),
            part("warm", "rebuild_warm"),
            part("site build cold", "site_cold"),
            part("warm", "site_warm"),
            part("one entry added: rebuild", "rebuild_plus_one"),
            part("site build", "site_plus_one"),
            part("rebuild --with-logits", "rebuild_logits"),
        ]
        print(
            f"{size:>5} entries: git {size * git / 1e9:.2f} GB, blobs {size * blobs / 1e9:.1f} GB | "
            + " | ".join(p for p in parts if p),
            flush=True,
        )
    print(json.dumps({"configs": args.configs, "per_entry_git": git, "per_entry_blobs": blobs,
                      "bundle_shards": bundle_results, "add": added, "rows": rows}))  # fmt: skip


if __name__ == "__main__":
    main()
