"""Trainable parameters of a fit: how many values one configuration's training optimised.

Display-only provenance, like the fit seconds and peak memory beside it: counted where the
adapter runs, so a plugin could forge it, and nothing that scores, ranks or verifies reads
it; a malformed count in a worker's reply becomes ``None``, never an error.

The ``measure`` ``optimised-tensors`` counts, while ``fit`` or ``fit_many`` runs, every tensor
handed with a learning rate other than 0 to a ``torch.optim`` optimiser (each parameter
group as added: its elements, once per tensor) or to the built-in
:class:`~fewtrans_board.blocks.lockstep.adam.StackedOptimiser` (one row per configuration,
each row once, however often a chunk is retried). A ``fit_many`` is measured as a whole and
shared equally (a grid's configurations train tensors of one shape). A frozen backbone, a
training-free adapter and hand-written updates that bypass both optimisers count 0.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

MEASURE = "optimised-tensors"
LIMIT = 10**13
"""Counts above this (10 trillion parameters) are not believed: recorded as unknown."""


@dataclass
class Counter:
    """The tensors optimisers received during one measured call."""

    total: int = 0
    _seen: set[Any] = field(default_factory=set)
    _kept: list[Any] = field(default_factory=list)  # alive until the call ends: ids stay unique

    def tensor(self, tensor: Any) -> None:
        """A tensor a ``torch.optim`` optimiser will update (each tensor counted once)."""
        key = ("tensor", id(tensor))
        if key not in self._seen:
            self._seen.add(key)
            self._kept.append(tensor)
            self.total += int(tensor.numel())

    def rows(self, tensor: Any, lrs: Any) -> None:
        """A stacked ``[R, ...]`` tensor whose row ``r`` trains where ``lrs[r]`` is not 0."""
        if tensor.dim() == 0 or tensor.shape[0] == 0:
            return
        self._kept.append(tensor)
        storage = tensor.untyped_storage().data_ptr()
        per_row = int(tensor[0].numel())
        for r, lr in enumerate(lrs):
            key = ("row", storage, int(tensor.storage_offset()) + r * int(tensor.stride(0)))
            if lr and key not in self._seen:
                self._seen.add(key)
                self.total += per_row


_ACTIVE: list[Counter] = []


@contextlib.contextmanager
def _patched() -> Iterator[None]:
    """Wrap the optimisers' constructors so the innermost active counter sees their tensors."""
    import torch

    from fewtrans_board.blocks.lockstep.adam import StackedOptimiser

    add_group = torch.optim.Optimizer.add_param_group
    stacked_init = StackedOptimiser.__init__

    @functools.wraps(add_group)
    def add_param_group(self: Any, param_group: dict[str, Any]) -> None:
        add_group(self, param_group)
        group = self.param_groups[-1]
        lr = group.get("lr", 1.0)
        if _ACTIVE and float(lr) != 0.0:
            for tensor in group["params"]:
                _ACTIVE[-1].tensor(tensor)

    @functools.wraps(stacked_init)
    def stacked(self: Any, params: Any, base_lrs: Any, *args: Any, **kwargs: Any) -> None:
        stacked_init(self, params, base_lrs, *args, **kwargs)
        if _ACTIVE:
            for tensor, lrs in zip(self.params, base_lrs, strict=True):
                _ACTIVE[-1].rows(tensor, lrs)

    torch.optim.Optimizer.add_param_group = add_param_group  # type: ignore[method-assign]
    StackedOptimiser.__init__ = stacked  # type: ignore[method-assign]
    try:
        yield
    finally:
        torch.optim.Optimizer.add_param_group = add_group  # type: ignore[method-assign]
        StackedOptimiser.__init__ = stacked_init  # type: ignore[method-assign]


@contextlib.contextmanager
def counting() -> Iterator[Counter]:
    """Count what optimisers receive inside the block (see the module's rule)."""
    counter = Counter()
    with _patched() if not _ACTIVE else contextlib.nullcontext():
        _ACTIVE.append(counter)
        try:
            yield counter
        finally:
            _ACTIVE.pop()
            counter._kept.clear()


def checked_counts(value: Any, configurations: int) -> list[int | None]:
    """A worker's reported counts, one per configuration; malformed ones become ``None``."""
    if not isinstance(value, list) or len(value) != configurations:
        return [None] * configurations
    return [
        v if isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= LIMIT else None
        for v in value
    ]


@dataclass
class TrainableTally:
    """The counts of a shard's episodes, per configuration (``shard.trainable_parameters``)."""

    configurations: int
    episodes: int = 0
    total: list[int] = field(default_factory=list)
    largest: list[int] = field(default_factory=list)

    def add(self, counts: list[int | None]) -> None:
        """One episode's counts (an episode with any count missing is left out)."""
        if len(counts) != self.configurations or any(c is None for c in counts):
            return
        known = [int(c) for c in counts if c is not None]
        if not self.total:
            self.total, self.largest = [0] * len(known), [0] * len(known)
        self.episodes += 1
        self.total = [t + c for t, c in zip(self.total, known, strict=True)]
        self.largest = [max(m, c) for m, c in zip(self.largest, known, strict=True)]

    def record(self) -> dict[str, Any] | None:
        """``{measure, episodes, total, max}`` (``None`` when no episode was counted)."""
        if self.episodes == 0:
            return None
        return {
            "measure": MEASURE,
            "episodes": self.episodes,
            "total": list(self.total),
            "max": list(self.largest),
        }
