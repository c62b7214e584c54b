"""Torch CPU thread counts: the cores this process may really use, shared among workers.

torch starts one intra-op thread per core of the host; under a CPU quota (``docker --cpus 2``
on a 64-core host) or with several worker processes that oversubscribes the CPUs, and the
many tiny steps of few-shot adapters become many times slower (``benchmarks/threads.py``).
The default counts the cores the process may use (affinity mask, cgroup CPU quota) and
divides them among the workers; ``--threads`` overrides it. CPU results are bit-identical
only between equal thread counts, so the count is recorded in every result's provenance.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")


def cgroup_cpu_limit(root: Path = CGROUP_ROOT) -> int | None:
    """CPUs allowed by the cgroup CPU quota (v2 ``cpu.max`` or v1 CFS), ``None`` if unlimited.

    Args:
        root: the cgroup file system mount.
    """
    try:
        quota, _, period = (root / "cpu.max").read_text().partition(" ")
        if quota.strip() != "max":
            return max(1, math.ceil(int(quota) / int(period)))
        return None
    except (OSError, ValueError):
        pass
    try:
        quota_us = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period_us = int((root / "cpu" / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return max(1, math.ceil(quota_us / period_us)) if quota_us > 0 and period_us > 0 else None


def available_cores() -> int:
    """Cores this process may use: its affinity mask, capped by its cgroup CPU quota."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # macOS and Windows have no affinity masks
        cores = os.cpu_count() or 1
    limit = cgroup_cpu_limit()
    return max(1, min(cores, limit) if limit is not None else cores)


def default_threads(workers: int = 1) -> int:
    """Torch threads per worker when the user gives none.

    Args:
        workers: processes running at once on this machine.

    Returns:
        ``available_cores() // workers``, at least 1.
    """
    return max(1, available_cores() // max(1, workers))


def replay_threads(recorded: object) -> int:
    """Threads to re-run a recorded run with: its count, capped at the cores available.

    Equal counts make CPU results bit-identical; more threads than cores only slow down.

    Args:
        recorded: the ``torch_threads`` of a run's provenance (anything else: the default).
    """
    if isinstance(recorded, int) and not isinstance(recorded, bool) and recorded >= 1:
        return min(recorded, available_cores())
    return default_threads()


@contextmanager
def torch_threads(threads: int | None) -> Iterator[int]:
    """Set torch's intra-op threads for a block, restoring the previous count after it.

    Args:
        threads: the count, or ``None`` for :func:`default_threads`.

    Yields:
        The count in effect.
    """
    import torch

    count = threads if threads is not None else default_threads()
    previous = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield count
    finally:
        torch.set_num_threads(previous)
