"""Run-wide switches of batched (lockstep) HPE training: ``--batching`` and ``--max-memory``.

The runner turns a run's options into :class:`~fewtrans_board.api.fit_options.LockstepSettings`
(:func:`settings_for`) inside the :class:`~fewtrans_board.api.fit_options.FitOptions` it
passes to ``fit_many(..., options=...)``. The types live in :mod:`fewtrans_board.api` (they
are part of the contract); they are re-exported here under their old import path.
"""

from __future__ import annotations

from fewtrans_board.api.fit_options import FitOptions, GroupReport, LockstepSettings, MemoryBudget

__all__ = ["BATCHING_MODES", "FitOptions", "GroupReport", "LockstepSettings", "settings_for"]

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
