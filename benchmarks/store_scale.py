"""A store the size of a real community: bytes in git and in blobs, build and add costs.

Run: python benchmarks/store_scale.py                      # 10 and 100 entries, 27 configs
     python benchmarks/store_scale.py --configs 15         # a one-learning-rate method
     python benchmarks/store_scale.py --thousand           # also 1,000 entries
     python benchmarks/store_scale.py --entries 100 --profile 100   # cProfile a warm build

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

REPO = Path(__file__).resolve().parents[1]
TEMPLATES = {27: "finetune--demo-cnn", 15: "linear-probe--demo-cnn"}
BENCHMARK = "store-scale"
SHARDS = 12


# --- the synthetic benchmark -------------------------------------------------------------------


def register(manifests: list[str]) -> None:
    """Add the synthetic sub-benchmark (its manifests, centre searched on digits)."""
    from fewtrans_board.leaderboard.sub_benchmarks import SUB_BENCHMARKS, SubBenchmark

    SUB_BENCHMARKS[BENCHMARK] = SubBenchmark(
        name=BENCHMARK,
        title="Store scale",
        description="Synthetic FewTrans-sized entries.",
        manifests=tuple(manifests),
        held_out=("digits",),
    )


def build_manifests(folder: Path, datasets: int, episodes: int, classes: int) -> list[Path]:
    """``datasets`` frozen fewtrans-varied manifests of a synthetic ``classes``-class dataset."""
    from fewtrans_board.api.dataset_spec import DatasetSpec
    from fewtrans_board.datasets.splits import fewtrans_split
    from fewtrans_board.episodes.build import build_manifest
    from fewtrans_board.episodes.manifest import Manifest
    from fewtrans_board.episodes.protocols import get_protocol

    class Reader:
        def list_items(self, root, spec):  # type: ignore[no-untyped-def]
            return [[f"{cid}/{i:04d}.jpg" for i in range(600)] for cid in spec.class_ids]

        def load_image(self, root, item):  # type: ignore[no-untyped-def]
            raise NotImplementedError

    folder.mkdir(parents=True, exist_ok=True)
    protocol = get_protocol("fewtrans-varied")
    ids = tuple(f"class-{c:03d}" for c in range(classes))
    template = None
    paths = []
    for d in range(datasets):
        name = f"scale-{d:02d}"
        path = folder / f"fewtrans-varied--{name}.parquet"
        if template is None:
            spec = DatasetSpec(
                name=name,
                title=name,
                domain="synthetic",
                class_ids=ids,
                class_names=ids,
                split=fewtrans_split(classes, 80),
                reader=Reader(),
                layout="-",
                license="-",
                source_url="-",
                download="-",
            )
            template = build_manifest(spec, None, protocol)
        # The same episode shapes under another dataset name: another frozen manifest.
        episodes_of = template.episodes()[:episodes]
        meta = {**template.meta, "dataset": {**template.meta["dataset"], "name": name}}
        for key in ("episodes", "sha256", "schema_version"):
            meta.pop(key, None)
        Manifest.from_episodes(name, episodes_of, meta).write(path)
        paths.append(path)
    return paths


def template_meta(configs: int) -> tuple[dict[str, Any], dict[str, Any], Path]:
    """A committed entry's shard provenance and run.json (unsplit view) and its folder."""
    from fewtrans_board.results.blobs import LOGITS_BLOB_KEY
    from fewtrans_board.results.shards import read_shard

    ident = TEMPLATES[configs]
    run = next((REPO / "leaderboard" / "results" / ident).iterdir())
    _, meta = read_shard(sorted((run / "shards").glob("*.parquet"))[0])
    meta = {k: v for k, v in meta.items() if k not in (LOGITS_BLOB_KEY, "checksum")}
    record = json.loads((run / "run.json").read_text())
    return meta, record, REPO / "leaderboard" / "submissions" / ident


def run_tables(
    manifest_path: Path, meta: dict[str, Any], record: dict[str, Any], seed: int
) -> tuple[list[Any], dict[str, Any]]:
    """A complete fewtrans-paper run on one manifest: sealed shard tables and run.json."""
    import pyarrow as pa

    from fewtrans_board.api.adapter import typed_values
    from fewtrans_board.core.canonical import canonical_json
    from fewtrans_board.episodes.manifest import Manifest
    from fewtrans_board.hpe.aggregate import fuse
    from fewtrans_board.hpe.protocols import get_hpe_protocol, schema_roles
    from fewtrans_board.results.schema import arrow_schema, run_id_of, storable_logits
    from fewtrans_board.results.shards import seal_table

    manifest = Manifest.load(manifest_path)
    episodes = manifest.episodes()
    count = min(SHARDS, len(episodes))
    chunks = np.array_split(np.arange(len(episodes)), count)
    protocol = get_hpe_protocol("fewtrans-paper")
    schema = meta["adapter"]["schema"]
    roles = schema_roles(schema)
    centre = typed_values(meta["adapter"]["centre"], schema["fields"])
    grid = [c for c in protocol.grid_for(centre, roles)]
    identity = {
        **record["identity"],
        "manifest_sha256": manifest.sha256,
        "hpe": protocol.name,
        "grid": grid,
        "shards": count,
        "limit": None,
    }
    run_id = run_id_of(identity)
    hpe = {
        "name": protocol.name,
        "version": protocol.version,
        "aggregation": protocol.aggregation,
        "hash": protocol.digest_for(centre, roles),
        "grid_size": len(grid),
        "roles": roles,
    }
    base = {
        **meta,
        "run_id": run_id,
        "identity": identity,
        "hpe": hpe,
        "manifest": {
            "sha256": manifest.sha256,
            "file": manifest_path.name,
            "dataset": manifest.dataset,
        },
    }
    names = [canonical_json(c) for c in grid]
    rng = np.random.default_rng(seed)
    tables = []
    for shard, chunk in enumerate(chunks):
        cols: dict[str, list[Any]] = {name: [] for name in arrow_schema().names}
        values: list[np.ndarray] = []
        offsets = [0]
        valid: list[bool] = []
        for episode in (episodes[int(i)] for i in chunk):
            labels = np.array([label for _, label in episode.query])
            q, w = len(labels), episode.ways
            raw = rng.normal(size=(len(grid), q, w)).astype(np.float32)
            raw[:, np.arange(q), labels] += 1.0  # better than chance, like a method
            stored = np.stack([storable_logits(r) for r in raw])
            member = raw.argmax(axis=2)
            rows = []
            for c in range(len(grid)):
                rows.append(("config", "", c, names[c], member[c], stored[c], 0.5, 1000 + c))
            for aggregation in ("logit-mean", "vote"):
                fused, fused_logits = fuse(aggregation, logits=stored, predictions=member, n_way=w)
                kept = None if fused_logits is None else storable_logits(fused_logits)
                rows.append(("ensemble", aggregation, -1, "", fused, kept, 0.0, 0))
            for kind, aggregation, index, config, pred, logits, seconds, row_seed in rows:
                cols["run_id"].append(run_id)
                cols["dataset"].append(manifest.dataset)
                cols["manifest_sha256"].append(manifest.sha256)
                cols["episode"].append(episode.index)
                cols["stream_index"].append(episode.stream_index)
                cols["split"].append("base")
                cols["kind"].append(kind)
                cols["aggregation"].append(aggregation)
                cols["config_index"].append(index)
                cols["config"].append(config)
                cols["n_way"].append(w)
                cols["n_query"].append(q)
                cols["accuracy"].append(float((pred == labels).mean() * 100.0))
                cols["predictions"].append(pred.astype(np.int16))
                cols["seconds"].append(seconds)
                cols["seed"].append(row_seed)
                valid.append(logits is not None)
                if logits is not None:
                    values.append(logits.ravel())
                offsets.append(offsets[-1] + (0 if logits is None else logits.size))
        arrays = []
        for field in arrow_schema():
            if field.name == "logits":
                mask = pa.array([not v for v in valid])
                flat = np.concatenate(values).astype(np.float16)
                arrays.append(
                    pa.ListArray.from_arrays(
                        pa.array(np.asarray(offsets, dtype=np.int32)), pa.array(flat), mask=mask
                    ).cast(field.type)
                )
            elif field.name == "predictions":
                p_offsets = np.cumsum([0] + [len(p) for p in cols["predictions"]]).astype(np.int32)
                arrays.append(
                    pa.ListArray.from_arrays(
                        pa.array(p_offsets), pa.array(np.concatenate(cols["predictions"]))
                    ).cast(field.type)
                )
            elif pa.types.is_dictionary(field.type):
                arrays.append(pa.array(cols[field.name], type=pa.string()).dictionary_encode())
            else:
                arrays.append(pa.array(cols[field.name], type=field.type))
        table = pa.Table.from_arrays(arrays, schema=arrow_schema())
        shard_meta = {**base, "shard": {**base.get("shard", {}), "index": shard, "count": count}}
        tables.append(seal_table(table, shard_meta))
    run_record = {**record, "identity": identity, "run_id": run_id}
    return tables, run_record


def build_bundle(out: Path, ident: str, manifests: list[Path], configs: int, seed: int = 0) -> Path:
    """A bundle of one synthetic entry (every dataset), as ``submission pack`` would write."""
    from fewtrans_board.results.shards import shard_file_name, write_table

    meta, record, submission = template_meta(configs)
    folder = out / f"{ident}.bundle"
    shutil.rmtree(folder, ignore_errors=True)
    toml = (submission / "submission.toml").read_text()
    lines = []
    for line in toml.splitlines():
        key = line.split("=", 1)[0].strip()
        if key == "id":
            line = f'id = "{ident}"'
        elif key == "benchmark":
            line = f'benchmark = "{BENCHMARK}"'
        elif key == "hpe_protocol":
            line = 'hpe_protocol = "fewtrans-paper"'
        lines.append(line)
    (folder).mkdir(parents=True)
    (folder / "submission.toml").write_text("\n".join(lines) + "\n")
    shutil.copy(submission / "centre-search.json", folder / "centre-search.json")
    for d, manifest in enumerate(manifests):
        tables, run_record = run_tables(manifest, meta, record, seed * 1000 + d)
        run = folder / "results" / manifest.stem
        (run / "shards").mkdir(parents=True)
        (run / "run.json").write_text(json.dumps(run_record, indent=2, sort_keys=True))
        for index, table in enumerate(tables):
            write_table(run / "shards" / shard_file_name(index, len(tables)), table)
    bundle = out / f"{ident}.zip"
    with zipfile.ZipFile(bundle, "w", compression=zipfile.ZIP_STORED) as archive:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                archive.write(path, path.relative_to(folder).as_posix())
    shutil.rmtree(folder)
    return bundle


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
    for part in ("submissions", "results"):
        shutil.copytree(
            store / part / added["id"], kept / part / added["id"], copy_function=os.link
        )
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
