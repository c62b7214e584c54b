"""IVLP: independent deep prompts in CLIP's text and image towers.

Text: the context at positions ``1..n`` of the prompt (first layer, initialised from
"a photo of a") and, before text blocks ``1..J-1``, per-layer prompts overwriting the same
positions. Image: VPT-deep prompts in the first ``J`` image blocks. The two sets never
interact.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fewtrans_board.api.adapter import hparam
from fewtrans_board.api.recipe import Recipe
from fewtrans_board.blocks.clip_common import DASSL_RECIPE_NOTE, DASSL_SGD, INDUCTIVE_CLIP_CODE
from fewtrans_board.blocks.training import upcast
from fewtrans_board.methods.adapters.clip_prompts.common import (
    PHOTO_PREFIX,
    PromptAdapter,
    PromptConfig,
    PromptSession,
    new_parameter,
    prompted_clip_loss,
    random_prompts,
)

if TYPE_CHECKING:
    import numpy as np
    import torch

    from fewtrans_board.api.backbone import Backbone
    from fewtrans_board.api.episode_data import SupportSet
    from fewtrans_board.blocks.clip_common import ClipPredictor


class DeepTextSession(PromptSession):
    """A frozen CLIP copy with deep text prompts (shared by IVLP and MaPLe).

    Args:
        backbone: the caller's backbone (read only).
        support: the support set.
        class_names: the episode's class names.
        n_ctx: text prompt tokens per layer.
        ctx_init: words the first-layer context starts from when they have at least
            ``n_ctx`` tokens (else random ``N(0, 0.02)``).
        depth: blocks with prompts in each tower, counting the first, capped at the tower's
            block count (at the smaller count of the two when ``same_depth``).
        method: adapter name, for error messages.
    """

    same_depth = False
    """Whether both towers get the same depth (MaPLe couples layer by layer)."""

    def __init__(
        self,
        backbone: Backbone,
        support: SupportSet,
        class_names: Sequence[str],
        n_ctx: int,
        ctx_init: str,
        depth: int,
        method: str,
    ) -> None:
        from fewtrans_board.blocks.clip_common import clip_model
        from fewtrans_board.blocks.prompter import (
            TextPrompter,
            attach_deep_text_prompts,
            count_tokens,
            frozen_copy,
        )

        model = clip_model(backbone, method)
        assert backbone.text is not None
        super().__init__(backbone.device)
        self.backbone = backbone
        self.class_names = list(class_names)
        self.model: Any = frozen_copy(model)  # hooks go on this copy
        self.frozen.append(self.model)
        text_depth, self.image_depth = tower_depths(self.model, depth)
        if self.same_depth:
            text_depth = self.image_depth = min(text_depth, self.image_depth)
        tokenize = backbone.text.tokenize
        words = ctx_init.strip() and count_tokens(tokenize, ctx_init) >= n_ctx
        self.prompter = TextPrompter(self.model, tokenize, n_ctx, ctx_init if words else "")
        width = self.prompter.width
        first = self.prompter.initial_context() if words else random_prompts(n_ctx, width)
        self.ctx = self.add_trainable("ctx", new_parameter(first, self.device))
        deep = random_prompts(max(text_depth - 1, 0), n_ctx, width)
        self.text_deep = new_parameter(deep, self.device)
        if text_depth > 1:
            self.add_trainable("text_deep", self.text_deep)
        self.text_depth = text_depth
        attach_deep_text_prompts(self.model, lambda: self.text_deep, n_ctx, text_depth)
        self.logit_scale = backbone.text.logit_scale
        self.support_pixels(support)

    def text_features(self, class_names: Sequence[str]) -> torch.Tensor:
        """Prompted text features ``[C, D]`` (differentiable in the prompts)."""
        from fewtrans_board.blocks.training import autocast

        with autocast(self.device):
            return upcast(self.prompter.encode(class_names, self.ctx))

    def loss(self, batch: np.ndarray) -> torch.Tensor:
        """Cross-entropy of prompted images against prompted class texts."""
        return prompted_clip_loss(self, self.model.visual, batch, self.text_features)

    def predictor(self) -> ClipPredictor:
        """Prompted image tower against prompted texts of any class names."""
        from fewtrans_board.blocks.clip_common import ClipPredictor, batched_images

        visual, device = self.model.visual, self.device
        return ClipPredictor(
            lambda query: batched_images(visual, query.pixels, device),
            self.text_features,
            self.class_names,
            self.logit_scale,
        )


def tower_depths(model: Any, depth: int) -> tuple[int, int]:
    """``depth`` capped at the number of text blocks and of image blocks."""
    from fewtrans_board.methods.adapters.clip_prompts.common import vit_width

    _, image_layers = vit_width(model.visual)
    return min(depth, len(model.transformer.resblocks)), min(depth, image_layers)


class IvlpSession(DeepTextSession):
    """Deep text prompts plus independent deep visual prompts."""

    def __init__(self, *args: Any, n_ctx_vision: int, **kwargs: Any) -> None:
        from fewtrans_board.blocks.deep_prompts import DeepVisualPrompts
        from fewtrans_board.methods.adapters.clip_prompts.common import vit_width

        super().__init__(*args, **kwargs)
        self.visual_prompts: Any = None
        if n_ctx_vision > 0:
            width, _ = vit_width(self.model.visual)
            prompts = DeepVisualPrompts(n_ctx_vision, self.image_depth, width).to(self.device)
            prompts.attach(self.model.visual)
            self.visual_prompts = prompts
            self.add_trainable("visual_prompts", prompts.prompts)


class IvlpAdapter(PromptAdapter):
    """IVLP: independent vision and language deep prompts."""

    name = "ivlp"
    description = "IVLP: independent deep prompts in CLIP's text and image towers."
    paper = "Khattak et al., MaPLe, CVPR 2023 (IVLP baseline)"
    code = "https://github.com/muzairkhattak/multimodal-prompt-learning"
    trains = "deep text prompts (first layer from 'a photo of a') + deep visual prompts"
    recipes = (
        Recipe(
            name="inductive-clip",
            source=(
                f"{INDUCTIVE_CLIP_CODE}: FSL/run_ivlp.sh (config vit_b16); "
                "FSL/configs/trainers/IVLP/vit_b16.yaml (TRAINER.IVLP.N_CTX_VISION 4, "
                "N_CTX_TEXT 4, CTX_INIT 'a photo of a', PROMPT_DEPTH_VISION 9, "
                "PROMPT_DEPTH_TEXT 9); FSL/trainers/ivlp.py; "
                "models_prograddassl/Dassl.pytorch/dassl/config/defaults.py (OPTIM.MOMENTUM "
                "0.9, OPTIM.WEIGHT_DECAY 5e-4) and dassl/optim/lr_scheduler.py"
            ),
            values={
                **DASSL_SGD,
                "lr": 0.0025,
                "epochs": 20,
                "batch_size": 4,
                "n_ctx_text": 4,
                "n_ctx_vision": 4,
                "depth": 9,
                "ctx_init": "a photo of a",
            },
            notes=(
                "FSL/trainers/ivlp.py builds no hand-crafted prompt, so no template. "
                + DASSL_RECIPE_NOTE
            ),
        ),
    )

    @dataclass(frozen=True)
    class Config(PromptConfig):
        """IVLP options (paper (b): 4 + 4 tokens, depth 9)."""

        n_ctx_text: int = hparam(4, "Text prompt tokens per layer.", min=0)
        n_ctx_vision: int = hparam(4, "Image prompt tokens per layer (0: no image prompts).", min=0)
        depth: int = hparam(
            9, "Blocks with prompts in each tower, capped at its block count.", min=1
        )
        ctx_init: str = hparam(
            PHOTO_PREFIX,
            "Words the first-layer text prompts start from (their first n_ctx_text tokens); "
            "empty or too short: random N(0, 0.02).",
        )

    def session(
        self, backbone: Backbone, support: SupportSet, class_names: Sequence[str], config: Any
    ) -> IvlpSession:
        """Build the IVLP session."""
        return IvlpSession(
            backbone,
            support,
            class_names,
            n_ctx=config.n_ctx_text,
            ctx_init=config.ctx_init,
            method=self.name,
            n_ctx_vision=config.n_ctx_vision,
            depth=config.depth,
        )
