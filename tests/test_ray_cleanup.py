"""Processes a killed Ray driver left alive are ended on the next start, and only those.

A real ``kill -9`` of a Ray run takes a Ray cluster start (tens of seconds); these tests
stand a plain ``sleep`` process in for a leftover ``ray::DashboardAgent`` and check the
rule: ended when its recording driver is dead, left alone when the driver still runs or
when the process id now belongs to another process (another start time).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

psutil = pytest.importorskip("psutil")

from fewtrans_board.runner.ray_cleanup import reap_stale, record_cluster, record_path  # noqa: E402


@pytest.fixture
def leftover() -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()


def _dead_driver() -> dict[str, float]:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    started = psutil.Process(gone.pid).create_time()
    gone.wait()
    return {"pid": gone.pid, "started": started}


def _write(
    out: Path, driver: dict[str, float], process: subprocess.Popen[bytes], **edit: float
) -> None:
    entry = {"pid": process.pid, "started": psutil.Process(process.pid).create_time(), **edit}
    record_path(out).parent.mkdir(parents=True, exist_ok=True)
    record_path(out).write_text(json.dumps({"driver": driver, "processes": [entry]}))


@pytest.mark.slow
def test_leftovers_of_a_dead_driver_are_ended(
    tmp_path: Path, leftover: subprocess.Popen[bytes]
) -> None:
    _write(tmp_path, _dead_driver(), leftover)
    assert reap_stale(tmp_path, timeout_s=10) == [leftover.pid]
    assert leftover.wait(timeout=10) is not None
    assert not record_path(tmp_path).exists()


@pytest.mark.slow
def test_a_running_driver_or_a_reused_id_is_left_alone(
    tmp_path: Path, leftover: subprocess.Popen[bytes]
) -> None:
    me = psutil.Process(os.getpid())
    _write(tmp_path, {"pid": me.pid, "started": me.create_time()}, leftover)
    assert reap_stale(tmp_path) == [] and leftover.poll() is None  # its driver still runs
    _write(tmp_path, _dead_driver(), leftover, started=1.0)  # the id now names another process
    assert reap_stale(tmp_path) == [] and leftover.poll() is None


@pytest.mark.slow
def test_the_driver_records_the_processes_it_started(
    tmp_path: Path, leftover: subprocess.Popen[bytes]
) -> None:
    assert record_cluster(tmp_path) >= 1
    record = json.loads(record_path(tmp_path).read_text())
    record_path(tmp_path).unlink()
    assert record["driver"]["pid"] == os.getpid()
    assert leftover.pid in [p["pid"] for p in record["processes"]]
