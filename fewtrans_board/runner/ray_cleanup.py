"""Ray processes a killed run left behind, found and ended on the next start.

``ray.init`` on a machine without a cluster starts a local one (GCS, raylet, and the
raylet's ``ray::DashboardAgent`` and ``ray::RuntimeEnvAgent``) as descendants of the
driver. ``ray.shutdown`` ends them; a driver killed with ``kill -9`` never calls it, and
the agents stay alive. The driver therefore records, in the run folder, the id and start
time of every process of the cluster it started; the next Ray run on that folder ends the
recorded processes that are still alive, by id, and only where the recording driver is
dead (a start time that differs means the id was reused by another process: left alone).
The record lives in the temporary folder, named by the run folder, never in the run folder
itself (whose files are the run's results).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

from fewtrans_board.core.atomic import write_bytes_atomic

LOG = logging.getLogger(__name__)
RECORD_DIR = "fewtrans-board-ray"


def record_path(out: Path) -> Path:
    """Where the cluster started for run folder ``out`` is recorded."""
    key = hashlib.sha256(str(Path(out).resolve()).encode()).hexdigest()[:20]
    return Path(tempfile.gettempdir()) / RECORD_DIR / f"{key}.json"


def _process(pid: int) -> Any | None:
    try:
        import psutil

        return psutil.Process(pid)
    except Exception:  # no psutil, or no such process
        return None


def record_cluster(out: Path) -> int:
    """Record this driver and every process it started (the local Ray cluster).

    Call after ``ray.init`` and again once the workers run (the raylet starts its agents
    and workers lazily). Returns the number of processes recorded (0 without psutil).
    """
    me = _process(os.getpid())
    if me is None:
        return 0
    processes = [
        {"pid": p.pid, "started": p.create_time(), "name": _name(p)}
        for p in me.children(recursive=True)
    ]
    record = {"driver": {"pid": me.pid, "started": me.create_time()}, "processes": processes}
    path = record_path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(path, json.dumps(record).encode())
    return len(processes)


def _name(process: Any) -> str:
    try:
        return " ".join(process.cmdline())[:200]
    except Exception:
        return ""


def _alive(entry: dict[str, Any]) -> Any | None:
    process = _process(int(entry.get("pid", -1)))
    try:
        if process is not None and abs(process.create_time() - float(entry["started"])) < 0.01:
            return process
    except Exception:
        pass
    return None


def reap_stale(out: Path, timeout_s: float = 5.0) -> list[int]:
    """End the processes a killed Ray driver of this run folder left alive.

    Args:
        out: the run folder.
        timeout_s: how long each process gets to exit after SIGTERM before SIGKILL.

    Returns:
        The ids of the processes ended (none where the recording driver still runs).
    """
    path = record_path(out)
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    if _alive(record.get("driver", {})) is not None:
        return []  # another driver is running on this folder: its cluster is not stale
    stale = [p for entry in record.get("processes", []) if (p := _alive(entry)) is not None]
    for process in stale:
        try:
            process.terminate()
        except Exception:
            continue
    if stale:
        import psutil

        _, survivors = psutil.wait_procs(stale, timeout=timeout_s)
        for process in survivors:
            with contextlib.suppress(Exception):
                process.kill()
        LOG.warning(
            "ended %d Ray process(es) a killed run on %s left alive: %s",
            len(stale),
            out,
            ", ".join(str(p.pid) for p in stale),
        )
    path.unlink(missing_ok=True)
    return [p.pid for p in stale]


def clear_record(out: Path) -> None:
    """Forget the recorded cluster (``ray.shutdown`` ended it)."""
    record_path(out).unlink(missing_ok=True)
