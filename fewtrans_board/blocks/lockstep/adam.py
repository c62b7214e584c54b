"""Adam and SGD over stacked parameters: one row per configuration, each with its own schedule.

Row ``r`` of every tensor belongs to configuration ``r``. Rows are ordered by step count,
longest first, so the rows still training at step ``t`` are a prefix; a row stops changing
after its last step. The update repeats ``torch.optim``'s arithmetic for the plan's
optimiser (Adam with an L2 term, AdamW's decoupled decay, or SGD with momentum, dampening
and Nesterov; no AMSGrad, no maximise) with each row's learning rate from the plan's
schedule and each tensor's own base learning rate; tensors whose gradient is ``None`` are
skipped, as ``torch.optim`` skips parameters without a gradient.

The per-row step sizes are computed on the host in float64 exactly as the loop computes
its learning rates, and travel to the device once per step (one pinned, non-blocking
copy), so a step never waits for the device.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from fewtrans_board.api.recipe import FEWTRANS_OPTIMISER, FEWTRANS_SCHEDULE, Optimiser, Schedule
from fewtrans_board.blocks.training import cosine_lr

if TYPE_CHECKING:
    import torch


class StackedOptimiser:
    """Optimiser state for stacked tensors ``[R, ...]``.

    Args:
        params: the stacked tensors, updated in place (rows ordered longest run first).
        base_lrs: ``base_lrs[j][r]``: base learning rate of tensor ``j`` for row ``r``
            (0 freezes it, as a skipped optimiser group does).
        steps: optimiser steps of each row, non-increasing.
        optimiser: the optimiser every row runs (FewTrans: Adam).
        schedule: the schedule every row runs (FewTrans: per-step cosine to zero).
        steps_per_epoch: optimiser steps of one epoch (read by epoch-wise schedules).
    """

    def __init__(
        self,
        params: Sequence[torch.Tensor],
        base_lrs: Sequence[Sequence[float]],
        steps: Sequence[int],
        optimiser: Optimiser = FEWTRANS_OPTIMISER,
        schedule: Schedule = FEWTRANS_SCHEDULE,
        steps_per_epoch: int = 1,
    ) -> None:
        import torch

        if list(steps) != sorted(steps, reverse=True):
            raise ValueError("rows must be ordered by step count, longest first")
        self.params = list(params)
        self.steps = list(steps)
        self.optimiser, self.schedule = optimiser, schedule
        self.steps_per_epoch = max(steps_per_epoch, 1)
        # Tensors sharing a learning-rate column (an optimiser group) share step sizes.
        columns: dict[tuple[float, ...], int] = {}
        self.column_of = [columns.setdefault(tuple(lrs), len(columns)) for lrs in base_lrs]
        self.columns = list(columns)
        self.frozen_columns = {c for c, lrs in enumerate(self.columns) if not any(lrs)}
        if optimiser.name == "sgd":
            self.first = [torch.zeros_like(p) for p in self.params]  # momentum buffers
            self.second: list[torch.Tensor] = []
        else:
            self.first = [torch.zeros_like(p) for p in self.params]
            self.second = [torch.zeros_like(p) for p in self.params]

    def active(self, step: int) -> int:
        """Number of rows (a prefix) that still train at ``step`` (0-based)."""
        return sum(1 for s in self.steps if s > step)

    def _rate(self, base_lr: float, step: int, row: int) -> float:
        if base_lr <= 0:
            return 0.0
        if self.schedule == FEWTRANS_SCHEDULE:
            return cosine_lr(base_lr, step, self.steps[row])
        return self.schedule.lr(base_lr, step, self.steps_per_epoch, self.steps[row])

    def _per_row(self, values: list[list[float]]) -> dict[tuple[str, str], torch.Tensor]:
        """``values[column][row]`` as a tensor on each (device, dtype) in use."""
        import torch

        host = torch.tensor(values, dtype=torch.float64)
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
        rows = self.active(step)
        if rows == 0:
            return
        rates = [[self._rate(column[r], step, r) for r in range(rows)] for column in self.columns]
        if self.optimiser.name == "sgd":
            self._sgd(step, rows, rates, grads)
        else:
            self._adam(step, rows, rates, grads)

    def _view(self, values: torch.Tensor, param: torch.Tensor, rows: int) -> torch.Tensor:
        return values.view((rows,) + (1,) * (param.dim() - 1))

    def _adam(
        self,
        step: int,
        rows: int,
        rates: list[list[float]],
        grads: Sequence[torch.Tensor | None],
    ) -> None:
        import torch

        beta1, beta2 = self.optimiser.betas
        decay, eps = self.optimiser.weight_decay, self.optimiser.eps
        correction1 = 1 - beta1 ** (step + 1)
        correction2_sqrt = (1 - beta2 ** (step + 1)) ** 0.5
        neg_steps = self._per_row([[-lr / correction1 for lr in column] for column in rates])
        decays = (
            self._per_row([[1 - lr * decay for lr in column] for column in rates])
            if self.optimiser.name == "adamw" and decay
            else None
        )
        with torch.no_grad():
            for j, grad in enumerate(grads):
                if grad is None or self.column_of[j] in self.frozen_columns:
                    continue
                param, avg, avg_sq = (
                    self.params[j][:rows],
                    self.first[j][:rows],
                    self.second[j][:rows],
                )
                key = (str(param.device), str(param.dtype))
                g = grad.to(param.dtype)
                if decays is not None:
                    param.mul_(self._view(decays[key][self.column_of[j]], param, rows))
                elif decay:
                    g = g.add(param, alpha=decay)
                avg.lerp_(g, 1 - beta1)
                avg_sq.mul_(beta2).addcmul_(g, g, value=1 - beta2)
                denom = (avg_sq.sqrt() / correction2_sqrt).add_(eps)
                neg_step = self._view(neg_steps[key][self.column_of[j]], param, rows)
                param.add_(avg / denom * neg_step)

    def _sgd(
        self,
        step: int,
        rows: int,
        rates: list[list[float]],
        grads: Sequence[torch.Tensor | None],
    ) -> None:
        import torch

        momentum, dampening = self.optimiser.momentum, self.optimiser.dampening
        decay, nesterov = self.optimiser.weight_decay, self.optimiser.nesterov
        neg_rates = self._per_row([[-lr for lr in column] for column in rates])
        with torch.no_grad():
            for j, grad in enumerate(grads):
                if grad is None or self.column_of[j] in self.frozen_columns:
                    continue
                param, buffer = self.params[j][:rows], self.first[j][:rows]
                d_p = grad.to(param.dtype)
                if decay:
                    d_p = d_p.add(param, alpha=decay)
                if momentum:
                    if step == 0:  # torch starts the buffer as a copy of the first gradient
                        buffer.copy_(d_p)
                    else:
                        buffer.mul_(momentum).add_(d_p, alpha=1 - dampening)
                    d_p = d_p.add(buffer, alpha=momentum) if nesterov else buffer
                key = (str(param.device), str(param.dtype))
                param.add_(d_p * self._view(neg_rates[key][self.column_of[j]], param, rows))


StackedAdam = StackedOptimiser
"""The FewTrans optimiser's stacked form (the default of :class:`StackedOptimiser`)."""
