"""Shard worker processes that never outlive their parent run.

A ``process`` executor's pool worker dies with its parent (``PR_SET_PDEATHSIG`` on Linux,
and a watchdog thread everywhere), so ``kill -9`` of a run leaves no worker computing the
rest of its queue; on an error or Ctrl-C, :func:`stop_pool` cancels queued shards.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time
from typing import Any

PR_SET_PDEATHSIG = 1
WATCH_INTERVAL_S = 0.5


def guard_worker(parent_pid: int) -> None:
    """Pool initializer: end this worker when the process ``parent_pid`` goes away."""
    set_parent_death_signal()
    if os.getppid() != parent_pid:  # the parent died before the signal was armed
        os._exit(1)
    threading.Thread(
        target=_watch_parent, args=(parent_pid,), name="fewtrans-parent-watchdog", daemon=True
    ).start()


def set_parent_death_signal() -> bool:
    """Ask Linux to ``SIGKILL`` this process when its parent dies.

    Returns:
        Whether the request was accepted (``False`` on other systems).
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def _watch_parent(parent_pid: int) -> None:
    while True:
        time.sleep(WATCH_INTERVAL_S)
        if os.getppid() != parent_pid:
            os._exit(1)


def stop_pool(pool: Any, grace_s: float = 5.0) -> None:
    """Cancel a ``ProcessPoolExecutor``'s queued work and terminate its workers now.

    Args:
        pool: the executor.
        grace_s: how long workers get to exit after ``SIGTERM`` before ``SIGKILL``.
    """
    terminate = getattr(pool, "terminate_workers", None)  # Python >= 3.14
    if terminate is not None:
        terminate()
        return
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        if process.is_alive():
            process.terminate()
    deadline = time.monotonic() + grace_s
    for process in processes:
        process.join(max(0.0, deadline - time.monotonic()))
        if process.is_alive():
            process.kill()
            process.join(1.0)
