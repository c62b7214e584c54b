"""CoCoOp: CoOp's context shifted per image by a Meta-Net bias computed from the image feature."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fewtrans_board.api.adapter import hparam
from fewtrans_board.api.recipe import Recipe
from fewtrans_board.blocks.clip_common import DASSL_RECIPE_NOTE, DASSL_SGD, INDUCTIVE_CLIP_CODE
from fewtrans_board.blocks.training import normalized
from fewtrans_board.methods.adapters.clip_prompts.common import PHOTO_PREFIX
from fewtrans_board.methods.adapters.clip_prompts.coop import CoopAdapter, CoopSession

if TYPE_CHECKING:
    import numpy as np
    import torch

    from fewtrans_board.api.backbone import Backbone
    from fewtrans_board.api.episode_data import ImageSet, SupportSet

MAX_TEXT_SEQUENCES = 512
"""Prompts per text pass: images are grouped so that ``images * classes`` stays below this."""


def images_per_pass(n_classes: int) -> int:
    """Images whose prompts share one text pass (at least one)."""
    return max(1, MAX_TEXT_SEQUENCES // max(1, n_classes))


class CocoopSession(CoopSession):
    """CoOp session plus the Meta-Net ``Linear(D, D/16) ReLU Linear(D/16, W)``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        from torch import nn

        super().__init__(*args, **kwargs)
        dim, width = int(self.features.shape[1]), self.prompter.width
        hidden = max(1, dim // 16)
        meta_net = nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, width))
        meta_net = meta_net.to(self.device)  # initialised on CPU from the global generator
        self.meta_net = meta_net
        self.add_trainable_module("meta_net", meta_net)

    def contexts(self, image_features: torch.Tensor) -> torch.Tensor:
        """Per-image contexts ``[B, n_ctx, W]``: ``ctx + meta_net(f)`` on every context token.

        Args:
            image_features: normalised image features ``[B, D]``.
        """
        bias: torch.Tensor = self.meta_net(image_features)
        return self.ctx.unsqueeze(0) + bias.unsqueeze(1)

    def per_image_text(
        self, image_features: torch.Tensor, class_names: Sequence[str]
    ) -> torch.Tensor:
        """Normalised text features ``[B, C, D]`` of each image's own prompts.

        Args:
            image_features: normalised image features ``[B, D]``.
            class_names: the classes.
        """
        import torch

        from fewtrans_board.blocks.training import autocast

        contexts = self.contexts(image_features)
        step = images_per_pass(len(class_names))
        chunks = []
        with autocast(self.device):
            for start in range(0, contexts.shape[0], step):
                chunks.append(self.prompter.encode(class_names, contexts[start : start + step]))
        return normalized(torch.cat(chunks))

    def scores(self, image_features: torch.Tensor, class_names: Sequence[str]) -> torch.Tensor:
        """``logit_scale * cos`` of each normalised image feature against its own prompts."""
        texts = self.per_image_text(image_features, class_names)
        return self.logit_scale * (texts @ image_features.unsqueeze(-1)).squeeze(-1)

    def loss(self, batch: np.ndarray) -> torch.Tensor:
        """Mean cross-entropy of the batch, back-propagated one group of images at a time.

        Images do not interact, so the gradient of the mean is the sum over groups of
        ``sum of the group's cross-entropies / batch size``; each group's graph (its
        ``images x classes`` prompt passes) is freed as soon as its gradient is taken,
        which bounds memory by one group whatever the batch size. The returned tensor has
        the batch's loss as value and that summed gradient as its gradient.
        """
        import torch
        import torch.nn.functional as F

        index = self.index(batch)
        params = self.trainable
        grads = [torch.zeros_like(p) for p in params]
        total = torch.zeros((), device=self.ctx.device)
        step = images_per_pass(len(self.class_names))
        for start in range(0, len(index), step):
            group = index[start : start + step]
            logits = self.scores(self.features[group], self.class_names)
            part = F.cross_entropy(logits, self.labels[group], reduction="sum") / len(index)
            for grad, g in zip(grads, torch.autograd.grad(part, params), strict=True):
                grad.add_(g)
            total = total + part.detach()
        linear = total.new_zeros(())
        for param, grad in zip(params, grads, strict=True):
            linear = linear + (param * grad).sum()  # its gradient is exactly ``grads``
        return linear - linear.detach() + total

    def lockstep_loss(self, batch: np.ndarray) -> torch.Tensor:
        """The plain mean cross-entropy of the batch (what :meth:`loss` differentiates).

        Batched training bounds memory by chunking configurations instead of image groups.
        """
        import torch.nn.functional as F

        index = self.index(batch)
        logits = self.scores(self.features[index], self.class_names)
        return F.cross_entropy(logits, self.labels[index])

    def logits(self, index: torch.Tensor) -> torch.Tensor:
        """Logits of support images ``index`` over the episode's classes."""
        return self.scores(self.features[index], self.class_names)

    def predictor(self) -> CocoopPredictor:
        """Per-image prompts for the query images, for any class names."""
        return CocoopPredictor(self)


class CocoopPredictor:
    """Scores each query image against class prompts conditioned on that image.

    Args:
        session: the trained CoCoOp session.
    """

    def __init__(self, session: CocoopSession) -> None:
        self.session = session
        self.class_names = list(session.class_names)

    def predict_names(self, query: ImageSet, class_names: Sequence[str]) -> torch.Tensor:
        """Logits ``[Q, len(class_names)]``."""
        import torch

        with torch.no_grad():
            features = normalized(query.features(self.session.backbone))
            return self.session.scores(features, class_names)

    def predict(self, query: ImageSet) -> torch.Tensor:
        """Logits over the episode's classes."""
        return self.predict_names(query, self.class_names)


class CocoopAdapter(CoopAdapter):
    """CoCoOp: conditional context, one set of prompts per image."""

    name = "cocoop"
    description = "CoCoOp: CoOp context plus a Meta-Net bias from each image's feature."
    paper = "Zhou et al., Conditional Prompt Learning for Vision-Language Models, CVPR 2022"
    code = "https://github.com/KaiyangZhou/CoOp"
    trains = "shared text context vectors + Meta-Net"
    recipes = (
        Recipe(
            name="inductive-clip",
            source=(
                f"{INDUCTIVE_CLIP_CODE}: FSL/run_cocoop.sh (config vit_b16); "
                "FSL/configs/trainers/CoCoOp/vit_b16.yaml (TRAINER.COCOOP.N_CTX 16, "
                "CTX_INIT ''); FSL/trainers/cocoop.py; "
                "models_prograddassl/Dassl.pytorch/dassl/config/defaults.py (OPTIM.MOMENTUM "
                "0.9, OPTIM.WEIGHT_DECAY 5e-4) and dassl/optim/lr_scheduler.py"
            ),
            values={
                **DASSL_SGD,
                "lr": 0.002,
                "epochs": 10,
                "batch_size": 1,
                "n_ctx": 16,
                "ctx_init": "",
            },
            notes=(
                "16 random context vectors as the paper's config sets them (CoCoOp's own "
                "configs: 4 from 'a photo of a'). FSL/trainers/cocoop.py builds no "
                "hand-crafted prompt, so no template. " + DASSL_RECIPE_NOTE
            ),
        ),
    )

    @dataclass(frozen=True)
    class Config(CoopAdapter.Config):
        """CoCoOp options: 4 context words 'a photo of a' and batch size 1, as in CoCoOp.

        Every image needs its own pass over all class prompts; :meth:`CocoopSession.loss`
        frees each group's graph after its gradient, so larger batches cost time, not memory.
        """

        batch_size: int = hparam(
            1, "Optimiser batch size (CoCoOp's 1: each image runs all class prompts).", min=1
        )

        n_ctx: int = hparam(4, "Number of context vectors when ctx_init is empty.", min=1)
        ctx_init: str = hparam(
            PHOTO_PREFIX,
            "Initialise the context from these words' embeddings; n_ctx then becomes their "
            "token count. Empty: n_ctx random N(0, 0.02) vectors.",
        )

    def session(
        self, backbone: Backbone, support: SupportSet, class_names: Sequence[str], config: Any
    ) -> CocoopSession:
        """Build the CoCoOp session."""
        return CocoopSession(
            backbone, support, class_names, config.n_ctx, config.ctx_init, self.name
        )
