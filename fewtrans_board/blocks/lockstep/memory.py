"""Memory planner: how many configurations train together within a budget.

A configuration's lockstep cost is its trainable tensors three more times (gradient and
the two Adam moments; the tensors themselves exist already) plus the activations its
loss keeps for the backward pass, measured on the first batch. The budget is either an
absolute size (``--max-memory 40GiB``) or a fraction of the device's free memory
(``--max-memory 80%``, the default). Chunking never changes results beyond rounding: every
configuration's arithmetic is the same whichever rows it shares a chunk with.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from fewtrans_board.api.fit_options import DEFAULT_FRACTION, MemoryBudget
from fewtrans_board.core.errors import ConfigError

if TYPE_CHECKING:
    import torch

__all__ = [
    "ADAM_COPIES",
    "DEFAULT_FRACTION",
    "MemoryBudget",
    "budget_bytes",
    "chunk_size",
    "free_memory",
    "parse_memory",
    "saved_activation_bytes",
    "tensor_bytes",
]

ADAM_COPIES = 3
"""Extra copies of each trainable tensor a configuration needs: gradient, two moments."""

_UNITS = {"": 1, "b": 1} | {
    prefix + suffix: base**power
    for power, prefix in enumerate("kmgt", start=1)
    for suffix, base in (("", 1000), ("b", 1000), ("ib", 1024))
}
"""Size suffixes: bytes, decimal ``k``/``kb`` to ``t``/``tb``, binary ``kib`` to ``tib``."""


def parse_memory(text: str | None) -> MemoryBudget:
    """Parse ``--max-memory``: ``40GiB``, ``512MB``, ``123456789`` (bytes) or ``60%``.

    Args:
        text: the option value; ``None`` gives the default budget.

    Raises:
        ConfigError: not a size or percentage, or not positive.
    """
    if text is None:
        return MemoryBudget()
    value = text.strip().lower().replace(" ", "")
    if value.endswith("%"):
        try:
            percent = float(value[:-1])
        except ValueError:
            percent = -1.0
        if not 0 < percent <= 100:
            raise ConfigError(f"memory budget {text!r}: a percentage must be in (0, 100]")
        return MemoryBudget(fraction=percent / 100)
    match = re.fullmatch(r"([0-9]*\.?[0-9]+)([a-z]*)", value)
    if match is None or match.group(2) not in _UNITS:
        raise ConfigError(
            f"memory budget {text!r}: expected a size such as 40GiB, 512MB or 1000000 "
            "(bytes), or a percentage of free memory such as 60%"
        )
    size = int(float(match.group(1)) * _UNITS[match.group(2)])
    if size <= 0:
        raise ConfigError(f"memory budget {text!r} must be positive")
    return MemoryBudget(bytes=size)


def free_memory(device: str) -> int | None:
    """Free memory of ``device`` in bytes (CUDA: driver's count; CPU: MemAvailable).

    Returns:
        ``None`` when it cannot be determined.
    """
    if device.startswith("cuda"):
        import torch

        free, _ = torch.cuda.mem_get_info(torch.device(device))
        return int(free)
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def budget_bytes(budget: MemoryBudget, device: str) -> int | None:
    """The budget in bytes on ``device`` (``None``: unknown free memory, no limit)."""
    if budget.bytes is not None:
        return budget.bytes
    free = free_memory(device)
    return None if free is None else int(free * budget.fraction)


def chunk_size(n_configs: int, per_config_bytes: int, budget: int | None) -> int:
    """Configurations per lockstep chunk: as many as fit, at least one, at most all.

    Args:
        n_configs: configurations in the group.
        per_config_bytes: estimated memory of one configuration.
        budget: bytes available (``None``: unlimited).
    """
    if budget is None or per_config_bytes <= 0:
        return max(n_configs, 1)
    return max(1, min(n_configs, budget // per_config_bytes))


def tensor_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Total bytes of ``tensors``."""
    return sum(t.numel() * t.element_size() for t in tensors)


def saved_activation_bytes(run: Callable[[], object], persistent: Iterable[torch.Tensor]) -> int:
    """Bytes of the tensors autograd saves for backward while ``run()`` executes.

    Storages of ``persistent`` tensors (parameters, inputs) are not counted; each storage
    is counted once.

    Args:
        run: builds the graph (its result is discarded by the caller).
        persistent: tensors that exist anyway.
    """
    import torch

    known = {t.untyped_storage().data_ptr() for t in persistent}
    seen: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        try:
            storage = tensor.untyped_storage()
            pointer = storage.data_ptr()
            if pointer not in known:
                seen[pointer] = storage.nbytes()
        except (RuntimeError, NotImplementedError):  # tensor subclasses without storage
            pass
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        run()
    return sum(seen.values())
