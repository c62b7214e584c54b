"""Adam over stacked parameters: one row per configuration, each with its own schedule.

Row ``r`` of every tensor belongs to configuration ``r``. Rows are ordered by step count,
longest first, so the rows still training at step ``t`` are a prefix; a row stops changing
after its last step. The update repeats ``torch.optim.Adam``'s arithmetic (no weight
decay, no AMSGrad) with the FewTrans per-step cosine learning rate of each row and each
tensor's own base learning rate; tensors whose gradient is ``None`` are skipped, as Adam
skips parameters without a gradient.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from fewtrans_board.adapters.builtin.training import cosine_lr

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
        self.base_lrs = [list(lrs) for lrs in base_lrs]
        self.steps = list(steps)
        self.first = [torch.zeros_like(p) for p in self.params]
        self.second = [torch.zeros_like(p) for p in self.params]

    def active(self, step: int) -> int:
        """Number of rows (a prefix) that still train at ``step`` (0-based)."""
        return sum(1 for s in self.steps if s > step)

    def step(self, step: int, grads: Sequence[torch.Tensor | None]) -> None:
        """Apply step ``step`` (0-based) with gradients of the active rows.

        Args:
            step: the step index, shared by every row.
            grads: per tensor, the gradient of the first ``active(step)`` rows, or ``None``.
        """
        import torch

        rows = self.active(step)
        count = step + 1
        correction1 = 1 - BETA1**count
        correction2_sqrt = (1 - BETA2**count) ** 0.5
        with torch.no_grad():
            for j, grad in enumerate(grads):
                if grad is None:
                    continue
                param, avg, avg_sq = self.params[j], self.first[j], self.second[j]
                sizes = [
                    -cosine_lr(self.base_lrs[j][r], step, self.steps[r]) / correction1
                    for r in range(rows)
                ]
                shape = (rows,) + (1,) * (param.dim() - 1)
                neg_step = torch.tensor(sizes, dtype=torch.float64).to(param.device, param.dtype)
                g = grad.to(param.dtype)
                avg[:rows].lerp_(g, 1 - BETA1)
                avg_sq[:rows].mul_(BETA2).addcmul_(g, g, value=1 - BETA2)
                denom = (avg_sq[:rows].sqrt() / correction2_sqrt).add_(EPS)
                param[:rows].add_(avg[:rows] / denom * neg_step.view(shape))
