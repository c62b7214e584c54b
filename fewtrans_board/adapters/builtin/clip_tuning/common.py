"""Shared pieces of the CLIP tuning adapters: config, training state, base class, predictor.

Every adapter here scores ``logit_scale * cos(image feature, class text feature)`` with
CLIP's frozen temperature, trains with the FewTrans recipe (:func:`run_adam`: one Adam,
per-step cosine decay, ``RandomState(11)`` support order, modules in eval mode) and returns
a :class:`ClipTuningPredictor`, which scores query images against any class names.

An adapter implements :meth:`ClipTuningAdapter.build`, which returns a :class:`TuningState`
(trainable tensors, the loss of a support batch, the predictor factory); ``fit`` runs the
optimiser on it. Tests call ``build`` directly to inspect what receives gradients.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fewtrans_board.adapters.base import Adapter, AdapterConfig, hparam
from fewtrans_board.adapters.builtin.clip_common import TEMPLATE, ClipPredictor
from fewtrans_board.errors import FewtransError

if TYPE_CHECKING:
    import numpy as np
    import torch
    from torch import nn

    from fewtrans_board.adapters.episode_data import ImageSet, SupportSet
    from fewtrans_board.models.backbone import Backbone


@dataclass(frozen=True)
class ClipTuningConfig(AdapterConfig):
    """Common hyperparameters; defaults are FewTrans's start point for CLIP prompt methods.

    FewTrans's centre search starts CLIP prompt methods at 20 epochs and learning rate
    2e-4; batch 32 is FewTrans's VPT/BitFit batch and the CLIP-Adapter/CLIP-LoRA batch.
    """

    lr: float = hparam(2e-4, "Adam learning rate of the trainable parameters.", hpe="lr")
    epochs: int = hparam(20, "Passes over the support set.", hpe="epochs")
    batch_size: int = hparam(32, "Optimiser batch size.")


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


def prompts(class_names: Sequence[str], template: str = TEMPLATE) -> list[str]:
    """The class prompts ``template.format(name)``."""
    return [template.format(name) for name in class_names]


def cached_for(
    class_names: Sequence[str], compute: Callable[[Sequence[str]], torch.Tensor]
) -> Callable[[Sequence[str]], torch.Tensor]:
    """Wrap ``compute`` so that the episode's own class names are computed only once."""
    episode = list(class_names)
    memo: dict[str, torch.Tensor] = {}

    def text_features(names: Sequence[str]) -> torch.Tensor:
        if list(names) != episode:
            return compute(names)
        if "episode" not in memo:
            memo["episode"] = compute(names)
        return memo["episode"]

    return text_features


def scaled_cosine(image: torch.Tensor, text: torch.Tensor, logit_scale: float) -> torch.Tensor:
    """``logit_scale * normalize(image) @ normalize(text).T`` in float32."""
    from fewtrans_board.adapters.builtin.training import normalized

    return logit_scale * normalized(image) @ normalized(text).t()


class ClipTuningAdapter(Adapter):
    """Base class: ``fit`` trains what :meth:`build` sets up with the FewTrans recipe."""

    needs_text = True
    Config = ClipTuningConfig

    @abstractmethod
    def build(
        self,
        backbone: Backbone,
        support: SupportSet,
        class_names: Sequence[str],
        config: Any,
    ) -> TuningState:
        """Copy what trains, create new parameters and define the loss and predictor.

        Args:
            backbone: the caller's backbone (never modified).
            support: the labeled support set.
            class_names: the episode's class names, in label order.
            config: an instance of ``Config``.

        Returns:
            The training state.
        """

    def check_config(self, config: Any) -> None:
        """Reject values the recipe cannot run with.

        Raises:
            FewtransError: a negative learning rate or epoch count, or a batch size below 1.
        """
        if config.lr < 0 or config.epochs < 0 or config.batch_size < 1:
            raise FewtransError(
                f"{self.name}: need lr >= 0, epochs >= 0 and batch_size >= 1; got "
                f"lr={config.lr}, epochs={config.epochs}, batch_size={config.batch_size}"
            )

    def fit(
        self,
        backbone: Backbone,
        support: SupportSet,
        class_names: Sequence[str],
        config: Any,
    ) -> ClipTuningPredictor:
        """Build the state, train it with Adam under the per-step cosine schedule, predict."""
        from fewtrans_board.adapters.builtin.training import run_adam

        if backbone.text is None:
            raise FewtransError(
                f"{self.name} needs a CLIP-style model with a text tower; {backbone.name} has none"
            )
        self.check_config(config)
        state = self.build(backbone, support, class_names, config)
        for module in state.train_modules:
            module.train()
        try:
            run_adam(
                [(state.trainable, config.lr)],
                state.loss_of,
                len(support),
                config.batch_size,
                config.epochs,
            )
        finally:
            for module in state.train_modules:
                module.eval()
            for tensor in state.trainable:
                tensor.requires_grad_(False)
                tensor.grad = None
        return state.predictor()
