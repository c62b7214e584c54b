"""Fault injection on runs: kill -9, concurrent runs, locks, read-only folders, identity.

Each case ends in correct results (row-for-row equal to an undisturbed run) or a one-line
error; never silently changed numbers, never an orphaned worker.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from fewtrans_board.core.errors import FewtransError
from fewtrans_board.registry.lookup import Registry
from fewtrans_board.registry.manager import get_plugin_manager
from fewtrans_board.results.load import load_run
from fewtrans_board.results.shards import read_shard
from fewtrans_board.runner.locks import FileLock
from fewtrans_board.runner.run import run_evaluation
from fewtrans_board.runner.spec import RunSpec
from tests.test_runner import DIGITS, evaluate_args

# A fine-tuning run of four one-episode shards (the whole reference grid per episode).
# Where the kill -9 lands does not depend on how long a shard takes: STOP_HOOK holds the
# run at the chosen point until it is killed, so one epoch is enough.
SLOW_RUN = (
    "finetune",
    *("--limit", "4", "--shards", "4", "--config", "epochs=1"),
    *("--hpe", "fewtrans-reference"),
)
# Two runs started together should overlap: three epochs keep each shard busy for seconds.
CONCURRENT_RUN = (
    "finetune",
    *("--limit", "2", "--shards", "2", "--config", "epochs=3"),
    *("--hpe", "fewtrans-reference"),
)
FAST_RUN = ("mean-centroid", "--limit", "4", "--shards", "2")
KILL_ROUNDS = int(os.environ.get("FEWTRANS_KILL_ROUNDS", "1"))


def command(out: Path, run: tuple[str, ...], *extra: str) -> list[str]:
    return [sys.executable, "-m", "fewtrans_board", *evaluate_args(out, *run, *extra)]


def rows(out: Path) -> list[dict[str, object]]:
    table = load_run(out).table.drop(["seconds"]).to_pylist()
    return sorted(table, key=lambda r: (r["episode"], r["config_index"], r["aggregation"]))


def temp_files(out: Path) -> list[Path]:
    return [p for p in out.rglob(".*.tmp")]


def alive(processes: list[psutil.Process]) -> list[psutil.Process]:
    """Processes still running (zombies waiting for a reaper count as gone)."""
    running = []
    for process in processes:
        try:
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                running.append(process)
        except psutil.NoSuchProcess:
            pass
    return running


def wait_gone(processes: list[psutil.Process], timeout_s: float) -> list[psutil.Process]:
    deadline = time.monotonic() + timeout_s
    while alive(processes) and time.monotonic() < deadline:
        time.sleep(0.1)
    return alive(processes)


@pytest.fixture(scope="module")
def undisturbed(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, object]]:
    """Rows of the slow run computed without interruption (inline, default threads)."""
    from click.testing import CliRunner

    from fewtrans_board.cli import make_cli

    out = tmp_path_factory.mktemp("undisturbed") / "run"
    result = CliRunner().invoke(
        make_cli(get_plugin_manager(entry_points=False)), evaluate_args(out, *SLOW_RUN)
    )
    assert result.exit_code == 0, result.output
    return rows(out)


# --- kill -9 ---------------------------------------------------------------------------


STOP_HOOK = """\
\"\"\"The CLI, made to stop for good before it writes a shard once STOP_AFTER shards exist.

Spawned pool workers run this file as __mp_main__, so the patch applies in them too.
\"\"\"
import os
import time
from pathlib import Path

import fewtrans_board.runner.run as run_module

_write = run_module.write_shard
_after = int(os.environ["FEWTRANS_TEST_STOP_AFTER"])
_marker = Path(os.environ["FEWTRANS_TEST_STOP_MARKER"])


def _write_or_stop(path, *args, **kwargs):
    if len(list(Path(path).parent.glob("shard-*.parquet"))) >= _after:
        _marker.write_text(str(os.getpid()))
        while True:  # a shard computed but never written, until kill -9
            time.sleep(60)
    return _write(path, *args, **kwargs)


run_module.write_shard = _write_or_stop

if __name__ == "__main__":
    from fewtrans_board.cli import main

    main()
"""


def wait_until(condition, process: subprocess.Popen[bytes], what: str, timeout_s: float = 300.0):  # type: ignore[no-untyped-def]
    """Poll ``condition`` until it holds; fail naming ``what`` if the run exits or time runs out."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert process.poll() is None, f"the run exited ({process.returncode}) before {what}"
        assert time.monotonic() < deadline, f"no {what} within {timeout_s:.0f} s"
        time.sleep(0.05)


@pytest.mark.slow
@pytest.mark.parametrize("executor", ["inline", "process"])
@pytest.mark.parametrize("round_", range(KILL_ROUNDS))
def test_kill_9_at_a_random_point_then_resume(
    tmp_path: Path, undisturbed: list[dict[str, object]], executor: str, round_: int
) -> None:
    """Killed with 0-2 shards written and a computed shard held back from its write.

    No sleep decides where the kill lands: the run (through STOP_HOOK) signals that it
    reached the chosen point and then cannot finish, so it is certainly alive when killed.
    """
    rng = random.Random(f"{executor}-{round_}")
    out = tmp_path / "killed"
    extra = ("--executor", "process", "--workers", "2") if executor == "process" else ()
    hook, marker = tmp_path / "stop_hook.py", tmp_path / "stopped"
    hook.write_text(STOP_HOOK)
    finished_before_kill = rng.choice([0, 1, 2])
    env = {
        **os.environ,
        "FEWTRANS_TEST_STOP_AFTER": str(finished_before_kill),
        "FEWTRANS_TEST_STOP_MARKER": str(marker),
    }
    hooked = [sys.executable, str(hook), *command(out, SLOW_RUN, *extra)[3:]]
    process = subprocess.Popen(
        hooked, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env
    )
    try:
        parent = psutil.Process(process.pid)
        wait_until(marker.exists, process, f"it stopped after {finished_before_kill} shards")
        if executor == "process":  # both workers exist and stay: the run can no longer finish

            def workers() -> list[psutil.Process]:
                return [c for c in parent.children() if "spawn_main" in " ".join(c.cmdline())]

            wait_until(lambda: len(workers()) >= 2, process, "two pool workers")
        descendants = parent.children(recursive=True)
        assert process.poll() is None, "the hooked run cannot finish, yet it exited"
        assert len(list((out / "shards").glob("shard-*.parquet"))) >= finished_before_kill
        os.kill(process.pid, signal.SIGKILL)
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()
    assert not wait_gone(descendants, 20.0), "workers outlived their killed parent"
    for path in (out / "shards").glob("shard-*.parquet"):
        read_shard(path)  # whatever is visible is complete and verified
    resumed = subprocess.run(command(out, SLOW_RUN, *extra), capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    assert not temp_files(out)
    assert rows(out) == undisturbed


@pytest.mark.slow
def test_worker_dies_with_its_parent_through_the_watchdog(tmp_path: Path) -> None:
    """The portable fallback: a watchdog thread notices the parent is gone (no prctl)."""
    child = (
        "import os, threading, time\n"
        "from fewtrans_board.runner.worker.guard import _watch_parent\n"
        "threading.Thread(target=_watch_parent, args=(os.getppid(),), daemon=True).start()\n"
        "print('ready', flush=True)\n"
        "time.sleep(120)\n"
    )
    parent = (
        "import subprocess, sys, time\n"
        f"p = subprocess.Popen([sys.executable, '-c', {child!r}])\n"
        "print(p.pid, flush=True)\n"
        "time.sleep(120)\n"
    )
    launcher = subprocess.Popen([sys.executable, "-c", parent], stdout=subprocess.PIPE, text=True)
    assert launcher.stdout is not None
    # Both write to the pipe: the launcher the worker's pid, the worker "ready" once its
    # watchdog has read the parent's pid (in whichever order they come).
    lines = sorted(launcher.stdout.readline().strip() for _ in range(2))
    assert lines[1] == "ready" and lines[0].isdigit(), lines
    worker = psutil.Process(int(lines[0]))
    os.kill(launcher.pid, signal.SIGKILL)
    launcher.wait()
    assert not wait_gone([worker], 10.0)


@pytest.mark.slow
def test_stop_pool_cancels_the_queue_and_ends_workers() -> None:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from fewtrans_board.runner.worker.guard import guard_worker, stop_pool

    pool = ProcessPoolExecutor(
        2,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=guard_worker,
        initargs=(os.getpid(),),
    )
    futures = [pool.submit(time.sleep, 120) for _ in range(6)]
    deadline = time.monotonic() + 60
    while not any(f.running() for f in futures) and time.monotonic() < deadline:
        time.sleep(0.05)
    workers = [psutil.Process(pid) for pid in pool._processes]
    stop_pool(pool)
    assert not wait_gone(workers, 10.0)
    # queued shards are cancelled; those already handed to a worker fail: none completes
    assert all(f.cancelled() or f.exception(timeout=10) is not None for f in futures)
    assert sum(f.cancelled() for f in futures) >= 2


# --- concurrent runs and locks ---------------------------------------------------------


@pytest.mark.slow
def test_two_identical_runs_started_together_compute_each_shard_once(tmp_path: Path) -> None:
    out = tmp_path / "shared"
    processes = [
        subprocess.Popen(
            [*command(out, CONCURRENT_RUN), "--json"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=600) for p in processes]
    computed: list[int] = []
    for process, (stdout, stderr) in zip(processes, outputs, strict=True):
        if process.returncode == 0:
            computed += json.loads(stdout)["report"]["shards_run"]
        else:
            other = next(p for p in processes if p is not process)
            assert process.returncode == 1 and "Traceback" not in stderr, stderr
            assert stderr.strip().count("\n") == 0 and "is in use" in stderr
            assert f"PID {other.pid}" in stderr  # the refusal names the holder
    assert sorted(computed) == [0, 1]  # every shard computed, none twice
    assert not temp_files(out)
    assert len(load_run(out).shards_present) == 2


@pytest.mark.slow
def test_a_held_shard_lock_refuses_with_the_holder_pid(tmp_path: Path, invoke) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "locked"
    lock = FileLock(out / ".locks" / "shard-00001-of-00002.lock", "a colleague's run")
    assert lock.acquire()
    try:
        pm = get_plugin_manager(entry_points=False)
        result = invoke(evaluate_args(out, *FAST_RUN), pm=pm)
        assert result.exit_code == 1
        assert f"PID {os.getpid()}" in result.output and "shard(s) 1" in result.output
        errors = [line for line in result.output.splitlines() if not line.startswith("Warning: ")]
        assert "a colleague's run" in result.output and len(errors) == 1
        assert not (out / "shards").exists()  # the refused run computed nothing
        shard_0 = invoke(evaluate_args(out, *FAST_RUN[:-2], "--shard", "0/2"), pm=pm)
        assert shard_0.exit_code == 0, shard_0.output  # another shard is free to compute
    finally:
        lock.release()
    assert invoke(evaluate_args(out, *FAST_RUN), pm=pm).exit_code == 0


@pytest.mark.slow
def test_stale_temp_files_of_dead_writers_are_removed_only_under_the_lock(
    tmp_path: Path, invoke
) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "stale"
    pm = get_plugin_manager(entry_points=False)
    assert invoke(evaluate_args(out, *FAST_RUN[:-2], "--shard", "0/2"), pm=pm).exit_code == 0
    shards = out / "shards"
    dead = shards / ".shard-00001-of-00002.parquet.999999.abc.tmp"
    dead.write_bytes(b"half a shard")
    other = shards / ".shard-00000-of-00002.parquet.999999.def.tmp"
    other.write_bytes(b"not ours to judge")  # shard 0 is finished: nobody locks it
    dead_features = out / "features" / ".0123456789abcdef0123.npz.999999.ghi.tmp"
    dead_marker = out / ".run.json.999999.jkl.tmp"
    dead_features.write_bytes(b"half a cache entry")
    dead_marker.write_bytes(b"half a run.json")
    assert invoke(evaluate_args(out, *FAST_RUN), pm=pm).exit_code == 0
    assert not dead.exists() and other.exists()
    assert not dead_features.exists() and not dead_marker.exists()


# --- corrupt files found by a resume -----------------------------------------------------


@pytest.fixture(scope="module")
def fast_reference(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, list[dict[str, object]]]:
    from click.testing import CliRunner

    from fewtrans_board.cli import make_cli

    out = tmp_path_factory.mktemp("fast") / "run"
    result = CliRunner().invoke(
        make_cli(get_plugin_manager(entry_points=False)), evaluate_args(out, *FAST_RUN)
    )
    assert result.exit_code == 0, result.output
    return out, rows(out)


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["edited-accuracy", "truncated"])
def test_resume_sets_a_corrupt_shard_aside_and_recomputes_it(
    fast_reference: tuple[Path, list[dict[str, object]]],
    tmp_path: Path,
    invoke,
    caplog: pytest.LogCaptureFixture,
    damage: str,
) -> None:  # type: ignore[no-untyped-def]
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tests.faults import rewrite_column

    out = tmp_path / "run"
    shutil.copytree(fast_reference[0], out)
    shard = out / "shards" / "shard-00001-of-00002.parquet"
    if damage == "truncated":
        shard.write_bytes(shard.read_bytes()[:-100])
    else:  # what a flipped bit in the accuracy column does, metadata and checksum kept
        accuracy = pq.read_table(shard).column("accuracy").to_pylist()
        accuracy[0] -= 0.01
        rewrite_column(shard, "accuracy", pa.array(accuracy), shard)
    pm = get_plugin_manager(entry_points=False)
    summary = invoke(["results", "summary", str(out)], pm=pm)
    assert summary.exit_code == 1 and summary.output.count("\n") == 1
    assert shard.name in summary.output and "fewtrans-board evaluate" in summary.output
    result = invoke([*evaluate_args(out, *FAST_RUN), "--json"], pm=pm)
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["report"]["shards_run"] == [1]
    assert list((out / "shards").glob("shard-00001-of-00002.parquet.corrupt-*"))
    assert any("is corrupt" in r.getMessage() for r in caplog.records)
    assert rows(out) == fast_reference[1]


def shuffle_feature_rows(entry: Path) -> None:
    import io

    import numpy as np

    with np.load(io.BytesIO(entry.read_bytes())) as archive:
        arrays = {name: archive[name] for name in archive.files}
    arrays["features"] = arrays["features"][::-1].copy()
    with entry.open("wb") as handle:
        np.savez(handle, **arrays)


@pytest.mark.slow
@pytest.mark.parametrize(
    "damage",
    [
        shuffle_feature_rows,
        lambda p: p.write_bytes(p.read_bytes()[:1000]),
        lambda p: p.write_bytes(b"not an npz"),
        lambda p: p.write_bytes(b""),
    ],
    ids=["shuffled-rows", "truncated", "garbage", "empty"],
)
def test_damaged_feature_cache_is_recomputed(
    fast_reference: tuple[Path, list[dict[str, object]]],
    tmp_path: Path,
    invoke,
    caplog: pytest.LogCaptureFixture,
    damage: object,
) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "run"
    shutil.copytree(fast_reference[0], out)
    shutil.rmtree(out / "shards")
    (entry,) = (out / "features").glob("*.npz")
    damage(entry)  # type: ignore[operator]
    result = invoke(evaluate_args(out, *FAST_RUN), pm=get_plugin_manager(entry_points=False))
    assert result.exit_code == 0, result.output
    assert any("feature cache" in r.getMessage() for r in caplog.records)
    assert rows(out) == fast_reference[1]  # same accuracy as with the intact cache


# --- read-only output, bad counts ----------------------------------------------------------


@pytest.fixture
def read_only_folder() -> Iterator[tuple[Path, list[str]]]:
    """A folder this test's subprocesses cannot write, and the command prefix that ensures it.

    As an ordinary user a ``chmod 555`` does it; as root (which ignores modes) the command
    runs in a user + mount namespace where the folder is bind-mounted read-only.
    """
    folder = Path(tempfile.mkdtemp(prefix="fewtrans-ro-"))
    prefix: list[str] = []
    if os.geteuid() == 0:
        script = 'mount --bind "$0" "$0" && mount -o remount,ro,bind "$0" "$0" && exec "$@"'
        prefix = ["unshare", "-rm", "sh", "-c", script, str(folder)]
        probe = subprocess.run([*prefix, "true"], capture_output=True)
        if shutil.which("unshare") is None or probe.returncode != 0:
            shutil.rmtree(folder)
            pytest.skip("root without user namespaces: no way to make a folder read-only")
    else:
        folder.chmod(0o555)
    try:
        yield folder, prefix
    finally:
        folder.chmod(0o755)
        shutil.rmtree(folder)


@pytest.mark.slow
@pytest.mark.parametrize("where", ["folder", "inside"])
def test_read_only_out_gives_a_one_line_error(
    read_only_folder: tuple[Path, list[str]], where: str
) -> None:
    folder, prefix = read_only_folder
    out = folder if where == "folder" else folder / "run"
    result = subprocess.run(
        [*prefix, *command(out, ("mean-centroid", "--limit", "2"))], capture_output=True, text=True
    )
    # Refused while the options are parsed (a usage error), before anything runs.
    assert result.returncode == 2, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error: ")]
    assert "Traceback" not in result.stderr and len(errors) == 1
    assert "--out" in errors[0] and "cannot write to" in errors[0] and "writable" in errors[0]


@pytest.mark.parametrize("option", ["--shards", "--workers", "--threads"])
def test_zero_counts_are_refused_not_replaced(tmp_path: Path, invoke, option: str) -> None:  # type: ignore[no-untyped-def]
    result = invoke(evaluate_args(tmp_path / "o", "mean-centroid", option, "0"))
    assert result.exit_code == 2 and "0 is not in the range x>=1" in result.output
    assert not (tmp_path / "o").exists()


def test_zero_shards_refused_by_the_library(tmp_path: Path) -> None:
    spec = RunSpec(model="demo-cnn.digits", adapter="mean-centroid", manifest=str(DIGITS), shards=0)
    registry = Registry.from_plugin_manager(get_plugin_manager(entry_points=False))
    with pytest.raises(FewtransError, match="--shards must be between 1 and 600, got 0"):
        run_evaluation(spec, registry, tmp_path / "o", progress=False)


# --- run identity and numeric environment --------------------------------------------------


@pytest.mark.slow
def test_threads_are_part_of_the_identity(
    fast_reference: tuple[Path, list[dict[str, object]]], tmp_path: Path, invoke
) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "run"
    shutil.copytree(fast_reference[0], out)
    record = json.loads((out / "run.json").read_text())
    assert record["identity"]["threads"] == 1  # the default, whatever the executor
    result = invoke(
        evaluate_args(out, *FAST_RUN, "--threads", "2"), pm=get_plugin_manager(entry_points=False)
    )
    assert result.exit_code == 1 and "different run (differs in: threads)" in result.output


@pytest.mark.slow
def test_resume_in_another_numeric_environment_is_refused(
    fast_reference: tuple[Path, list[dict[str, object]]], tmp_path: Path, invoke
) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "run"
    shutil.copytree(fast_reference[0], out)
    (out / "shards" / "shard-00001-of-00002.parquet").unlink()
    record = json.loads((out / "run.json").read_text())
    stored_torch = record["environment"]["torch"]
    record["environment"]["torch"] = "1.0.0"
    (out / "run.json").write_text(json.dumps(record))
    result = invoke(evaluate_args(out, *FAST_RUN), pm=get_plugin_manager(entry_points=False))
    assert result.exit_code == 1 and "another numeric environment" in result.output
    assert f"torch: '1.0.0' -> '{stored_torch}'" in result.output
    assert not (out / "shards" / "shard-00001-of-00002.parquet").exists()


def test_numeric_environment_of_gpu_runs_names_gpu_cuda_and_cudnn(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import torch

    from fewtrans_board.runner.provenance import environment_differences, numeric_environment

    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H200")
    monkeypatch.setattr(torch.backends.cudnn, "version", lambda: 91002)
    gpu = numeric_environment("cuda:0", {"fewtrans-board": "0.1.0"})
    assert gpu["gpu"] == "NVIDIA H200" and gpu["cudnn"] == 91002 and "cpu" not in gpu
    cpu = numeric_environment("cpu", {"fewtrans-board": "0.1.0"})
    assert cpu["cpu"] and "gpu" not in cpu and cpu["torch"] == torch.__version__
    changed = environment_differences(cpu, {**cpu, "code": {"fewtrans-board": "0.2.0"}})
    assert changed == ["code: {'fewtrans-board': '0.1.0'} -> {'fewtrans-board': '0.2.0'}"]
