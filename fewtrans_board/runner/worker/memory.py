"""Peak memory of computing a shard (FewTrans Table IX), measured where the fitting runs.

The record's ``measure``, by where the adapter ran (README.md says what each counts):

- ``cuda-max-memory-allocated``: fitted here on CUDA; the peak of
  ``torch.cuda.max_memory_allocated`` over the shard (tensors only; a reset by lockstep's
  memory probe is folded in), ``baseline_bytes`` allocated at its start.
- ``rss-high-water``: fitted here on the CPU (Linux); the ``VmHWM`` mark, reset at the
  shard's start (``/proc/self/clear_refs``), ``baseline_bytes`` the resident size then.
- ``rss-high-water-since-start``: where the mark cannot be reset, the lifetime peak
  (``getrusage``, which may come from earlier work), ``baseline_bytes`` that peak at the start.
- ``episode-process-cuda-max-memory-allocated`` / ``episode-process-rss-high-water``: the
  largest peak a worker's episode process reported (its resident set counts the memory it
  was forked with, the model included); no baseline.
"""

from __future__ import annotations

import contextlib
import resource
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


def _status_bytes(key: str) -> int | None:
    """A ``kB`` line of ``/proc/self/status`` in bytes (``None`` where unreadable)."""
    try:
        for line in _STATUS.read_text(encoding="ascii", errors="replace").splitlines():
            if line.startswith(f"{key}:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _reset_rss_high_water() -> bool:
    """Reset this process's ``VmHWM`` to its current resident size (Linux 4.0+)."""
    try:
        _CLEAR_REFS.write_text("5", encoding="ascii")
    except OSError:
        return False
    return _status_bytes("VmHWM") is not None and _status_bytes("VmRSS") is not None


def _lifetime_peak_rss() -> int:
    scale = 1 if sys.platform == "darwin" else 1024  # bytes on macOS, kB elsewhere
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * scale


@contextlib.contextmanager
def folded_cuda_resets(device: str) -> Iterator[list[int]]:
    """Keep the CUDA peak of ``device`` across ``torch.cuda.reset_peak_memory_stats`` calls.

    Yields a one-element list holding the largest peak seen before any reset made inside
    the block; after it, ``max(that, torch.cuda.max_memory_allocated(device))`` is the
    block's peak. Lockstep training resets the peak to probe one configuration's memory.
    """
    import torch

    seen = [0]
    original = torch.cuda.reset_peak_memory_stats

    def fold_then_reset(target: Any = None) -> None:
        seen[0] = max(seen[0], int(torch.cuda.max_memory_allocated(target)))
        original(target)

    torch.cuda.reset_peak_memory_stats = fold_then_reset  # type: ignore[assignment]
    try:
        yield seen
    finally:
        torch.cuda.reset_peak_memory_stats = original


@dataclass
class PeakMemory:
    """Measure the peak memory of one shard (a context manager around its episodes).

    Args:
        device: the torch device the run computes on.
        in_process: the adapter fits in this process (inline isolation); otherwise the
            episode processes report their peaks through :meth:`observe`.
    """

    device: str
    in_process: bool = True
    measure: str = ""
    baseline: int | None = None
    peak: int = 0
    _stack: contextlib.ExitStack | None = None
    _folded: list[int] | None = None

    @property
    def cuda(self) -> bool:
        """Whether the run computes on a CUDA device."""
        return self.device.startswith("cuda")

    def __enter__(self) -> PeakMemory:
        if not self.in_process:
            self.measure = (
                "episode-process-cuda-max-memory-allocated"
                if self.cuda
                else "episode-process-rss-high-water"
            )
            return self
        if self.cuda:
            import torch

            self.measure = "cuda-max-memory-allocated"
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self.baseline = int(torch.cuda.memory_allocated(self.device))
            self._stack = contextlib.ExitStack()
            self._folded = self._stack.enter_context(folded_cuda_resets(self.device))
        elif _reset_rss_high_water():
            self.measure = "rss-high-water"
            self.baseline = _status_bytes("VmRSS")
        else:
            self.measure = "rss-high-water-since-start"
            self.baseline = _lifetime_peak_rss()
        return self

    def observe(self, peak_bytes: int) -> None:
        """Fold in an episode process's reported peak (worker isolations)."""
        self.peak = max(self.peak, int(peak_bytes))

    def __exit__(self, *_: object) -> None:
        if not self.in_process:
            return
        if self.cuda:
            import torch

            assert self._stack is not None and self._folded is not None
            self._stack.close()
            torch.cuda.synchronize(self.device)
            peak = max(self._folded[0], int(torch.cuda.max_memory_allocated(self.device)))
        elif self.measure == "rss-high-water":
            peak = _status_bytes("VmHWM") or 0
        else:
            peak = _lifetime_peak_rss()
        self.peak = max(self.peak, peak)

    def record(self) -> dict[str, Any] | None:
        """``{bytes, measure, device[, baseline_bytes]}`` for the shard's provenance.

        ``None`` when nothing was measured (a worker run whose episode processes reported
        no peak).
        """
        if self.peak <= 0:
            return None
        record: dict[str, Any] = {"bytes": self.peak, "measure": self.measure}
        record["device"] = self.device
        if self.baseline is not None:
            record["baseline_bytes"] = self.baseline
        return record
