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
from fewtrans_board.registry.lookup import Registry
from fewtrans_board.registry.manager import PluginSelection
from fewtrans_board.results.shards import write_shard
from fewtrans_board.runner.plan import RunPlan, plan_run
from fewtrans_board.runner.provenance import environment_differences, shard_provenance
from fewtrans_board.runner.run_folder import FolderRecord, claim_shards, shard_path, unwritable
from fewtrans_board.runner.session import RunSession
from fewtrans_board.runner.spec import RunSpec, resolved_threads
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
    session: RunSession, out: Path, index: int, progress: ProgressCallback | None = None
) -> Path:
    """Evaluate one shard in this process and write it atomically."""
    started = time.time()
    plan = session.plan
    episodes = plan.shard_episodes(index)
    rows, cost = _compute_shard(session, episodes, progress)
    shard = {
        "index": index,
        "count": plan.shard_count,
        "episodes": [episodes[0].index, episodes[-1].index] if episodes else [],
        "seconds": round(time.time() - started, 3),
        **cost,
    }
    records = {
        key: session.adapter_records.pop(key)
        for key in [str(e.index) for e in episodes]
        if key in session.adapter_records
    }
    record = shard_provenance(session.provenance(), shard, records)
    path = shard_path(out, index, plan.shard_count)
    try:
        write_shard(path, rows, record.to_json())
    except OSError as exc:
        raise unwritable(out, exc) from exc
    return path


def _compute_shard(
    session: RunSession, episodes: list[Any], progress: ProgressCallback | None
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The rows of ``episodes``, and what computing them cost (peak memory, trainables)."""
    adapter = session.inline_adapter()
    rows: list[dict[str, Any]] = []
    # Peak memory of the fitting (FewTrans Table IX): see runner/worker/memory.py for what it is.
    # Trainable parameters per configuration (display only): see runner/worker/trainable.py.
    session.trainable = TrainableTally(len(session.plan.grid))
    with PeakMemory(session.device, in_process=session.inline) as memory:
        session.memory = memory
        try:
            for episode in episodes:
                rows.extend(session.episode_rows(episode, adapter))
                if progress is not None:
                    progress(1)
        finally:
            session.memory = None
    trainable, session.trainable = session.trainable.record(), None
    cost: dict[str, Any] = {}
    peak = memory.record()
    if peak is not None:
        cost["peak_memory"] = peak
    if trainable is not None:
        cost["trainable_parameters"] = trainable
    return rows, cost


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
    """Process-pool / Ray entry point: plan the run in the worker and run one shard.

    The worker loads the caller's plugins (``plugins``), never every installed one, and
    keeps its session (its loaded model) for the next shard of the same run.
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
    session = _WORKER_SESSIONS.get(key)
    if session is None:
        registry = Registry.from_plugin_manager(plugin_manager_for(plugins))
        session = RunSession(
            plan_run(spec, registry, check_items=False),
            device=device,
            feature_folder=Path(out) / "features",
            decoded_folder=decoded_folder(spec, Path(out)),
        )
        differences = environment_differences(environment, session.numeric_environment())
        if differences:
            raise FewtransError(
                f"worker on {socket.gethostname()} has another numeric environment than the "
                f"run ({'; '.join(differences)}); give every worker the same libraries and "
                "hardware"
            )
        _WORKER_SESSIONS[key] = session
    return str(run_shard(session, Path(out), index))


_WORKER_SESSIONS: dict[tuple[str, str, str], RunSession] = {}
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
    """Plan a run (:func:`~fewtrans_board.runner.plan.plan_run`) and evaluate it into ``out``.

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
    return run_plan(
        plan_run(spec, registry),
        out,
        shard=shard,
        executor=executor,
        workers=workers,
        progress=progress,
    )


def run_plan(
    plan: RunPlan,
    out: Path,
    *,
    shard: int | None = None,
    executor: str = "inline",
    workers: int = 1,
    progress: bool = True,
) -> RunReport:
    """Evaluate a planned run into ``out``, skipping finished shards.

    Arguments and errors as :func:`run_evaluation`'s.
    """
    import torch

    started = time.time()
    previous_threads = torch.get_num_threads()
    # Every executor computes with the same per-worker thread count (part of the identity).
    torch.set_num_threads(resolved_threads(plan.spec))
    try:
        how = _Execution(shard, executor, workers, progress and sys.stderr.isatty())
        return _run(plan, out, how, started)
    finally:
        torch.set_num_threads(previous_threads)


@dataclass(frozen=True)
class _Execution:
    """How to compute a run: which shard (``None``: all), executor, workers, progress."""

    shard: int | None
    executor: str
    workers: int
    progress: bool

    def check(self, plan: RunPlan) -> None:
        """Refuse a shard outside the plan, an unknown executor or no workers."""
        if self.shard is not None and not 0 <= self.shard < plan.shard_count:
            raise FewtransError(f"--shard {self.shard} is outside 0..{plan.shard_count - 1}")
        if self.executor not in ("inline", "process", "ray"):
            raise FewtransError(f"unknown executor {self.executor!r}; use inline, process or ray")
        if self.workers < 1:
            raise FewtransError(f"--workers must be at least 1, got {self.workers}")


def _run(plan: RunPlan, out: Path, how: _Execution, started: float) -> RunReport:
    how.check(plan)
    # Checked before a results folder is made: workers must be able to load these plugins.
    plugins = worker_plugins(plan.registry) if how.executor != "inline" else None
    indices = [how.shard] if how.shard is not None else list(range(plan.shard_count))
    session = RunSession(
        plan, feature_folder=out / "features", decoded_folder=decoded_folder(plan.spec, out)
    )
    with session:
        # The run identity loads the model and adapter: a broken plugin fails here, before
        # a results folder (and its locks) is created for nothing.
        record = FolderRecord(session.run_id(), session.identity(), session.numeric_environment())
        with claim_shards(record, out, indices) as claim:
            job = _Job(session, out, claim.todo, how, plugins, record.environment)
            _execute(job)
    return RunReport(
        out=out,
        run_id=record.run_id,
        shards_total=plan.shard_count,
        shards_run=claim.todo,
        shards_skipped=claim.done,
        episodes=sum(len(plan.shard_episodes(i)) for i in indices),
        configurations=len(plan.grid),
        seconds=time.time() - started,
    )


@dataclass
class _Job:
    """The shards ``todo`` of a run (their locks held), how to compute them, what workers load.

    ``plugins`` are what process and Ray workers load (required for those executors);
    ``environment`` is the run's numeric environment, which every worker must share.
    """

    session: RunSession
    out: Path
    todo: list[int]
    how: _Execution
    plugins: PluginSelection | None
    environment: dict[str, Any]
    bar: Any = None

    @property
    def plan(self) -> RunPlan:
        """The run."""
        return self.session.plan

    def pool_plugins(self) -> PluginSelection:
        """The plugins process and Ray workers load (checked when the job was made)."""
        assert self.plugins is not None
        return self.plugins

    def episodes(self, index: int) -> int:
        """How many episodes shard ``index`` holds (what the bar advances by)."""
        return len(self.plan.shard_episodes(index))


def _execute(job: _Job) -> None:
    """Compute the shards ``job.todo``, in this process or in a process pool or Ray."""
    from tqdm import tqdm

    plan, session, todo = job.plan, job.session, job.todo
    if todo:
        session.prefetch_features(
            [ep for i in todo for ep in plan.shard_episodes(i)], job.how.progress
        )
    total = sum(job.episodes(i) for i in todo)
    job.bar = tqdm(
        total=total,
        desc=f"{plan.spec.adapter} x {len(plan.grid)} configs on {plan.manifest.dataset}",
        unit="episode",
        disable=not job.how.progress or total == 0,
    )
    try:
        if job.how.executor == "inline" or len(todo) <= 1 or job.plugins is None:
            for index in todo:
                run_shard(session, job.out, index, job.bar.update)
        elif job.how.executor == "process":
            _run_process_pool(job)
        else:
            _run_ray(job)
    finally:
        job.bar.close()


def _run_process_pool(job: _Job) -> None:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    from fewtrans_board.runner.placement import gpu_count, spreads_over_gpus
    from fewtrans_board.runner.worker.guard import stop_pool

    spec, plugins, environment = job.plan.spec, job.pool_plugins(), job.environment
    threads = resolved_threads(spec)
    context = multiprocessing.get_context("spawn")
    gpus = gpu_count() if spreads_over_gpus(spec.device) else 0
    pool = ProcessPoolExecutor(
        max_workers=job.how.workers,
        mp_context=context,
        initializer=_init_pool_worker,
        initargs=(os.getpid(), context.Value("i", 0), spec.device, gpus),
    )
    arguments = (spec.to_dict(), str(job.out))
    try:
        futures = {
            pool.submit(_worker_run_shard, *arguments, i, threads, environment, plugins): i
            for i in job.todo
        }
        for future in as_completed(futures):
            future.result()
            job.bar.update(job.episodes(futures[future]))
    except BaseException:
        stop_pool(pool)  # an error or Ctrl-C: no worker goes on through the queue
        raise
    pool.shutdown(wait=True)


def _run_ray(job: _Job) -> None:
    try:
        import ray
    except ImportError as exc:
        raise FewtransError(
            "the ray executor needs Ray: pip install 'fewtrans-board[ray]'"
        ) from exc
    started_here = not ray.is_initialized()
    if started_here:
        ray.init(num_cpus=job.how.workers, include_dashboard=False, log_to_driver=False)
    try:
        _run_ray_actors(ray, job)
    finally:
        if started_here:
            ray.shutdown()


def _run_ray_actors(ray: Any, job: _Job) -> None:
    """One actor per worker (per GPU for ``--device cuda``), each keeping its loaded model."""
    from ray.util import ActorPool

    from fewtrans_board.runner.placement import ray_device, spreads_over_gpus

    # The actor class below captures only these picklable values, never the job's bar or
    # session.
    spec, out, plugins, workers = job.plan.spec, str(job.out), job.pool_plugins(), job.how.workers
    on_gpus = spec.device.startswith("cuda")
    if on_gpus and spreads_over_gpus(spec.device) and workers <= 1:
        workers = max(1, int(ray.cluster_resources().get("GPU", 1)))

    threads, environment = resolved_threads(spec), job.environment

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
            job.bar.update(job.episodes(index))
    except BaseException:
        for running in actors:  # an error or Ctrl-C: no shard goes on computing
            ray.kill(running)
        raise
