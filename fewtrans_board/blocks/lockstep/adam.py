"""Adam over stacked parameters: one row per configuration, each with its own schedule.

Row ``r`` of every tensor belongs to configuration ``r``. Rows are ordered by step count,
longest first, so the rows still training at step ``t`` are a prefix; a row stops changing
after its last step. The update repeats ``torch.optim.Adam``'s arithmetic (no weight
decay, no AMSGrad) with the FewTrans per-step cosine learning rate of each row and each
tensor's own base learning rate; tensors whose gradient is ``None`` are skipped, as Adam
skips parameters without a gradient.

The per-row step sizes are computed on the host in float64 exactly as the loop computes
its learning rates, and travel to the device once per step (one pinned, non-blocking
copy), so a step never waits for the device.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from fewtrans_board.blocks.training import cosine_lr

if TYPE_CHECKING:
    import torch

BETA1, BETA2, EPS = 0.9, 0.999, 1e-8


class StackedAdam:
    """Adam state for stacked tensors ``[R, ...]``.

    Args:
        params: the stacked tensors, updated in place (rows ordered longest run first).
        base_lrs: ``base_lrs[j][r]``: base learning rate of tensor ``j`` for row ``r``
            (0 freezes it, as a skipped optimiser group does).
        steps: optimiser steps of each row, non-increasing.
    """

    def __init__(
        self,
        params: Sequence[torch.Tensor],
        base_lrs: Sequence[Sequence[float]],
        steps: Sequence[int],
    ) -> None:
        import torch

        if list(steps) != sorted(steps, reverse=True):
            raise ValueError("rows must be ordered by step count, longest first")
        self.params = list(params)
        self.steps = list(steps)
        # Tensors sharing a learning-rate column (an optimiser group) share step sizes.
        columns: dict[tuple[float, ...], int] = {}
        self.column_of = [columns.setdefault(tuple(lrs), len(columns)) for lrs in base_lrs]
        self.columns = list(columns)
        self.first = [torch.zeros_like(p) for p in self.params]
        self.second = [torch.zeros_like(p) for p in self.params]

    def active(self, step: int) -> int:
        """Number of rows (a prefix) that still train at ``step`` (0-based)."""
        return sum(1 for s in self.steps if s > step)

    def _neg_step_sizes(self, step: int, rows: int) -> dict[tuple[str, str], torch.Tensor]:
        """``-lr_t / (1 - beta1^t)`` per column and row, on each (device, dtype) in use."""
        import torch

        correction1 = 1 - BETA1 ** (step + 1)
        table = [
            [-cosine_lr(column[r], step, self.steps[r]) / correction1 for r in range(rows)]
            for column in self.columns
        ]
        host = torch.tensor(table, dtype=torch.float64)
        sizes: dict[tuple[str, str], torch.Tensor] = {}
        for param in self.params:
            key = (str(param.device), str(param.dtype))
            if key not in sizes:
                moved = host.to(param.dtype)
                if param.device.type == "cuda":
                    moved = moved.pin_memory().to(param.device, non_blocking=True)
                sizes[key] = moved
        return sizes

    def step(self, step: int, grads: Sequence[torch.Tensor | None]) -> None:
        """Apply step ``step`` (0-based) with gradients of the active rows.

        Args:
            step: the step index, shared by every row.
            grads: per tensor, the gradient of the first ``active(step)`` rows, or ``None``.
        """
        import torch

        rows = self.active(step)
        if rows == 0:
            return
        correction2_sqrt = (1 - BETA2 ** (step + 1)) ** 0.5
        sizes = self._neg_step_sizes(step, rows)
        with torch.no_grad():
            for j, grad in enumerate(grads):
                if grad is None:
                    continue
                param, avg, avg_sq = (
                    self.params[j][:rows],
                    self.first[j][:rows],
                    self.second[j][:rows],
                )
                g = grad.to(param.dtype)
                avg.lerp_(g, 1 - BETA1)
                avg_sq.mul_(BETA2).addcmul_(g, g, value=1 - BETA2)
                denom = (avg_sq.sqrt() / correction2_sqrt).add_(EPS)
                neg_step = sizes[(str(param.device), str(param.dtype))][self.column_of[j]]
                param.add_(avg / denom * neg_step.view((rows,) + (1,) * (param.dim() - 1)))
