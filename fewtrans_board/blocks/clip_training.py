"""What the CLIP prompt learners and the CLIP tuning adapters share: config and training.

Both families train a few tensors against CLIP's frozen temperature, by default with the
FewTrans recipe (one Adam with one learning rate, per-step cosine decay to zero,
``RandomState(11)`` support order; :func:`~fewtrans_board.blocks.training.run_training`),
or with the optimiser and schedule a published recipe sets through the
:class:`~fewtrans_board.blocks.training.OptimiserConfig` fields, and freeze them again once
trained. :func:`clip_plan` describes one fit as a
:class:`~fewtrans_board.blocks.lockstep.TrainingPlan`, so a whole HPE grid trains in
lockstep.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fewtrans_board.api.adapter import AdapterConfig, hparam
from fewtrans_board.blocks.clip_common import TEMPLATE
from fewtrans_board.blocks.lockstep.plan import TrainingPlan
from fewtrans_board.blocks.training import OptimiserConfig, optimiser_of, schedule_of
from fewtrans_board.core.errors import ConfigError

if TYPE_CHECKING:
    import numpy as np
    import torch
    from torch import nn


@dataclass(frozen=True)
class _ClipFields(AdapterConfig):
    lr: float = hparam(2e-4, "Learning rate of the trainable parameters.", hpe="lr")
    epochs: int = hparam(20, "Passes over the support set.", hpe="epochs")
    batch_size: int = hparam(32, "Optimiser batch size.", min=1)


@dataclass(frozen=True)
class ClipTrainingConfig(OptimiserConfig, _ClipFields):
    """Common hyperparameters; defaults are FewTrans's start point for CLIP prompt methods.

    FewTrans's centre search starts CLIP prompt methods at 20 epochs and learning rate
    2e-4 with Adam; batch 32 is FewTrans's VPT/BitFit batch and the CLIP-Adapter/CLIP-LoRA
    batch. The optimiser and schedule fields follow (FewTrans's by default), then the
    template of the hand-crafted class prompts (FewTrans's one template by default; a
    published recipe sets each dataset's).
    """

    template: str = hparam(
        TEMPLATE,
        "Template of the hand-crafted class prompts, '{}' standing for the class name "
        "(the zero-shot text features and class prompts an adapter builds).",
    )

    def __post_init__(self) -> None:
        """Check the optimiser settings, then that ``template`` has one place for the name.

        Raises:
            ConfigError: naming the config class and the field.
        """
        super().__post_init__()
        try:
            one_place = self.template.count("{}") == 1 and bool(self.template.format("x"))
        except (IndexError, KeyError, ValueError):
            one_place = False
        if not one_place:
            raise ConfigError(
                f"{type(self).__qualname__}.template: must contain exactly one '{{}}' (where "
                f"the class name goes) and no other format field, got {self.template!r}"
            )


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
        field.default,
        help,
        hpe=field.metadata.get("hpe"),
        choices=field.metadata.get("choices"),
        **(field.metadata.get("bounds") or {}),
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
        trainable: the tensors the optimiser updates.
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
        optimiser=optimiser_of(config),
        schedule=schedule_of(config),
    )
