"""Adam and SGD over stacked parameters: one row per configuration, each with its own schedule.

Row ``r`` of every tensor belongs to configuration ``r``. Rows are ordered by step count,
longest first, so the rows still training at step ``t`` are a prefix; a row stops changing
after its last step. The update repeats ``torch.optim``'s arithmetic for each tensor's
optimiser (the plan's, or its group's: Adam with an L2 term, AdamW's decoupled decay, or
SGD with momentum, dampening and Nesterov; no AMSGrad, no maximise) with each row's
learning rate from the plan's schedule and each tensor's own base learning rate; tensors whose gradient is ``None`` are
skipped, as ``torch.optim`` skips parameters without a gradient.

The per-row step sizes are computed on the host in float64 exactly as the loop computes
its learning rates, and travel to the device once per step (one pinned, non-blocking
copy), so a step never waits for the device.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from fewtrans_board.api.recipe import FEWTRANS_OPTIMISER, FEWTRANS_SCHEDULE, Optimiser, Schedule

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
        optimisers: the optimiser of each tensor, in place of ``optimiser`` (a plan whose
            groups have their own, e.g. plain SGD on the backbone and SGD with momentum on
            the head); ``None``: ``optimiser`` for every tensor.
    """

    def __init__(
        self,
        params: Sequence[torch.Tensor],
        base_lrs: Sequence[Sequence[float]],
        steps: Sequence[int],
        optimiser: Optimiser = FEWTRANS_OPTIMISER,
        schedule: Schedule = FEWTRANS_SCHEDULE,
        steps_per_epoch: int = 1,
        optimisers: Sequence[Optimiser] | None = None,
    ) -> None:
        import torch

        if list(steps) != sorted(steps, reverse=True):
            raise ValueError("rows must be ordered by step count, longest first")
        self.params = list(params)
        self.steps = list(steps)
        kinds = list(optimisers) if optimisers is not None else [optimiser] * len(self.params)
        if len(kinds) != len(self.params):
            raise ValueError(f"{len(self.params)} tensors but {len(kinds)} optimisers")
        self.optimiser, self.optimisers, self.schedule = optimiser, kinds, schedule
        self.steps_per_epoch = max(steps_per_epoch, 1)
        # Tensors sharing a learning-rate column and an optimiser (an optimiser group)
        # share step sizes.
        columns: dict[tuple[tuple[float, ...], Optimiser], int] = {}
        self.column_of = [
            columns.setdefault((tuple(lrs), kind), len(columns))
            for lrs, kind in zip(base_lrs, kinds, strict=True)
        ]
        self.columns = [lrs for lrs, _ in columns]
        self.column_optimisers = [kind for _, kind in columns]
        self.frozen_columns = {c for c, lrs in enumerate(self.columns) if not any(lrs)}
        # SGD: the momentum buffer; Adam: the first and second moments.
        self.first = [torch.zeros_like(p) for p in self.params]
        self.second = [
            torch.zeros_like(p) if kind.name != "sgd" else None
            for p, kind in zip(self.params, kinds, strict=True)
        ]

    def active(self, step: int) -> int:
        """Number of rows (a prefix) that still train at ``step`` (0-based)."""
        return sum(1 for s in self.steps if s > step)

    def _rate(self, base_lr: float, step: int, row: int) -> float:
        if base_lr <= 0:
            return 0.0
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
        import torch

        rows = self.active(step)
        if rows == 0:
            return
        rates = [[self._rate(column[r], step, r) for r in range(rows)] for column in self.columns]
        # One host-to-device copy per step: every column's factors, stacked.
        factors = [self._factors(c, step, column) for c, column in enumerate(rates)]
        sizes = self._per_row([row for column in factors for row in column])
        offsets = [0]
        for column in factors:
            offsets.append(offsets[-1] + len(column))
        with torch.no_grad():
            for j, grad in enumerate(grads):
                c = self.column_of[j]
                if grad is None or c in self.frozen_columns:
                    continue
                param = self.params[j][:rows]
                key = (str(param.device), str(param.dtype))
                per_row = [
                    self._view(sizes[key][k], param, rows)
                    for k in range(offsets[c], offsets[c + 1])
                ]
                if self.optimisers[j].name == "sgd":
                    self._sgd(j, step, rows, per_row, grad)
                else:
                    self._adam(j, step, rows, per_row, grad)

    def _factors(self, column: int, step: int, rates: list[float]) -> list[list[float]]:
        """Per-row factors of a column: SGD ``[-lr]``; Adam ``[-lr / c1]`` (+ AdamW's decay)."""
        kind = self.column_optimisers[column]
        if kind.name == "sgd":
            return [[-lr for lr in rates]]
        correction1 = 1 - kind.betas[0] ** (step + 1)
        factors = [[-lr / correction1 for lr in rates]]
        if kind.name == "adamw" and kind.weight_decay:
            factors.append([1 - lr * kind.weight_decay for lr in rates])
        return factors

    def _view(self, values: torch.Tensor, param: torch.Tensor, rows: int) -> torch.Tensor:
        return values.view((rows,) + (1,) * (param.dim() - 1))

    def _adam(
        self, j: int, step: int, rows: int, per_row: list[torch.Tensor], grad: torch.Tensor
    ) -> None:
        kind = self.optimisers[j]
        beta1, beta2 = kind.betas
        decay, eps = kind.weight_decay, kind.eps
        correction2_sqrt = (1 - beta2 ** (step + 1)) ** 0.5
        second = self.second[j]
        assert second is not None
        param, avg, avg_sq = self.params[j][:rows], self.first[j][:rows], second[:rows]
        g = grad.to(param.dtype)
        if kind.name == "adamw" and decay:
            param.mul_(per_row[1])
        elif decay:
            g = g.add(param, alpha=decay)
        avg.lerp_(g, 1 - beta1)
        avg_sq.mul_(beta2).addcmul_(g, g, value=1 - beta2)
        denom = (avg_sq.sqrt() / correction2_sqrt).add_(eps)
        param.add_(avg / denom * per_row[0])

    def _sgd(
        self, j: int, step: int, rows: int, per_row: list[torch.Tensor], grad: torch.Tensor
    ) -> None:
        kind = self.optimisers[j]
        momentum, dampening = kind.momentum, kind.dampening
        decay, nesterov = kind.weight_decay, kind.nesterov
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
        param.add_(d_p * per_row[0])


StackedAdam = StackedOptimiser
"""The FewTrans optimiser's stacked form (the default of :class:`StackedOptimiser`)."""
