"""Run an evaluation into a results folder: shards, resume, executors, progress.

A shard file is written atomically when all its episodes and configurations are done, so a
crash or ``kill -9`` loses at most the shards in flight; running the same command again
skips finished shards (after verifying their checksums) and produces identical results.
The folder's layout (``run.json``, locks, shards) is :mod:`fewtrans_board.runner.run_folder`'s;
``OUT/features/`` holds the frozen-feature cache, reused on resume.
"""

from __future__ import annotations

import os
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
    cost = {"peak_memory": memory.record(), "trainable_parameters": trainable}
    return rows, {key: value for key, value in cost.items() if value is not None}


def decoded_folder(spec: RunSpec, out: Path) -> Path:
    """Where the run's decoded-image files live (``--image-cache``, else ``OUT/decoded``)."""
    return Path(spec.image_cache) if spec.image_cache else out / "decoded"


def feature_folder(spec: RunSpec, out: Path) -> Path:
    """Where the run's frozen features live (``--feature-cache-dir``, else ``OUT/features``)."""
    return Path(spec.feature_cache_dir) if spec.feature_cache_dir else Path(out) / "features"


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

    Loads the caller's ``plugins`` only and keeps the session (its model) for the next shard.
    Refuses a numeric environment other than the run's (a Ray node with another GPU or
    library version would otherwise mix numbers silently).
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
            feature_folder=feature_folder(spec, Path(out)),
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
        progress: show progress on stderr: a bar with ETA on a terminal, else a line
            with rate and time left every 30 s (``fewtrans_board.core.progress``; a bar
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
        how = _Execution(shard, executor, workers, progress)
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

    def check(self, plan: RunPlan) -> PluginSelection | None:
        """Refuse a bad shard, executor or worker count; the plugins process and Ray workers load.

        Checked before a results folder is made: workers must be able to load the plugins.
        """
        if self.shard is not None and not 0 <= self.shard < plan.shard_count:
            raise FewtransError(f"--shard {self.shard} is outside 0..{plan.shard_count - 1}")
        if self.executor not in ("inline", "process", "ray"):
            raise FewtransError(f"unknown executor {self.executor!r}; use inline, process or ray")
        if self.workers < 1:
            raise FewtransError(f"--workers must be at least 1, got {self.workers}")
        plugins = plan.registry.plugins
        if self.executor == "inline":
            return None
        if plugins is None:
            raise FewtransError(
                "the process and ray executors rebuild the registry in each worker, but this "
                "registry was not built from a plugin manager; build it with "
                "Registry.from_plugin_manager(get_plugin_manager(...)) or use the inline executor"
            )
        plugins.check_portable()
        return plugins


def _run(plan: RunPlan, out: Path, how: _Execution, started: float) -> RunReport:
    plugins = how.check(plan)
    indices = [how.shard] if how.shard is not None else list(range(plan.shard_count))
    session = RunSession(
        plan,
        feature_folder=feature_folder(plan.spec, out),
        decoded_folder=decoded_folder(plan.spec, out),
    )
    with session:
        # The identity loads the model and adapter: a broken plugin fails before any folder.
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
    """The shards ``todo`` of a run (locks held), how to compute them, what workers load.

    ``plugins``: what process and Ray workers load; ``environment``: the run's numeric one.
    """

    session: RunSession
    out: Path
    todo: list[int]
    how: _Execution
    plugins: PluginSelection | None
    environment: dict[str, Any]
    bar: Any = None

    def episodes(self, index: int) -> int:
        """How many episodes shard ``index`` holds (what the bar advances by)."""
        return len(self.session.plan.shard_episodes(index))


def _execute(job: _Job) -> None:
    """Compute the shards ``job.todo``, in this process or in a process pool or Ray."""
    from fewtrans_board.core.progress import progress_meter

    session, todo = job.session, job.todo
    plan = session.plan
    if todo:
        session.prefetch_features(
            [ep for i in todo for ep in plan.shard_episodes(i)], job.how.progress
        )
    total = sum(job.episodes(i) for i in todo)
    job.bar = progress_meter(
        total,
        f"{plan.spec.adapter} x {len(plan.grid)} configs on {plan.manifest.dataset}",
        "episode",
        enabled=job.how.progress,
    )
    try:
        if job.how.executor == "inline" or len(todo) <= 1 or job.plugins is None:
            for index in todo:
                run_shard(session, job.out, index, job.bar.update)
        elif job.how.executor == "process":
            _run_process_pool(job, job.plugins)
        else:
            _run_ray(job, job.plugins)
    finally:
        job.bar.close()


def _run_process_pool(job: _Job, plugins: PluginSelection) -> None:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    from fewtrans_board.runner.placement import gpu_count, spreads_over_gpus
    from fewtrans_board.runner.worker.guard import stop_pool

    spec, environment = job.session.plan.spec, job.environment
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


def _run_ray(job: _Job, plugins: PluginSelection) -> None:
    try:
        import ray
    except ImportError as exc:
        raise FewtransError(
            "the ray executor needs Ray: pip install 'fewtrans-board[ray]'"
        ) from exc
    from fewtrans_board.runner import ray_cleanup

    started_here = not ray.is_initialized()
    # RAY_ADDRESS names a cluster someone started (docs/ray-multi-node.md): join it, and
    # never record or end its processes.
    local = started_here and not os.environ.get("RAY_ADDRESS")
    if local:
        # A run killed with kill -9 left its local cluster's agents alive: end them first.
        ray_cleanup.reap_stale(Path(job.out))
        ray.init(num_cpus=job.how.workers, include_dashboard=False, log_to_driver=False)
        ray_cleanup.record_cluster(Path(job.out))
    elif started_here:
        ray.init(address=os.environ["RAY_ADDRESS"], log_to_driver=False)
    try:
        _run_ray_actors(ray, job, plugins, local)
    finally:
        if started_here:
            ray.shutdown()
        if local:
            ray_cleanup.clear_record(Path(job.out))


def _run_ray_actors(ray: Any, job: _Job, plugins: PluginSelection, record: bool = False) -> None:
    """One actor per worker (per GPU for ``--device cuda``), each keeping its loaded model.

    With ``record``, the cluster's processes are recorded again once the first shard is
    done (its workers and agents are running then: :mod:`.ray_cleanup`).
    """
    from ray.util import ActorPool

    from fewtrans_board.runner import ray_cleanup
    from fewtrans_board.runner.placement import ray_device, spreads_over_gpus

    # The actor class captures only these picklable values, never the job's bar or session.
    spec, out, workers = job.session.plan.spec, str(job.out), job.how.workers
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
            if record:
                ray_cleanup.record_cluster(Path(job.out))
                record = False
    except BaseException:
        for running in actors:  # an error or Ctrl-C: no shard goes on computing
            ray.kill(running)
        raise
