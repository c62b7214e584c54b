"""Run an evaluation into a results folder: shards, resume, executors, progress.

Folder layout::

    OUT/run.json                         the run identity (checked on resume)
    OUT/shards/shard-00003-of-00012.parquet
    OUT/features/<key>.npy (+ .json)     frozen-feature cache, reused on resume

A shard file is written atomically when all its episodes and configurations are done, so a
crash or ``kill -9`` loses at most the shards in flight; running the same command again
skips finished shards (after verifying their checksums) and produces identical results.
Locks, ``run.json`` and corrupt-shard handling live in :mod:`fewtrans_board.runner.run_folder`.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fewtrans_board.core.canonical import canonical_json
from fewtrans_board.core.errors import FewtransError
from fewtrans_board.core.sandbox import Isolation
from fewtrans_board.registry.lookup import Registry
from fewtrans_board.registry.manager import PluginSelection
from fewtrans_board.results.provenance import RunProvenance
from fewtrans_board.results.schema import SCHEMA_VERSION
from fewtrans_board.results.shards import write_shard
from fewtrans_board.runner.context import RunContext
from fewtrans_board.runner.run_folder import claim_shards, shard_path, unwritable
from fewtrans_board.runner.spec import RunSpec, environment_differences, resolved_threads
from fewtrans_board.runner.worker.memory import PeakMemory
from fewtrans_board.runner.worker.trainable import TrainableTally

ProgressCallback = Callable[[int], None]


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


def run_shard(
    ctx: RunContext, out: Path, index: int, progress: ProgressCallback | None = None
) -> Path:
    """Evaluate one shard in this process and write it atomically."""
    started = time.time()
    inline = ctx.isolation is Isolation.INLINE
    adapter = ctx.adapter_cls() if inline else None
    rows: list[dict[str, Any]] = []
    episodes = ctx.shard_episodes(index)
    # Peak memory of the fitting (FewTrans Table IX): see runner/worker/memory.py for what it is.
    # Trainable parameters per configuration (display only): see runner/worker/trainable.py.
    ctx.trainable = TrainableTally(len(ctx.grid))
    with PeakMemory(ctx.device, in_process=inline) as memory:
        ctx.memory = memory
        try:
            for episode in episodes:
                rows.extend(ctx.episode_rows(episode, adapter))
                if progress is not None:
                    progress(1)
        finally:
            ctx.memory = None
    trainable, ctx.trainable = ctx.trainable.record(), None
    shard: dict[str, Any] = {
        "index": index,
        "count": ctx.shard_count,
        "episodes": [episodes[0].index, episodes[-1].index] if episodes else [],
        "seconds": round(time.time() - started, 3),
    }
    peak = memory.record()
    if peak is not None:
        shard["peak_memory"] = peak
    if trainable is not None:
        shard["trainable_parameters"] = trainable
    metadata = {**ctx.provenance(), "shard": shard}
    records = {
        key: ctx.adapter_records.pop(key)
        for key in [str(e.index) for e in episodes]
        if key in ctx.adapter_records
    }
    if records:  # only adapters that report choices (IMS-f) add this key
        metadata["adapter_records"] = records
    # The typed record: a shard never carries provenance that a reader cannot parse.
    record = RunProvenance.of({**metadata, "schema_version": SCHEMA_VERSION})
    path = shard_path(out, index, ctx.shard_count)
    try:
        write_shard(path, rows, record.to_json())
    except OSError as exc:
        raise unwritable(out, exc) from exc
    return path


def decoded_folder(spec: RunSpec, out: Path) -> Path:
    """Where the run's decoded-image files live (``--image-cache``, else ``OUT/decoded``)."""
    return Path(spec.image_cache) if spec.image_cache else out / "decoded"


def worker_plugins(registry: Registry) -> PluginSelection:
    """The plugins a worker process must load to resolve names as ``registry`` does.

    Raises:
        FewtransError: the registry was not built from a plugin manager, or one of its
            extra plugins cannot be sent to another process (named, with what to do).
    """
    if registry.plugins is None:
        raise FewtransError(
            "the process and ray executors rebuild the registry in each worker, but this "
            "registry was not built from a plugin manager; build it with "
            "Registry.from_plugin_manager(get_plugin_manager(...)) or use the inline executor"
        )
    registry.plugins.check_portable()
    return registry.plugins


def _worker_run_shard(
    spec_dict: dict[str, Any],
    out: str,
    index: int,
    threads: int,
    environment: dict[str, Any],
    plugins: PluginSelection,
    device: str | None = None,
) -> str:
    """Process-pool / Ray entry point: build a context in the worker and run one shard.

    The worker loads the caller's plugins (``plugins``), never every installed one.
    Refuses to compute when the worker's numeric environment differs from the run's (a
    Ray node with another GPU or library version would otherwise mix numbers silently).
    """
    import socket

    import torch

    from fewtrans_board.registry.manager import plugin_manager_for

    torch.set_num_threads(threads)
    spec = RunSpec.from_dict(spec_dict)
    device = device or _POOL_DEVICE.get("device") or spec.device
    key = (canonical_json(spec_dict), device, plugins.key())
    ctx = _WORKER_CONTEXTS.get(key)
    if ctx is None:
        registry = Registry.from_plugin_manager(plugin_manager_for(plugins))
        ctx = RunContext(spec, registry, check_items=False)
        ctx.feature_folder = Path(out) / "features"
        ctx.decoded_folder = decoded_folder(spec, Path(out))
        ctx.device = device
        differences = environment_differences(environment, ctx.numeric_environment())
        if differences:
            raise FewtransError(
                f"worker on {socket.gethostname()} has another numeric environment than the "
                f"run ({'; '.join(differences)}); give every worker the same libraries and "
                "hardware"
            )
        _WORKER_CONTEXTS[key] = ctx
    return str(run_shard(ctx, Path(out), index))


_WORKER_CONTEXTS: dict[tuple[str, str, str], RunContext] = {}
_POOL_DEVICE: dict[str, str] = {}


def _init_pool_worker(parent_pid: int, counter: Any, device: str, gpus: int) -> None:
    """Pool initializer: die with the parent; take the next worker index and its GPU."""
    from fewtrans_board.runner.placement import pool_device
    from fewtrans_board.runner.worker.guard import guard_worker

    guard_worker(parent_pid)
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
        progress: show a progress bar with ETA on stderr, if stderr is a terminal (a bar
            redrawn into a CI log is noise).

    Raises:
        FewtransError: bad names, a mismatching dataset copy, a different run already in
            ``out``, or an adapter error (finished shards stay intact).
    """
    import torch

    started = time.time()
    previous_threads = torch.get_num_threads()
    # Every executor computes with the same per-worker thread count (part of the identity).
    torch.set_num_threads(resolved_threads(spec))
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
    progress = progress and sys.stderr.isatty()
    ctx = RunContext(spec, registry)
    ctx.feature_folder = out / "features"
    ctx.decoded_folder = decoded_folder(spec, out)
    if shard is not None and not 0 <= shard < ctx.shard_count:
        raise FewtransError(f"--shard {shard} is outside 0..{ctx.shard_count - 1}")
    if executor not in ("inline", "process", "ray"):
        raise FewtransError(f"unknown executor {executor!r}; use inline, process or ray")
    if workers < 1:
        raise FewtransError(f"--workers must be at least 1, got {workers}")
    # Checked before a results folder is made: workers must be able to load these plugins.
    plugins = worker_plugins(registry) if executor != "inline" else None
    indices = [shard] if shard is not None else list(range(ctx.shard_count))
    # The run identity loads the model and adapter: a broken plugin fails here, before a
    # results folder (and its locks) is created for nothing.
    try:
        ctx.run_id()
        with claim_shards(ctx, out, indices) as claim:
            _execute(ctx, spec, out, claim.todo, executor, workers, progress, plugins)
    finally:
        ctx.close()
    todo, done = claim.todo, claim.done
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


@dataclass
class _PoolJob:
    """The shards ``todo`` of a run for a process pool or Ray, with what workers load."""

    spec: RunSpec
    out: Path
    todo: list[int]
    workers: int
    bar: Any
    ctx: RunContext
    plugins: PluginSelection


def _execute(
    ctx: RunContext,
    spec: RunSpec,
    out: Path,
    todo: list[int],
    executor: str,
    workers: int,
    progress: bool,
    plugins: PluginSelection | None,
) -> None:
    """Compute the shards ``todo`` (their locks are held by the caller).

    ``plugins`` are what process and Ray workers load (required for those executors).
    """
    from tqdm import tqdm

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
        if executor == "inline" or len(todo) <= 1 or plugins is None:
            for index in todo:
                run_shard(ctx, out, index, bar.update)
        elif executor == "process":
            _run_process_pool(_PoolJob(spec, out, todo, workers, bar, ctx, plugins))
        else:
            _run_ray(_PoolJob(spec, out, todo, workers, bar, ctx, plugins))
    finally:
        bar.close()


def _run_process_pool(job: _PoolJob) -> None:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    from fewtrans_board.runner.placement import gpu_count, spreads_over_gpus
    from fewtrans_board.runner.worker.guard import stop_pool

    spec = job.spec
    threads = resolved_threads(spec)
    environment = job.ctx.numeric_environment()
    context = multiprocessing.get_context("spawn")
    gpus = gpu_count() if spreads_over_gpus(spec.device) else 0
    pool = ProcessPoolExecutor(
        max_workers=job.workers,
        mp_context=context,
        initializer=_init_pool_worker,
        initargs=(os.getpid(), context.Value("i", 0), spec.device, gpus),
    )
    arguments = (spec.to_dict(), str(job.out))
    try:
        futures = {
            pool.submit(_worker_run_shard, *arguments, i, threads, environment, job.plugins): i
            for i in job.todo
        }
        for future in as_completed(futures):
            future.result()
            job.bar.update(len(job.ctx.shard_episodes(futures[future])))
    except BaseException:
        stop_pool(pool)  # an error or Ctrl-C: no worker goes on through the queue
        raise
    pool.shutdown(wait=True)


def _run_ray(job: _PoolJob) -> None:
    try:
        import ray
    except ImportError as exc:
        raise FewtransError(
            "the ray executor needs Ray: pip install 'fewtrans-board[ray]'"
        ) from exc
    started_here = not ray.is_initialized()
    if started_here:
        ray.init(num_cpus=job.workers, include_dashboard=False, log_to_driver=False)
    try:
        _run_ray_actors(ray, job)
    finally:
        if started_here:
            ray.shutdown()


def _run_ray_actors(ray: Any, job: _PoolJob) -> None:
    """One actor per worker (per GPU for ``--device cuda``), each keeping its loaded model."""
    from ray.util import ActorPool

    from fewtrans_board.runner.placement import ray_device, spreads_over_gpus

    # The actor class below captures only these picklable values, never the job's bar or ctx.
    spec, out, plugins, workers = job.spec, str(job.out), job.plugins, job.workers
    on_gpus = spec.device.startswith("cuda")
    if on_gpus and spreads_over_gpus(spec.device) and workers <= 1:
        workers = max(1, int(ray.cluster_resources().get("GPU", 1)))

    threads, environment = resolved_threads(spec), job.ctx.numeric_environment()

    class ShardWorker:
        def __init__(self) -> None:
            self.device = ray_device(
                spec.device, ray.get_gpu_ids(), os.environ.get("CUDA_VISIBLE_DEVICES")
            )

        def run(self, index: int) -> tuple[int, str]:
            path = _worker_run_shard(
                spec.to_dict(), out, index, threads, environment, plugins, self.device
            )
            return index, path

    actor = ray.remote(num_cpus=1, num_gpus=1 if on_gpus else 0)(ShardWorker)
    actors = [actor.remote() for _ in range(min(workers, len(job.todo)))]
    try:
        for index, _ in ActorPool(actors).map_unordered(lambda a, i: a.run.remote(i), job.todo):
            job.bar.update(len(job.ctx.shard_episodes(index)))
    except BaseException:
        for running in actors:  # an error or Ctrl-C: no shard goes on computing
            ray.kill(running)
        raise
