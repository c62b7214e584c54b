"""Run an evaluation into a results folder: shards, resume, executors, progress.

Folder layout::

    OUT/run.json                         the run identity (checked on resume)
    OUT/shards/shard-00003-of-00012.parquet
    OUT/features/<key>.npy (+ .json)     frozen-feature cache, reused on resume

A shard file is written atomically when all its episodes and configurations are done, so a
crash or ``kill -9`` loses at most the shards in flight; running the same command again
skips finished shards and produces identical results.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fewtrans_board.atomic import write_bytes_atomic
from fewtrans_board.canonical import canonical_json
from fewtrans_board.errors import FewtransError
from fewtrans_board.registry import Registry
from fewtrans_board.results.shards import write_shard
from fewtrans_board.runner.context import RunContext
from fewtrans_board.runner.spec import RunSpec

ProgressCallback = Callable[[int], None]


def shard_path(out: Path, index: int, count: int) -> Path:
    """File of shard ``index`` of ``count``."""
    return out / "shards" / f"shard-{index:05d}-of-{count:05d}.parquet"


@dataclass
class RunReport:
    """What a call to :func:`run_evaluation` did."""

    out: Path
    run_id: str
    shards_total: int
    shards_run: list[int]
    shards_skipped: list[int]
    episodes: int
    configurations: int
    seconds: float


def prepare_output(ctx: RunContext, out: Path) -> None:
    """Create ``out`` with ``run.json``, or check an existing one describes the same run."""
    identity = ctx.identity()
    marker = out / "run.json"
    if marker.exists():
        existing = json.loads(marker.read_text())
        if existing.get("identity") != identity:
            differing = sorted(
                k for k in identity if existing.get("identity", {}).get(k) != identity[k]
            )
            raise FewtransError(
                f"{out} holds results of a different run (differs in: {', '.join(differing)}); "
                "use another --out folder"
            )
        return
    out.mkdir(parents=True, exist_ok=True)
    record = {"run_id": ctx.run_id(), "identity": identity}
    write_bytes_atomic(marker, (json.dumps(record, indent=2, sort_keys=True) + "\n").encode())


def run_shard(
    ctx: RunContext, out: Path, index: int, progress: ProgressCallback | None = None
) -> Path:
    """Evaluate one shard in this process and write it atomically."""
    started = time.time()
    adapter = ctx.adapter_cls()
    rows: list[dict[str, Any]] = []
    episodes = ctx.shard_episodes(index)
    for episode in episodes:
        rows.extend(ctx.episode_rows(episode, adapter))
        if progress is not None:
            progress(1)
    metadata = {
        **ctx.provenance(),
        "shard": {
            "index": index,
            "count": ctx.shard_count,
            "episodes": [episodes[0].index, episodes[-1].index] if episodes else [],
            "seconds": round(time.time() - started, 3),
        },
    }
    path = shard_path(out, index, ctx.shard_count)
    write_shard(path, rows, metadata)
    return path


def decoded_folder(spec: RunSpec, out: Path) -> Path:
    """Where the run's decoded-image files live (``--image-cache``, else ``OUT/decoded``)."""
    return Path(spec.image_cache) if spec.image_cache else out / "decoded"


def _worker_run_shard(
    spec_dict: dict[str, Any], out: str, index: int, threads: int, device: str | None = None
) -> str:
    """Process-pool / Ray entry point: build a context in the worker and run one shard."""
    import torch

    from fewtrans_board.plugins import get_plugin_manager

    torch.set_num_threads(threads)
    spec = RunSpec.from_dict(spec_dict)
    device = device or _POOL_DEVICE.get("device") or spec.device
    key = (canonical_json(spec_dict), device)
    ctx = _WORKER_CONTEXTS.get(key)
    if ctx is None:
        registry = Registry.from_plugin_manager(get_plugin_manager())
        ctx = RunContext(spec, registry, check_items=False)
        ctx.feature_folder = Path(out) / "features"
        ctx.decoded_folder = decoded_folder(spec, Path(out))
        ctx.device = device
        _WORKER_CONTEXTS[key] = ctx
    return str(run_shard(ctx, Path(out), index))


_WORKER_CONTEXTS: dict[tuple[str, str], RunContext] = {}
_POOL_DEVICE: dict[str, str] = {}


def _init_pool_worker(counter: Any, device: str, gpus: int) -> None:
    """Pool initializer: take the next worker index and with it a GPU of its own."""
    from fewtrans_board.runner.placement import pool_device

    with counter.get_lock():
        worker = counter.value
        counter.value += 1
    _POOL_DEVICE["device"] = pool_device(device, worker, gpus)


def run_evaluation(
    spec: RunSpec,
    registry: Registry,
    out: Path,
    *,
    shard: int | None = None,
    executor: str = "inline",
    workers: int = 1,
    progress: bool = True,
) -> RunReport:
    """Evaluate a run into ``out``, skipping finished shards.

    Args:
        spec: the run.
        registry: registry to resolve names.
        out: results folder.
        shard: run only this shard index (``--shard i/n``).
        executor: ``"inline"``, ``"process"`` (local process pool) or ``"ray"``.
        workers: parallel workers for ``process`` / ``ray``.
        progress: show a progress bar with ETA on stderr.

    Raises:
        FewtransError: bad names, a mismatching dataset copy, a different run already in
            ``out``, or an adapter error (finished shards stay intact).
    """
    import torch

    started = time.time()
    previous_threads = torch.get_num_threads()
    if spec.threads is not None:
        torch.set_num_threads(spec.threads)
    try:
        return _run(spec, registry, out, shard, executor, workers, progress, started)
    finally:
        torch.set_num_threads(previous_threads)


def _run(
    spec: RunSpec,
    registry: Registry,
    out: Path,
    shard: int | None,
    executor: str,
    workers: int,
    progress: bool,
    started: float,
) -> RunReport:
    from tqdm import tqdm

    ctx = RunContext(spec, registry)
    ctx.feature_folder = out / "features"
    ctx.decoded_folder = decoded_folder(spec, out)
    prepare_output(ctx, out)
    for stale in (out / "shards").glob(".shard-*.tmp"):
        stale.unlink()  # left by a killed run; never readable as a shard
    indices = [shard] if shard is not None else list(range(ctx.shard_count))
    if shard is not None and not 0 <= shard < ctx.shard_count:
        raise FewtransError(f"--shard {shard} is outside 0..{ctx.shard_count - 1}")
    done = [i for i in indices if shard_path(out, i, ctx.shard_count).exists()]
    todo = [i for i in indices if i not in done]
    if todo:
        ctx.prefetch_features([ep for i in todo for ep in ctx.shard_episodes(i)], progress)
    total = sum(len(ctx.shard_episodes(i)) for i in todo)
    bar = tqdm(
        total=total,
        desc=f"{spec.adapter} x {len(ctx.grid)} configs on {ctx.manifest.dataset}",
        unit="episode",
        disable=not progress or total == 0,
    )
    try:
        if executor == "inline" or len(todo) <= 1:
            for index in todo:
                run_shard(ctx, out, index, bar.update)
        elif executor == "process":
            _run_process_pool(spec, out, todo, workers, bar, ctx)
        elif executor == "ray":
            _run_ray(spec, out, todo, workers, bar, ctx)
        else:
            raise FewtransError(f"unknown executor {executor!r}; use inline, process or ray")
    finally:
        bar.close()
    return RunReport(
        out=out,
        run_id=ctx.run_id(),
        shards_total=ctx.shard_count,
        shards_run=todo,
        shards_skipped=done,
        episodes=sum(len(ctx.shard_episodes(i)) for i in indices),
        configurations=len(ctx.grid),
        seconds=time.time() - started,
    )


def _threads_per_worker(spec: RunSpec, workers: int) -> int:
    return spec.threads or max(1, (os.cpu_count() or 1) // max(workers, 1))


def _run_process_pool(
    spec: RunSpec, out: Path, todo: list[int], workers: int, bar: Any, ctx: RunContext
) -> None:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    from fewtrans_board.runner.placement import gpu_count, spreads_over_gpus

    threads = _threads_per_worker(spec, workers)
    context = multiprocessing.get_context("spawn")
    gpus = gpu_count() if spreads_over_gpus(spec.device) else 0
    with ProcessPoolExecutor(
        max_workers=workers,
        mp_context=context,
        initializer=_init_pool_worker,
        initargs=(context.Value("i", 0), spec.device, gpus),
    ) as pool:
        futures = {
            pool.submit(_worker_run_shard, spec.to_dict(), str(out), i, threads): i for i in todo
        }
        for future in as_completed(futures):
            future.result()
            bar.update(len(ctx.shard_episodes(futures[future])))


def _run_ray(
    spec: RunSpec, out: Path, todo: list[int], workers: int, bar: Any, ctx: RunContext
) -> None:
    try:
        import ray
    except ImportError as exc:
        raise FewtransError(
            "the ray executor needs Ray: pip install 'fewtrans-board[ray]'"
        ) from exc
    started_here = not ray.is_initialized()
    if started_here:
        ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False)
    try:
        _run_ray_actors(ray, spec, out, todo, workers, bar, ctx)
    finally:
        if started_here:
            ray.shutdown()


def _run_ray_actors(
    ray: Any, spec: RunSpec, out: Path, todo: list[int], workers: int, bar: Any, ctx: RunContext
) -> None:
    """One actor per worker (per GPU for ``--device cuda``), each keeping its loaded model."""
    from ray.util import ActorPool

    from fewtrans_board.runner.placement import ray_device, spreads_over_gpus

    on_gpus = spec.device.startswith("cuda")
    if on_gpus and spreads_over_gpus(spec.device) and workers <= 1:
        workers = max(1, int(ray.cluster_resources().get("GPU", 1)))

    class ShardWorker:
        def __init__(self) -> None:
            self.device = ray_device(
                spec.device, ray.get_gpu_ids(), os.environ.get("CUDA_VISIBLE_DEVICES")
            )

        def run(self, index: int) -> tuple[int, str]:
            threads = spec.threads or 1
            return index, _worker_run_shard(spec.to_dict(), str(out), index, threads, self.device)

    actor = ray.remote(num_cpus=1, num_gpus=1 if on_gpus else 0)(ShardWorker)
    pool = ActorPool([actor.remote() for _ in range(min(workers, len(todo)))])
    for index, _ in pool.map_unordered(lambda a, i: a.run.remote(i), todo):
        bar.update(len(ctx.shard_episodes(index)))
