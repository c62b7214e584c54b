"""Is a re-run's numeric environment the recorded one? Then predictions must agree exactly.

Deterministic CPU and GPU kernels give the same bits for the same inputs when the same
library versions run on the same processor (model and feature flags) with the same thread
count and batching mode. When any of these differ, honest re-runs of chaotic training may
disagree on single predictions, so verification compares accuracies statistically instead.
"""

from __future__ import annotations

from typing import Any

NUMERIC_KEYS = ("device", "device_name", "cpu_flags", "torch", "numpy", "cuda", "torch_threads")
"""Recorded ``environment`` fields that select kernels (``cuda`` counts on GPUs only)."""


def rerun_environment(device: str, threads: int, batching: str) -> dict[str, Any]:
    """The numeric environment a re-run in this process's worker computes in."""
    import numpy
    import torch

    from fewtrans_board.runner.spec import cpu_flags_digest, cpu_model

    on_gpu = device.startswith("cuda")
    return {
        "device": device,
        "device_name": torch.cuda.get_device_name(device) if on_gpu else cpu_model(),
        "cpu_flags": cpu_flags_digest(),
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "cuda": torch.version.cuda,
        "torch_threads": threads,
        "batching": batching,
    }


def differences(recorded: dict[str, Any], batching: str, rerun: dict[str, Any]) -> list[str]:
    """``key: recorded -> re-run`` for each numeric field that differs (empty: the same)."""
    stored = {k: recorded.get(k) for k in NUMERIC_KEYS}
    stored["batching"] = batching
    keys = [*NUMERIC_KEYS, "batching"]
    if not str(rerun.get("device", "")).startswith("cuda"):
        keys.remove("cuda")  # the CUDA build of torch does not change CPU kernels
    return [
        f"{k}: {stored.get(k)!r} -> {rerun.get(k)!r}" for k in keys if stored.get(k) != rerun.get(k)
    ]
