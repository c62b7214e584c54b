"""Torch CPU thread counts: a sensible default instead of one thread per core.

Few-shot adapters run many tiny steps (a linear head on a few dozen support features),
where torch's default of one intra-op thread per core costs far more in synchronisation
than it gains: ``benchmarks/threads.py`` measures it. The default is therefore at most
:data:`MAX_DEFAULT_THREADS`, shared out among parallel workers. CPU results are
bit-identical only between runs with equal thread counts, so the count is recorded in
every result's provenance.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

MAX_DEFAULT_THREADS = 4
"""Upper bound of the default thread count (see ``benchmarks/threads.py``)."""


def available_cores() -> int:
    """CPU cores this process may run on (its affinity mask where the OS has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS and Windows have no affinity masks
        return max(1, os.cpu_count() or 1)


def default_threads(workers: int = 1) -> int:
    """Torch threads per worker when the user gives none.

    Args:
        workers: processes running at once on this machine.

    Returns:
        ``min(MAX_DEFAULT_THREADS, cores // workers)``, at least 1.
    """
    return max(1, min(MAX_DEFAULT_THREADS, available_cores() // max(1, workers)))


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
