"""What the CLIP prompt learners share: config fields, the per-fit session, the fit loop.

Every adapter here builds a :class:`PromptSession` per fit: frozen deep copies of the CLIP
modules it runs (never the caller's), the trainable tensors, the loss of a support batch
and the predictor. :meth:`PromptAdapter.fit` trains the session with the recipe of
:func:`~fewtrans_board.blocks.clip_training.clip_plan` (shared with the CLIP
tuning adapters: Adam, one learning rate, per-step cosine to zero, ``RandomState(11)``
shuffles).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from fewtrans_board.blocks.clip_training import ClipTrainingConfig, clip_plan, reworded
from fewtrans_board.blocks.lockstep import PlannedAdapter, TrainingPlan
from fewtrans_board.blocks.training import normalized, upcast

if TYPE_CHECKING:
    import numpy as np
    import torch
    from torch import nn

    from fewtrans_board.api.backbone import Backbone
    from fewtrans_board.api.episode_data import SupportSet
    from fewtrans_board.blocks.clip_common import NamePredictor

INIT_STD = 0.02
"""Std of the normal initialisation of randomly initialised prompts (CoOp, VPT, MaPLe)."""

PHOTO_PREFIX = "a photo of a"
"""Words the word-initialised contexts start from (the FewTrans template's prefix)."""


@dataclass(frozen=True)
class PromptConfig(ClipTrainingConfig):
    """Training options shared by the prompt learners (FewTrans CLIP-prompt start point)."""

    lr: float = reworded(
        ClipTrainingConfig, "lr", "Adam learning rate of every trainable parameter."
    )
    batch_size: int = reworded(
        ClipTrainingConfig, "batch_size", "Optimiser batch size (support images per step)."
    )


class PromptSession(ABC):
    """One fit's state: frozen CLIP copies, trainable tensors, loss and predictor.

    Attributes:
        named_trainable: the tensors the optimiser updates, by name.
        frozen: the deep-copied CLIP modules the session runs; none of their parameters
            may receive a gradient.
        device: torch device.

    Class attributes:
        batchable: whether the grid's sessions may train in lockstep. The loss must read
            trainable tensors as attributes of the session or as parameters of modules it
            holds (checked at run time; the plain loop runs otherwise).
        not_batchable_reason: why not, when ``batchable`` is ``False``.
    """

    batchable: ClassVar[bool] = True
    not_batchable_reason: ClassVar[str] = ""

    def __init__(self, device: str) -> None:
        self.named_trainable: dict[str, torch.Tensor] = {}
        self.frozen: list[nn.Module] = []
        self.device = device

    @property
    def trainable(self) -> list[torch.Tensor]:
        """Trainable tensors with at least one element."""
        return [t for t in self.named_trainable.values() if t.numel() > 0]

    def add_trainable(self, name: str, tensor: torch.Tensor) -> torch.Tensor:
        """Register a trainable tensor under ``name`` and return it."""
        self.named_trainable[name] = tensor
        return tensor

    def add_trainable_module(self, name: str, module: nn.Module) -> None:
        """Register every parameter of ``module`` as ``name.<parameter name>``."""
        for sub, param in module.named_parameters():
            self.named_trainable[f"{name}.{sub}"] = param

    def support_pixels(self, support: SupportSet) -> None:
        """Keep the support pixels and labels on the device (for methods that prompt images)."""
        self.pixels = support.images.pixels.to(self.device)
        self.labels = support.labels.to(self.device)

    @abstractmethod
    def loss(self, batch: np.ndarray) -> torch.Tensor:
        """Loss of a batch of support indices (backward puts the update in ``.grad``)."""

    def lockstep_loss(self, batch: np.ndarray) -> torch.Tensor:
        """:meth:`loss` as batched training runs it under ``vmap`` (same value and gradient).

        Override when :meth:`loss` takes its own gradients; by default it is :meth:`loss`.
        """
        return self.loss(batch)

    @abstractmethod
    def predictor(self) -> NamePredictor:
        """The predictor of the current state (also scores arbitrary class names)."""

    def finish(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Called once after training, before :meth:`predictor` (PromptSRC averages prompts)."""

    def finished_predictor(self) -> NamePredictor:
        """:meth:`finish`, then :meth:`predictor` (a plan's ``finish``)."""
        self.finish()
        return self.predictor()


def new_parameter(tensor: torch.Tensor, device: str) -> torch.Tensor:
    """A float32 leaf parameter on ``device`` (created on CPU first, for seed stability)."""
    import torch

    return torch.nn.Parameter(upcast(tensor.detach()).to(device))


def random_prompts(*shape: int) -> torch.Tensor:
    """``N(0, INIT_STD^2)`` prompts from torch's global generator (on CPU)."""
    import torch

    return torch.randn(*shape) * INIT_STD


def vit_width(encoder: Any) -> tuple[int, int]:
    """Token width and block count of a ViT image tower (raises for other towers)."""
    from fewtrans_board.blocks.vit_parts import vit_parts

    parts = vit_parts(encoder)
    return parts.width, len(parts.blocks)


def prompted_clip_loss(
    session: Any,
    encoder: nn.Module,
    batch: np.ndarray,
    text_features: Callable[[Sequence[str]], torch.Tensor],
) -> torch.Tensor:
    """Cross-entropy of ``logit_scale * cos`` between prompted images and class texts.

    Args:
        session: a session with ``pixels``, ``labels``, ``class_names``, ``logit_scale``
            and ``device``.
        encoder: the (prompted) image tower.
        batch: support indices.
        text_features: ``class names -> [C, D]`` text features.
    """
    import torch
    import torch.nn.functional as F

    from fewtrans_board.blocks.training import autocast

    index = torch.as_tensor(batch, device=session.device)
    with autocast(session.device):
        features = encoder(session.pixels[index])
    images = normalized(features)
    texts = normalized(text_features(session.class_names))
    logits = session.logit_scale * images @ texts.t()
    return F.cross_entropy(logits, session.labels[index])


class PromptAdapter(PlannedAdapter):
    """Base of the CLIP prompt learners: build a session, train it, return its predictor.

    Subclasses implement :meth:`session`; ``fit`` and the batched ``fit_many`` come from
    :class:`~fewtrans_board.blocks.lockstep.PlannedAdapter` through :meth:`plan`.
    """

    needs_text = True
    Config = PromptConfig

    @abstractmethod
    def session(
        self, backbone: Backbone, support: SupportSet, class_names: Sequence[str], config: Any
    ) -> PromptSession:
        """Build the untrained session of one fit (deep copies, prompts, loss)."""

    def plan(
        self, backbone: Backbone, support: SupportSet, class_names: Sequence[str], config: Any
    ) -> TrainingPlan:
        """The session's training: its trainable tensors at ``config.lr``, its loss."""
        session = self.session(backbone, support, class_names, config)
        plan = clip_plan(
            config,
            session.trainable,
            session.loss,
            len(support),
            session.finished_predictor,
            modules=session.frozen,
            owners=[session],
        )
        plan.batchable, plan.reason = session.batchable, session.not_batchable_reason
        plan.batched_loss = session.lockstep_loss
        return plan
