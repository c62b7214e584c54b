"""``TrainingPlan``: one configuration's training, set up but not yet run.

An adapter that trains with the FewTrans recipe (Adam per parameter group, per-step cosine
to zero, ``RandomState(11)`` support order) describes a fit as a plan: the tensors that
train with their learning rates, the loss of a support batch, and how to build the
predictor once trained. :func:`run_plan` runs one plan (the per-configuration loop);
:func:`~fewtrans_board.blocks.lockstep.trainer.fit_plans` trains the plans of a whole HPE
grid in lockstep and falls back to :func:`run_plan` where batching is not possible.

Rules for a plan to batch (checked, with a fallback to the loop when broken):

* the loss reads every trainable tensor through an attribute: a parameter of one of
  ``modules`` (or of a module held by one of ``owners``), or an attribute of one of
  ``owners``; a tensor captured by a closure cannot be replaced;
* configurations that differ only in fields with an HPE role build plans with the same
  structure and equal frozen tensors; learning rates only set ``groups`` and epochs only
  ``epochs``;
* training is deterministic given the initial values (no dropout in ``train_modules``).

``finish`` must not modify frozen parameters in place: batched plans share them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fewtrans_board.api.recipe import FEWTRANS_OPTIMISER, FEWTRANS_SCHEDULE, Optimiser, Schedule
from fewtrans_board.core.errors import FewtransError

if TYPE_CHECKING:
    import numpy as np
    import torch
    from torch import nn

    from fewtrans_board.api.adapter import Predictor


@dataclass
class TrainingPlan:
    """What one configuration trains, on what loss, and how it predicts afterwards.

    Attributes:
        groups: ``(tensors, base learning rate)`` pairs, one Adam each; groups with lr 0
            or no tensors do not train.
        loss: the loss of a batch of support indices (a scalar tensor).
        finish: builds the predictor from the trained state (called once, after
            training, with the trainable tensors frozen).
        n_items: support size.
        batch_size: optimiser batch size.
        epochs: passes over the support set.
        modules: the modules the loss runs (parameters found here can be batched).
        owners: plain objects whose attributes hold trainable tensors or modules (e.g. a
            session object with ``self.ctx``).
        train_modules: modules switched to train mode while training (e.g. dropout);
            everything else stays as it is.
        batchable: ``False`` forces the per-configuration loop.
        reason: why the plan cannot batch (shown in reports), when ``batchable`` is off.
        batched_loss: the loss as lockstep training runs it, when ``loss`` cannot run under
            ``vmap`` (e.g. it takes its own gradients to save memory); it must have the
            same value and gradient (checked on the first batch). ``None``: ``loss``.
        optimiser: the optimiser of every group (FewTrans: Adam without weight decay).
        schedule: the learning-rate schedule (FewTrans: per-step cosine to zero).
        group_optimisers: one optimiser per group of ``groups``, in place of
            ``optimiser`` (e.g. BSCD-FSL: plain SGD on the backbone, SGD with momentum and
            weight decay on the head); ``None``: ``optimiser`` for every group.
    """

    groups: list[tuple[list[torch.Tensor], float]]
    loss: Callable[[np.ndarray], torch.Tensor]
    finish: Callable[[], Predictor]
    n_items: int
    batch_size: int
    epochs: int
    modules: list[nn.Module] = field(default_factory=list)
    owners: list[Any] = field(default_factory=list)
    train_modules: list[nn.Module] = field(default_factory=list)
    batchable: bool = True
    reason: str = ""
    batched_loss: Callable[[np.ndarray], torch.Tensor] | None = None
    rng_state: Any = field(default=None, repr=False)
    optimiser: Optimiser = FEWTRANS_OPTIMISER
    schedule: Schedule = FEWTRANS_SCHEDULE
    group_optimisers: list[Optimiser] | None = None

    def __post_init__(self) -> None:
        """Refuse a per-group optimiser list that does not match the groups.

        Raises:
            FewtransError: the lengths differ.
        """
        if self.group_optimisers is not None and len(self.group_optimisers) != len(self.groups):
            raise FewtransError(
                f"a plan with {len(self.groups)} parameter groups got "
                f"{len(self.group_optimisers)} group optimisers"
            )

    def optimisers(self) -> list[Optimiser]:
        """The optimiser of each group (``optimiser`` unless ``group_optimisers`` says)."""
        if self.group_optimisers is not None:
            return list(self.group_optimisers)
        return [self.optimiser] * len(self.groups)

    @property
    def lockstep_loss(self) -> Callable[[np.ndarray], torch.Tensor]:
        """The loss lockstep training runs under ``vmap``."""
        return self.batched_loss if self.batched_loss is not None else self.loss

    @property
    def trainable(self) -> list[torch.Tensor]:
        """Every tensor of every group, in order (each once)."""
        seen: set[int] = set()
        tensors = []
        for tensors_of_group, _ in self.groups:
            for tensor in tensors_of_group:
                if id(tensor) not in seen:
                    seen.add(id(tensor))
                    tensors.append(tensor)
        return tensors

    def base_lrs(self) -> list[float]:
        """Base learning rate of each tensor of :attr:`trainable` (0 if never stepped)."""
        lrs: dict[int, float] = {}
        for tensors, lr in self.groups:
            for tensor in tensors:
                lrs.setdefault(id(tensor), float(lr) if lr > 0 else 0.0)
        return [lrs[id(t)] for t in self.trainable]

    def tensor_optimisers(self) -> list[Optimiser]:
        """The optimiser of each tensor of :attr:`trainable` (its first group's)."""
        kinds: dict[int, Optimiser] = {}
        for (tensors, _), kind in zip(self.groups, self.optimisers(), strict=True):
            for tensor in tensors:
                kinds.setdefault(id(tensor), kind)
        return [kinds[id(t)] for t in self.trainable]

    def steps(self) -> int:
        """Optimiser steps of the plan."""
        from fewtrans_board.blocks.training import total_steps

        return total_steps(self.n_items, self.batch_size, self.epochs)

    def has_random_training(self) -> bool:
        """Whether a module in train mode draws random numbers (active dropout)."""
        from torch import nn

        return any(
            isinstance(m, nn.modules.dropout._DropoutNd) and m.p > 0
            for module in self.train_modules
            for m in module.modules()
        )


def check_plan(plan: TrainingPlan, method: str) -> None:
    """Reject plans the recipe cannot run.

    Raises:
        FewtransError: negative epochs, a batch size below 1, or epochs > 0 with nothing
            to train.
    """
    if plan.epochs < 0 or plan.batch_size < 1:
        raise FewtransError(
            f"{method}: need epochs >= 0 and batch_size >= 1; got epochs={plan.epochs}, "
            f"batch_size={plan.batch_size}"
        )
    if plan.epochs > 0 and not plan.trainable:
        raise FewtransError(f"{method}: this configuration has no parameter to train")


def freeze_trained(plan: TrainingPlan) -> None:
    """Stop gradients on the plan's trained tensors and drop their ``.grad``."""
    for tensor in plan.trainable:
        tensor.requires_grad_(False)
        tensor.grad = None


def train_plan(plan: TrainingPlan) -> None:
    """Train one plan with its optimiser and schedule (the per-configuration loop), then freeze it."""
    from fewtrans_board.blocks.training import run_training

    for module in plan.train_modules:
        module.train()
    try:
        run_training(
            plan.groups,
            plan.loss,
            plan.n_items,
            plan.batch_size,
            plan.epochs,
            plan.optimiser,
            plan.schedule,
            plan.group_optimisers,
        )
    finally:
        for module in plan.train_modules:
            module.eval()
        freeze_trained(plan)


def run_plan(plan: TrainingPlan) -> Predictor:
    """Train one plan (:func:`train_plan`) and return ``plan.finish()``."""
    train_plan(plan)
    return plan.finish()


def hpe_free_key(config: Any) -> tuple[Any, ...]:
    """The values of the fields without an HPE role (configurations batch when equal)."""
    return tuple(
        (info.name, getattr(config, info.name))
        for info in type(config).fields_info()
        if info.hpe is None
    )


def group_by_fixed_fields(configs: Sequence[Any]) -> list[list[int]]:
    """Indices of ``configs`` grouped by :func:`hpe_free_key`, in first-seen order."""
    groups: dict[tuple[Any, ...], list[int]] = {}
    for i, config in enumerate(configs):
        groups.setdefault(hpe_free_key(config), []).append(i)
    return list(groups.values())
