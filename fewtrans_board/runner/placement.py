"""Which device a shard worker uses: one worker per GPU for ``--device cuda``.

``--device cuda`` names no GPU: inline it means the current one; in a pool or on Ray each
worker gets a GPU of its own. A device that names a GPU (``cuda:1``) or the CPU is used as
given. The run's identity keeps the device as the user wrote it, so results do not depend
on which GPU ran which shard.
"""

from __future__ import annotations

from collections.abc import Sequence


def spreads_over_gpus(device: str) -> bool:
    """Whether ``device`` asks for all GPUs (``cuda`` without an index)."""
    return device == "cuda"


def pool_device(device: str, worker: int, gpu_count: int) -> str:
    """Device of local pool worker ``worker`` (0-based) on a machine with ``gpu_count`` GPUs.

    Args:
        device: the run's ``--device``.
        worker: the worker's index in start order.
        gpu_count: visible CUDA devices.

    Returns:
        ``cuda:<worker mod gpu_count>`` for ``cuda``; ``device`` otherwise.
    """
    if not spreads_over_gpus(device) or gpu_count < 1:
        return device
    return f"cuda:{worker % gpu_count}"


def ray_device(device: str, gpu_ids: Sequence[int | str], visible: str | None) -> str:
    """Device of a Ray worker that was granted ``gpu_ids`` (``ray.get_gpu_ids()``).

    Ray normally restricts ``CUDA_VISIBLE_DEVICES`` to the granted GPUs, so the first
    granted GPU is ``cuda:<its position in that list>``; without the restriction it is
    ``cuda:<its id>``.

    Args:
        device: the run's ``--device``.
        gpu_ids: the GPU ids Ray granted the worker.
        visible: the worker's ``CUDA_VISIBLE_DEVICES`` (``None`` if unset).
    """
    if not spreads_over_gpus(device) or not gpu_ids:
        return device
    granted = str(gpu_ids[0])
    listed = [part.strip() for part in visible.split(",")] if visible else []
    if granted in listed:
        return f"cuda:{listed.index(granted)}"
    return f"cuda:{granted}"


def gpu_count() -> int:
    """Visible CUDA devices (0 without CUDA); does not create a CUDA context."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0
