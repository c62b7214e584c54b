"""CoOp: context vectors shared by all classes, learned through the frozen text tower."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fewtrans_board.api.adapter import hparam
from fewtrans_board.api.recipe import Recipe
from fewtrans_board.blocks.clip_common import DASSL_RECIPE_NOTE, DASSL_SGD, INDUCTIVE_CLIP_CODE
from fewtrans_board.blocks.training import normalized
from fewtrans_board.methods.adapters.clip_prompts.common import (
    PromptAdapter,
    PromptConfig,
    PromptSession,
    new_parameter,
    random_prompts,
)

if TYPE_CHECKING:
    import numpy as np
    import torch

    from fewtrans_board.api.backbone import Backbone
    from fewtrans_board.api.episode_data import SupportSet
    from fewtrans_board.blocks.clip_common import NamePredictor


class CoopSession(PromptSession):
    """CoOp state: frozen text-tower copy, context ``[n_ctx, W]``, frozen image features.

    Args:
        backbone: the caller's backbone (read only).
        support: the support set.
        class_names: the episode's class names.
        n_ctx: context length (ignored when ``ctx_init`` is given: its token count is used).
        ctx_init: words to initialise the context from (``""``: ``N(0, 0.02)``).
        method: adapter name, for error messages.
    """

    def __init__(
        self,
        backbone: Backbone,
        support: SupportSet,
        class_names: Sequence[str],
        n_ctx: int,
        ctx_init: str,
        method: str,
    ) -> None:
        from fewtrans_board.blocks.clip_common import clip_model
        from fewtrans_board.blocks.prompter import TextPrompter, count_tokens, frozen_text_copy

        model = clip_model(backbone, method)
        assert backbone.text is not None
        super().__init__(backbone.device)
        self.backbone = backbone
        self.class_names = list(class_names)
        self.text = frozen_text_copy(model)
        self.frozen.append(self.text)
        tokenize = backbone.text.tokenize
        if ctx_init.strip():
            n_ctx = count_tokens(tokenize, ctx_init)
        self.prompter = TextPrompter(self.text, tokenize, n_ctx, ctx_init)
        initial = (
            self.prompter.initial_context()
            if ctx_init.strip()
            else random_prompts(n_ctx, self.prompter.width)
        )
        self.ctx = self.add_trainable("ctx", new_parameter(initial, self.device))
        self.logit_scale = backbone.text.logit_scale
        self.features = normalized(support.images.features(backbone))
        self.labels = support.labels.to(self.device)

    def text_features(self, class_names: Sequence[str]) -> torch.Tensor:
        """Normalised prompted text features ``[C, D]`` (differentiable in the context)."""
        from fewtrans_board.blocks.training import autocast

        with autocast(self.device):
            features = self.prompter.encode(class_names, self.ctx)
        return normalized(features)

    def logits(self, index: torch.Tensor) -> torch.Tensor:
        """``logit_scale * cos`` of support images ``index`` against the episode's classes."""
        return self.logit_scale * self.features[index] @ self.text_features(self.class_names).t()

    def index(self, batch: np.ndarray) -> torch.Tensor:
        """Support indices as a tensor on the session's device."""
        import torch

        return torch.as_tensor(batch, device=self.device)

    def loss(self, batch: np.ndarray) -> torch.Tensor:
        """Cross-entropy on the batch."""
        import torch.nn.functional as F

        index = self.index(batch)
        return F.cross_entropy(self.logits(index), self.labels[index])

    def predictor(self) -> NamePredictor:
        """Frozen image features against prompted text features of any class names."""
        from fewtrans_board.blocks.clip_common import ClipPredictor

        backbone = self.backbone
        return ClipPredictor(
            lambda query: query.features(backbone),
            self.text_features,
            self.class_names,
            self.logit_scale,
        )


class CoopAdapter(PromptAdapter):
    """CoOp: learned context words shared across classes, frozen CLIP."""

    name = "coop"
    description = "CoOp: learned context vectors before the class name; CLIP frozen."
    paper = "Zhou et al., Learning to Prompt for Vision-Language Models (CoOp), IJCV 2022"
    code = "https://github.com/KaiyangZhou/CoOp"
    trains = "n_ctx shared text context vectors"
    frozen_backbone = True
    recipes = (
        Recipe(
            name="inductive-clip",
            source=(
                f"{INDUCTIVE_CLIP_CODE}: FSL/run_coop.sh (config vit_b16 as "
                "FSL/run_process_parallel.py passes it); FSL/configs/trainers/CoOp/vit_b16.yaml; "
                "FSL/train.py extend_cfg (TRAINER.COOP.N_CTX 16, CTX_INIT '', CSC False, "
                "CLASS_TOKEN_POSITION end); "
                "models_prograddassl/Dassl.pytorch/dassl/config/defaults.py (OPTIM.MOMENTUM "
                "0.9, OPTIM.WEIGHT_DECAY 5e-4) and dassl/optim/lr_scheduler.py"
            ),
            values={
                **DASSL_SGD,
                "lr": 0.002,
                "epochs": 100,
                "batch_size": 32,
                "n_ctx": 16,
                "ctx_init": "",
            },
            notes=(
                "FSL/trainers/coop.py builds no hand-crafted prompt (16 learned vectors, the "
                "class name, '.'), so the recipe sets no template (this adapter uses none). "
                + DASSL_RECIPE_NOTE
            ),
        ),
    )

    @dataclass(frozen=True)
    class Config(PromptConfig):
        """CoOp options (unified context, class name at the end)."""

        n_ctx: int = hparam(
            16, "Number of learned context vectors (random N(0, 0.02) init).", min=1
        )
        ctx_init: str = hparam(
            "",
            "Initialise the context from these words' embeddings (e.g. 'a photo of a'); "
            "n_ctx then becomes their token count. Empty: random init.",
        )

    def session(
        self, backbone: Backbone, support: SupportSet, class_names: Sequence[str], config: Any
    ) -> CoopSession:
        """Build the CoOp session."""
        return CoopSession(backbone, support, class_names, config.n_ctx, config.ctx_init, self.name)
