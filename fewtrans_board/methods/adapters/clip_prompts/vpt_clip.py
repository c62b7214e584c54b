"""VPT for CLIP: deep visual prompts in the image tower, frozen hand-crafted text classifier."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fewtrans_board.api.adapter import hparam
from fewtrans_board.methods.adapters.clip_prompts.common import (
    PromptAdapter,
    PromptConfig,
    PromptSession,
    prompted_clip_loss,
)

if TYPE_CHECKING:
    import numpy as np
    import torch

    from fewtrans_board.api.backbone import Backbone
    from fewtrans_board.api.episode_data import SupportSet
    from fewtrans_board.blocks.clip_common import ClipPredictor


class VptClipSession(PromptSession):
    """Prompted copy of the image tower; the classifier is the frozen zero-shot text head.

    Args:
        backbone: the caller's backbone (read only).
        support: the support set.
        class_names: the episode's class names.
        n_tokens: prompts per layer.
        depth: blocks with their own prompts (0: all).
        method: adapter name, for error messages.
        template: the template of the hand-crafted class prompts.
    """

    def __init__(
        self,
        backbone: Backbone,
        support: SupportSet,
        class_names: Sequence[str],
        n_tokens: int,
        depth: int,
        method: str,
        template: str,
    ) -> None:
        from fewtrans_board.blocks.clip_common import cached_for, require_text
        from fewtrans_board.blocks.deep_prompts import DeepVisualPrompts
        from fewtrans_board.blocks.prompter import frozen_copy
        from fewtrans_board.methods.adapters.clip_prompts.common import vit_width

        text = require_text(backbone, method)
        super().__init__(backbone.device)
        self.backbone = backbone
        self.class_names = list(class_names)
        self.template = template
        self.encoder = frozen_copy(backbone.image_encoder)
        self.frozen.append(self.encoder)
        width, layers = vit_width(self.encoder)
        self.visual = DeepVisualPrompts(n_tokens, depth or layers, width).to(self.device)
        self.visual.attach(self.encoder)
        self.add_trainable("visual_prompts", self.visual.prompts)
        self.logit_scale = text.logit_scale
        self.support_pixels(support)
        self._text_features = cached_for(self.class_names, self._encode_text)

    def _encode_text(self, class_names: Sequence[str]) -> torch.Tensor:
        from fewtrans_board.blocks.clip_common import handcrafted_text_features

        return handcrafted_text_features(self.backbone, class_names, self.template).to(self.device)

    def text_features(self, class_names: Sequence[str]) -> torch.Tensor:
        """Frozen hand-crafted text features ``[C, D]``.

        The text tower is frozen, so the episode's features are encoded once per session
        rather than at every training step.
        """
        return self._text_features(class_names)

    def loss(self, batch: np.ndarray) -> torch.Tensor:
        """Cross-entropy of the prompted image features against the frozen text head."""
        return prompted_clip_loss(self, self.encoder, batch, self.text_features)

    def predictor(self) -> ClipPredictor:
        """Prompted image tower against hand-crafted text features of any class names."""
        from fewtrans_board.blocks.clip_common import ClipPredictor, batched_images

        encoder, device = self.encoder, self.device
        return ClipPredictor(
            lambda query: batched_images(encoder, query.pixels, device),
            self.text_features,
            self.class_names,
            self.logit_scale,
        )


class VptClipAdapter(PromptAdapter):
    """FewTrans multimodal VPT: deep prompts in CLIP's image tower only."""

    name = "vpt-clip"
    description = "VPT-deep in CLIP's image tower with the frozen zero-shot text classifier."
    paper = "Jia et al., Visual Prompt Tuning, ECCV 2022; FewTrans multimodal mode 'vpt'"
    code = "https://github.com/Frankluox/FewTrans"
    trains = "deep visual prompt tokens"

    @dataclass(frozen=True)
    class Config(PromptConfig):
        """VPT-CLIP options (FewTrans: 8 tokens in every layer)."""

        n_tokens: int = hparam(8, "Prompt tokens per layer (random N(0, 0.02) init).", min=0)
        depth: int = hparam(0, "Image blocks with their own prompts; 0 means all of them.", min=0)

    def session(
        self, backbone: Backbone, support: SupportSet, class_names: Sequence[str], config: Any
    ) -> VptClipSession:
        """Build the VPT-CLIP session."""
        return VptClipSession(
            backbone,
            support,
            class_names,
            config.n_tokens,
            config.depth,
            self.name,
            config.template,
        )
