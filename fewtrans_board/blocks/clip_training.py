"""What the CLIP prompt learners and the CLIP tuning adapters share: config and training.

Both families train a few tensors against CLIP's frozen temperature with the FewTrans
recipe (:func:`~fewtrans_board.blocks.training.run_adam`: one Adam with one
learning rate, per-step cosine decay to zero, ``RandomState(11)`` support order) and freeze
them again once trained. :func:`clip_plan` describes one fit as a
:class:`~fewtrans_board.blocks.lockstep.TrainingPlan`, so a whole HPE grid trains in
lockstep; :func:`train_clip` runs one directly.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fewtrans_board.api.adapter import AdapterConfig, hparam
from fewtrans_board.blocks.lockstep.plan import TrainingPlan, check_plan, train_plan

if TYPE_CHECKING:
    import numpy as np
    import torch
    from torch import nn


@dataclass(frozen=True)
class ClipTrainingConfig(AdapterConfig):
    """Common hyperparameters; defaults are FewTrans's start point for CLIP prompt methods.

    FewTrans's centre search starts CLIP prompt methods at 20 epochs and learning rate
    2e-4; batch 32 is FewTrans's VPT/BitFit batch and the CLIP-Adapter/CLIP-LoRA batch.
    """

    lr: float = hparam(2e-4, "Adam learning rate of the trainable parameters.", hpe="lr")
    epochs: int = hparam(20, "Passes over the support set.", hpe="epochs")
    batch_size: int = hparam(32, "Optimiser batch size.", min=1)


def reworded(config: type[AdapterConfig], name: str, help: str) -> Any:
    """Field ``name`` of ``config`` with other help text; default, HPE role and range are kept.

    Redeclaring an inherited dataclass field keeps its position, so a subclass can reword
    a field without restating (and risking to change) its default.

    Args:
        config: the config class that declares the field.
        name: the field's name.
        help: the new help text.

    Returns:
        A dataclass field to assign to ``name`` in the subclass body.
    """
    field = next(f for f in dataclasses.fields(config) if f.name == name)
    return hparam(
        field.default, help, hpe=field.metadata.get("hpe"), **(field.metadata.get("bounds") or {})
    )


def clip_plan(
    config: Any,
    trainable: Sequence[torch.Tensor],
    loss_of: Callable[[np.ndarray], torch.Tensor],
    n_items: int,
    finish: Callable[[], Any],
    *,
    modules: Sequence[nn.Module] = (),
    owners: Sequence[object] = (),
    train_modules: Sequence[nn.Module] = (),
) -> TrainingPlan:
    """The plan of training ``trainable`` with one learning rate (``config.lr``).

    Args:
        config: a :class:`ClipTrainingConfig` (already checked).
        trainable: the tensors Adam updates.
        loss_of: the loss of a batch of support indices.
        n_items: support size.
        finish: builds the predictor once trained.
        modules: the modules the loss runs (where batched training finds the tensors).
        owners: objects whose attributes hold trainable tensors (e.g. a prompt session).
        train_modules: modules in train mode while training (e.g. LoRA dropout); every
            other module stays in eval mode.
    """
    return TrainingPlan(
        groups=[(list(trainable), config.lr)],
        loss=loss_of,
        finish=finish,
        n_items=n_items,
        batch_size=config.batch_size,
        epochs=config.epochs,
        modules=list(modules),
        owners=list(owners),
        train_modules=list(train_modules),
    )


def train_clip(
    method: str,
    config: Any,
    trainable: Sequence[torch.Tensor],
    loss_of: Callable[[np.ndarray], torch.Tensor],
    n_items: int,
    train_modules: Sequence[nn.Module] = (),
) -> None:
    """Train ``trainable`` with the FewTrans recipe, then freeze it and drop its gradients.

    Args:
        method: adapter name, for the error message.
        config: a :class:`ClipTrainingConfig` (already checked).
        trainable: the tensors Adam updates, all with one learning rate.
        loss_of: the loss of a batch of support indices.
        n_items: support size.
        train_modules: modules in train mode while training (e.g. LoRA dropout); every
            other module stays in eval mode.

    Raises:
        FewtransError: ``epochs > 0`` but nothing to train.
    """
    plan = clip_plan(config, trainable, loss_of, n_items, lambda: None, train_modules=train_modules)
    check_plan(plan, method)
    train_plan(plan)
