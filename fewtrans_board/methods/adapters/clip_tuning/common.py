"""Shared pieces of the CLIP tuning adapters: training state, base class, predictor.

Every adapter here scores ``logit_scale * cos(image feature, class text feature)`` with
CLIP's frozen temperature, trains with the recipe of
:func:`~fewtrans_board.blocks.clip_training.clip_plan` (shared with the prompt
learners) and returns a :class:`ClipTuningPredictor`, which scores query images against any
class names.

An adapter implements :meth:`ClipTuningAdapter.build`, which returns a :class:`TuningState`
(trainable tensors, the loss of a support batch, the predictor factory); ``plan`` turns it
into a :class:`~fewtrans_board.blocks.lockstep.TrainingPlan`, so ``fit`` runs it and
``fit_many`` trains the HPE grid in lockstep (the loss must read trainable tensors as
parameters of ``owned`` modules). Tests call ``build`` directly to inspect what receives gradients.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fewtrans_board.blocks.clip_common import ClipPredictor
from fewtrans_board.blocks.clip_training import ClipTrainingConfig, clip_plan
from fewtrans_board.blocks.lockstep import PlannedAdapter, TrainingPlan

if TYPE_CHECKING:
    import numpy as np
    import torch
    from torch import nn

    from fewtrans_board.api.backbone import Backbone
    from fewtrans_board.api.episode_data import ImageSet, SupportSet


@dataclass
class TuningState:
    """What an adapter sets up before training.

    Attributes:
        trainable: tensors the optimiser updates (``requires_grad`` is set on them).
        owned: modules the adapter created or deep-copied; every parameter of them that
            is not in ``trainable`` is frozen (tests check that it gets no gradient).
        loss_of: cross-entropy of a batch of support indices.
        predictor: builds the predictor once training is done.
        train_modules: modules switched to train mode while training (LoRA dropout);
            everything else stays in eval mode (FewTrans recipe).
    """

    trainable: list[torch.Tensor]
    owned: list[nn.Module]
    loss_of: Callable[[np.ndarray], torch.Tensor]
    predictor: Callable[[], ClipTuningPredictor]
    train_modules: list[nn.Module] = field(default_factory=list)


class ClipTuningPredictor(ClipPredictor):
    """A :class:`ClipPredictor` that also exposes the trained parts (for inspection).

    Args:
        image_features: ``query -> [N, D]`` image features (need not be normalised).
        text_features: ``class names -> [C, D]`` text features (need not be normalised).
        class_names: the episode's class names, in label order.
        logit_scale: CLIP's frozen temperature.
        parts: the trained modules or tensors, by name.
    """

    def __init__(
        self,
        image_features: Callable[[ImageSet], torch.Tensor],
        text_features: Callable[[Sequence[str]], torch.Tensor],
        class_names: Sequence[str],
        logit_scale: float,
        parts: dict[str, Any],
    ) -> None:
        super().__init__(image_features, text_features, class_names, logit_scale)
        self.parts = parts


def scaled_cosine(image: torch.Tensor, text: torch.Tensor, logit_scale: float) -> torch.Tensor:
    """``logit_scale * normalize(image) @ normalize(text).T`` in float32."""
    from fewtrans_board.blocks.training import normalized

    return logit_scale * normalized(image) @ normalized(text).t()


class ClipTuningAdapter(PlannedAdapter):
    """Base class: ``fit`` trains what :meth:`build` sets up with the FewTrans recipe."""

    needs_text = True
    Config = ClipTrainingConfig

    @abstractmethod
    def build(
        self, backbone: Backbone, support: SupportSet, class_names: Sequence[str], config: Any
    ) -> TuningState:
        """Copy what trains, create new parameters and define the loss and predictor.

        Args:
            backbone: the caller's backbone (never modified).
            support: the labeled support set.
            class_names: the episode's class names, in label order.
            config: an instance of ``Config``.

        Returns:
            The training state.

        Raises:
            FewtransError: the backbone has no text tower (checked here rather than in
                ``fit``, since tests call ``build`` directly).
        """

    def plan(
        self, backbone: Backbone, support: SupportSet, class_names: Sequence[str], config: Any
    ) -> TrainingPlan:
        """Check the config and build the state; its training is the plan."""
        state = self.build(backbone, support, class_names, config)
        return clip_plan(
            config,
            state.trainable,
            state.loss_of,
            len(support),
            state.predictor,
            modules=state.owned,
            train_modules=state.train_modules,
        )
