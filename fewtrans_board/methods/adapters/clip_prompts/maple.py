"""MaPLe: deep text prompts whose per-layer linear projections are the image tower's prompts."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fewtrans_board.api.adapter import hparam
from fewtrans_board.api.recipe import Recipe
from fewtrans_board.blocks.clip_common import DASSL_RECIPE_NOTE, DASSL_SGD, INDUCTIVE_CLIP_CODE
from fewtrans_board.methods.adapters.clip_prompts.common import (
    PHOTO_PREFIX,
    PromptAdapter,
    PromptConfig,
)
from fewtrans_board.methods.adapters.clip_prompts.ivlp import DeepTextSession

if TYPE_CHECKING:
    import torch

    from fewtrans_board.api.backbone import Backbone
    from fewtrans_board.api.episode_data import SupportSet


class MapleSession(DeepTextSession):
    """Deep text prompts; image prompts of layer ``i`` = ``Linear_i(text prompts of layer i)``."""

    same_depth = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        import torch
        from torch import nn

        from fewtrans_board.blocks.deep_prompts import DeepVisualPrompts
        from fewtrans_board.methods.adapters.clip_prompts.common import vit_width

        super().__init__(*args, **kwargs)
        text_width, depth = self.prompter.width, self.text_depth
        image_width, _ = vit_width(self.model.visual)
        projections = nn.ModuleList(nn.Linear(text_width, image_width) for _ in range(depth))
        self.projections = projections.to(self.device)
        self.add_trainable_module("projections", self.projections)
        n_ctx = self.prompter.n_ctx
        self.visual_prompts = DeepVisualPrompts(n_ctx, depth, image_width).to(self.device)
        # Unused (the provider supplies the prompts); zeroed so that every configuration of
        # the grid holds the same frozen tensor and the grid can train in lockstep.
        self.visual_prompts.prompts = nn.Parameter(
            torch.zeros_like(self.visual_prompts.prompts), requires_grad=False
        )
        self.visual_prompts.attach(self.model.visual, provider=self.image_prompts)

    def image_prompts(self) -> torch.Tensor:
        """Image prompts ``[J, n_ctx, image width]`` projected from the text prompts."""
        import torch

        text = [self.ctx, *self.text_deep.unbind(0)]
        return torch.stack([proj(p) for proj, p in zip(self.projections, text, strict=True)])


class MapleAdapter(PromptAdapter):
    """MaPLe: multi-modal prompts coupled from the text side."""

    name = "maple"
    description = "MaPLe: deep text prompts projected per layer into deep image prompts."
    paper = "Khattak et al., MaPLe: Multi-modal Prompt Learning, CVPR 2023"
    code = "https://github.com/muzairkhattak/multimodal-prompt-learning"
    trains = "deep text prompts (first layer from 'a photo') + per-layer text-to-image Linears"
    recipes = (
        Recipe(
            name="inductive-clip",
            source=(
                f"{INDUCTIVE_CLIP_CODE}: FSL/run_maple.sh (config vit_b16); "
                "FSL/configs/trainers/MaPLe/vit_b16.yaml (TRAINER.MAPLE.N_CTX 2, CTX_INIT "
                "'a photo of a', PROMPT_DEPTH 9); FSL/trainers/maple.py; "
                "models_prograddassl/Dassl.pytorch/dassl/config/defaults.py (OPTIM.MOMENTUM "
                "0.9, OPTIM.WEIGHT_DECAY 5e-4) and dassl/optim/lr_scheduler.py"
            ),
            values={
                **DASSL_SGD,
                "lr": 0.0035,
                "epochs": 5,
                "batch_size": 4,
                "n_ctx": 2,
                "depth": 9,
                "ctx_init": "a photo of a",
            },
            notes=(
                "FSL/trainers/maple.py builds no hand-crafted prompt, so no template. "
                + DASSL_RECIPE_NOTE
            ),
        ),
    )

    @dataclass(frozen=True)
    class Config(PromptConfig):
        """MaPLe options (2 tokens, depth 9)."""

        n_ctx: int = hparam(2, "Prompt tokens per layer (shared by both towers).", min=0)
        depth: int = hparam(
            9, "Coupled prompt depth, capped at the smaller tower's block count.", min=1
        )
        ctx_init: str = hparam(
            PHOTO_PREFIX,
            "Prompt words: the first n_ctx tokens are the first-layer text prompts, the rest "
            "stay fixed words; empty or too short: random N(0, 0.02).",
        )

    def session(
        self, backbone: Backbone, support: SupportSet, class_names: Sequence[str], config: Any
    ) -> MapleSession:
        """Build the MaPLe session."""
        return MapleSession(
            backbone,
            support,
            class_names,
            n_ctx=config.n_ctx,
            ctx_init=config.ctx_init,
            depth=config.depth,
            method=self.name,
        )
