"""CLIP-LoRA: low-rank updates of q, k and v in every attention layer of both CLIP towers.

The copied model's ``nn.MultiheadAttention`` modules are first replaced by exact
equivalents with separate ``q_proj``/``k_proj``/``v_proj``/``out_proj`` Linears
(:mod:`~fewtrans_board.blocks.unfuse`, shared with vision LoRA); peft's ``LoraConfig``
then puts LoRA (rank 2, ``lora_alpha`` 1, so scale 0.5, dropout 0.25 on the adapter input)
on the q, k and v Linears of every residual block of the image and text transformers. The
class text features are recomputed by the adapted text tower at every step.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fewtrans_board.api.adapter import hparam
from fewtrans_board.blocks.clip_training import ClipTrainingConfig
from fewtrans_board.core.errors import FewtransError
from fewtrans_board.methods.adapters.clip_tuning.towers import TowerTuningAdapter

if TYPE_CHECKING:
    import torch
    from torch import nn

    from fewtrans_board.api.backbone import Backbone

LORA_TARGETS = r"(visual\.)?transformer\.resblocks\.\d+\.attn\.(q_proj|k_proj|v_proj)"
"""peft ``target_modules`` regex (full match): q/k/v of every block of both towers."""


class ClipLoraAdapter(TowerTuningAdapter):
    """CLIP-LoRA (Zanella & Ben Ayed, CVPRW 2024) with peft on unfused attention."""

    name = "clip-lora"
    description = "CLIP-LoRA: LoRA on q/k/v of every attention layer of both CLIP towers (peft)."
    paper = (
        "Zanella and Ben Ayed, Low-Rank Few-Shot Adaptation of Vision-Language Models, CVPRW 2024"
    )
    code = "https://github.com/MaxZanella/CLIP-LoRA"
    trains = "LoRA A/B of q, k, v in all attention layers of both towers (B zero init)"

    @dataclass(frozen=True)
    class Config(ClipTrainingConfig):
        """CLIP-LoRA hyperparameters.

        Centre: lr 2e-4 (CLIP-LoRA's own, also FewTrans's CLIP start) and FewTrans's 20
        epochs in place of the reference's 500 x shots iterations; Adam without weight
        decay under the FewTrans cosine (the reference uses AdamW, wd 1e-2, cosine to
        1e-6); batch 32 as in the reference.
        """

        rank: int = hparam(2, "LoRA rank r.", min=1)
        alpha: float = hparam(1.0, "LoRA alpha; the update is scaled by alpha / rank.", above=0)
        dropout: float = hparam(
            0.25, "Dropout on the LoRA branch input while training.", min=0, below=1
        )

    def check_image_tower(self, backbone: Backbone) -> None:
        """Refuse image towers without attention blocks.

        Args:
            backbone: the caller's backbone.

        Raises:
            FewtransError: the image tower is not an open_clip ViT (e.g. a ResNet CLIP).
        """
        encoder = backbone.image_encoder
        if not hasattr(getattr(encoder, "transformer", None), "resblocks"):
            raise FewtransError(
                f"clip-lora puts LoRA on q/k/v of the attention blocks of an open_clip ViT "
                f"image tower; {backbone.name} has a {type(encoder).__name__} image tower "
                "(e.g. a ResNet CLIP such as RN50), which has no such blocks. Use a ViT CLIP "
                "(e.g. ViT-B-16), or a method that keeps the image tower frozen (taskres, "
                "clip-adapter, coop, finetune-clip-text)"
            )

    def prepare_model(
        self, source: nn.Module, config: Any
    ) -> tuple[nn.Module, list[torch.Tensor], list[nn.Module]]:
        """Deep-copy, unfuse attention, inject LoRA with peft; only LoRA A/B train."""
        from peft import LoraConfig, inject_adapter_in_model

        from fewtrans_board.blocks.training import train_only
        from fewtrans_board.blocks.unfuse import unfuse_attention

        model: Any = copy.deepcopy(source).eval()
        unfuse_attention(model)
        lora = LoraConfig(
            r=config.rank,
            lora_alpha=config.alpha,
            lora_dropout=config.dropout,
            target_modules=LORA_TARGETS,
            bias="none",
        )
        inject_adapter_in_model(lora, model)
        trainable: list[torch.Tensor] = [
            p for n, p in model.named_parameters() if ".lora_A." in n or ".lora_B." in n
        ]
        blocks = len(model.visual.transformer.resblocks) + len(model.transformer.resblocks)
        expected = 2 * 3 * blocks  # lora_A and lora_B of q, k, v per block
        if len(trainable) != expected:
            raise FewtransError(
                f"clip-lora: expected LoRA on q/k/v of every block of both towers "
                f"({expected} tensors), got {len(trainable)}; is this an open_clip ViT CLIP?"
            )
        train_only(model.parameters(), trainable)
        dropouts = [m for n, m in model.named_modules() if n.endswith(".lora_dropout.default")]
        return model.eval(), trainable, dropouts
