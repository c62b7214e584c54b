"""Deep visual prompt tuning (VPT-deep), FewTrans vision-only recipe."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fewtrans_board.api.adapter import hparam
from fewtrans_board.blocks.finetune import FinetuneAdapter

if TYPE_CHECKING:
    import torch
    from torch import nn


class VptAdapter(FinetuneAdapter):
    """Learned prompt tokens before every block (:class:`DeepVisualPrompts`) plus a head.

    FewTrans: 8 tokens, all 12 blocks, N(0, 0.02) init; the released grid is
    {5e-4, 2e-3, 1e-2} x {0.02, 0.1, 0.5} at 15 epochs, batch 32, so the centre is
    (2e-3, 0.1, 15).
    """

    name = "vpt"
    trains = "deep prompt tokens + linear head"
    description = "VPT-deep: 8 learned prompt tokens per block, frozen ViT (FewTrans vision VPT)."
    paper = "Jia et al., Visual Prompt Tuning, ECCV 2022; FewTrans mode 'vpt'"
    code = "https://github.com/KMnP/vpt"

    @dataclass(frozen=True)
    class Config(FinetuneAdapter.Config):
        """VPT hyperparameters; defaults are the FewTrans released centre."""

        lr_backbone: float = hparam(2e-3, "Adam learning rate of the prompt tokens.", hpe="lr")
        lr_head: float = hparam(0.1, "Adam learning rate of the linear head.", hpe="lr")
        epochs: int = hparam(15, "Passes over the support set.", hpe="epochs")
        batch_size: int = hparam(32, "Optimiser batch size (FewTrans VPT: 32).", min=1)
        n_tokens: int = hparam(8, "Prompt tokens per block.", min=1)
        depth: int = hparam(0, "Blocks that get their own prompts; 0 means all blocks.", min=0)
        init_std: float = hparam(0.02, "Std of the normal prompt initialisation.", min=0)

    def trainable(self, encoder: nn.Module, config: Any) -> list[torch.Tensor]:
        """Attach the prompts to the encoder and return them."""
        from fewtrans_board.blocks.deep_prompts import DeepVisualPrompts
        from fewtrans_board.blocks.vit_hooks import place, require_vit
        from fewtrans_board.core.errors import FewtransError

        parts = require_vit(encoder, self.name)
        depth = config.depth or len(parts.blocks)
        if depth > len(parts.blocks):  # the declared range cannot know the model's depth
            raise FewtransError(
                f"vpt: need 0 <= depth <= {len(parts.blocks)} (this model's block count), "
                f"got depth={config.depth}"
            )
        prompts = DeepVisualPrompts(config.n_tokens, depth, parts.width, config.init_std)
        prompts = place(encoder, "vpt_prompts", prompts, encoder)
        prompts.attach(encoder)
        return [prompts.prompts]
