"""Run-wide switches of batched (lockstep) HPE training, and what each batched fit did.

The runner sets them around the adapters it calls (``evaluate --max-memory``,
``--batching``); adapters read them through :func:`current_settings`. Tests and
benchmarks use :func:`lockstep_settings` and :func:`recording` directly.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from typing import Any

from fewtrans_board.blocks.lockstep.memory import MemoryBudget


@dataclass(frozen=True)
class LockstepSettings:
    """How configurations of one episode are trained together.

    Attributes:
        enabled: train the plans of :class:`~fewtrans_board.blocks.lockstep.PlannedAdapter`
            adapters in lockstep where possible; ``False`` runs the plain per-configuration
            loop (the reference the batched path equals).
        heads: train the frozen-feature heads (linear probe, cosine classifier) as one stack.
        memory: memory the configurations trained together may use; the default is a
            fraction of the device's free memory.
    """

    enabled: bool = True
    heads: bool = True
    memory: MemoryBudget = field(default_factory=MemoryBudget)


BATCHING_MODES = ("auto", "on", "off")
"""``--batching``: ``auto`` batches on CUDA devices and batches only the frozen heads on CPU
(where training is compute-bound and vmapped convolutions are slower than the loop)."""


def settings_for(mode: str, device: str, memory: MemoryBudget) -> LockstepSettings:
    """The settings of a run with ``--batching mode`` on ``device``.

    Raises:
        ValueError: an unknown mode.
    """
    if mode not in BATCHING_MODES:
        raise ValueError(f"unknown batching mode {mode!r}; use one of {', '.join(BATCHING_MODES)}")
    plans = mode == "on" or (mode == "auto" and device.startswith("cuda"))
    return LockstepSettings(enabled=plans, heads=mode != "off", memory=memory)


@dataclass
class GroupReport:
    """What happened to one group of configurations that differ only in lr/epochs.

    Attributes:
        method: adapter name.
        configs: number of configurations in the group.
        chunks: sizes of the lockstep chunks, in training order (empty when the loop ran).
        per_config_bytes: estimated memory of one configuration's training state.
        budget_bytes: the memory budget the chunks were sized for (``None``: unlimited).
        fallback: why the plain loop ran instead, or ``None`` when batched.
    """

    method: str
    configs: int
    chunks: list[int] = field(default_factory=list)
    per_config_bytes: int = 0
    budget_bytes: int | None = None
    fallback: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return dict(self.__dict__)


_SETTINGS: ContextVar[LockstepSettings] = ContextVar("fewtrans_lockstep_settings")
_RECORDS: ContextVar[list[GroupReport] | None] = ContextVar("fewtrans_lockstep_records")


def current_settings() -> LockstepSettings:
    """The settings in force (defaults outside any :func:`lockstep_settings` block)."""
    return _SETTINGS.get(LockstepSettings())


@contextmanager
def settings_in_force(settings: LockstepSettings) -> Iterator[LockstepSettings]:
    """Put ``settings`` in force inside a ``with`` block (e.g. a run's, from :func:`settings_for`).

    Yields:
        ``settings``.
    """
    token = _SETTINGS.set(settings)
    try:
        yield settings
    finally:
        _SETTINGS.reset(token)


def lockstep_settings(**changes: Any) -> AbstractContextManager[LockstepSettings]:
    """Change settings inside a ``with`` block (``enabled=...``, ``heads=...``, ``memory=...``).

    Args:
        changes: fields of :class:`LockstepSettings` to replace.

    Returns:
        A context manager yielding the settings in force inside the block.
    """
    return settings_in_force(replace(current_settings(), **changes))


@contextmanager
def recording() -> Iterator[list[GroupReport]]:
    """Collect a :class:`GroupReport` for every group trained inside the block."""
    reports: list[GroupReport] = []
    token = _RECORDS.set(reports)
    try:
        yield reports
    finally:
        _RECORDS.reset(token)


def record(report: GroupReport) -> None:
    """Add ``report`` to the innermost :func:`recording` block, if any."""
    reports = _RECORDS.get(None)
    if reports is not None:
        reports.append(report)
