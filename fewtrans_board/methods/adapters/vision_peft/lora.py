"""FewTrans vision LoRA: rank-4 updates of the query and value projections, through peft."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fewtrans_board.api.adapter import hparam
from fewtrans_board.blocks.finetune import FinetuneAdapter

if TYPE_CHECKING:
    import torch
    from torch import nn

TARGETS = ["q_proj", "v_proj"]


class LoraAdapter(FinetuneAdapter):
    """LoRA on q and v of every attention block (FewTrans ``lora_ViT``) plus a linear head.

    The fused q/k/v projection is first split (:func:`unfuse_qkv`), then peft injects
    ``W x + B A x`` with rank ``r``, A Kaiming-uniform, B zero, no dropout and
    ``lora_alpha = r`` (scale 1). Centre: the FewTrans released LoRA centre
    (2e-3, 1e-2, 40 epochs), batch 64.
    """

    name = "lora"
    trains = "LoRA A/B on attention q and v projections + linear head"
    description = "FewTrans vision LoRA: rank-4 q/v updates of every attention block (peft)."
    paper = "Hu et al., LoRA, ICLR 2022; FewTrans (arXiv:2603.00478) mode 'LoRA'"
    code = "https://github.com/Frankluox/FewTrans"

    @dataclass(frozen=True)
    class Config(FinetuneAdapter.Config):
        """LoRA hyperparameters; defaults are the FewTrans released centre."""

        lr_backbone: float = hparam(2e-3, "Adam learning rate of the LoRA matrices.", hpe="lr")
        lr_head: float = hparam(1e-2, "Adam learning rate of the linear head.", hpe="lr")
        epochs: int = hparam(40, "Passes over the support set.", hpe="epochs")
        batch_size: int = hparam(64, "Optimiser batch size.", min=1)
        rank: int = hparam(4, "LoRA rank r; lora_alpha = r, so the update's scale is 1.", min=1)

    def trainable(self, encoder: nn.Module, config: Any) -> list[torch.Tensor]:
        """Split q/k/v, inject LoRA into q_proj/v_proj and return the LoRA parameters."""
        from peft import LoraConfig, inject_adapter_in_model

        from fewtrans_board.blocks.unfuse import unfuse_qkv
        from fewtrans_board.blocks.vit_hooks import injecting, parameters_named, require_vit

        require_vit(encoder, self.name)
        unfuse_qkv(encoder)
        lora = LoraConfig(
            r=config.rank,
            lora_alpha=config.rank,
            lora_dropout=0.0,
            target_modules=TARGETS,
            init_lora_weights=True,
            bias="none",
        )
        with injecting(encoder):
            inject_adapter_in_model(lora, encoder)
        return parameters_named(encoder, "lora_")
