"""SSF, FewTrans variant: scale and shift after the patch embedding and every block norm."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fewtrans_board.api.adapter import hparam
from fewtrans_board.blocks.finetune import FinetuneAdapter

if TYPE_CHECKING:
    import torch
    from torch import nn


class SsfAdapter(FinetuneAdapter):
    """Per-channel ``gamma * x + beta`` after patch embedding, norm1 and norm2 of each block.

    Only the SSF parameters and the head train. FewTrans releases no centre for SSF; we use
    the LoRA centre (2e-3, 1e-2, 40 epochs, batch 64: "other PEFT" batch size), since SSF
    also trains a few freshly initialised near-identity parameters.
    """

    name = "ssf"
    trains = "SSF scales/shifts (patch embedding, norm1, norm2) + linear head"
    description = "SSF scale-and-shift tuning, FewTrans variant (patch embedding and block norms)."
    paper = "Lian et al., SSF, NeurIPS 2022; FewTrans (arXiv:2603.00478) mode 'SSF'"
    code = "https://github.com/dongzelian/SSF"

    @dataclass(frozen=True)
    class Config(FinetuneAdapter.Config):
        """SSF hyperparameters (centre chosen by us; see the class docstring)."""

        lr_backbone: float = hparam(2e-3, "Adam learning rate of the SSF parameters.", hpe="lr")
        lr_head: float = hparam(1e-2, "Adam learning rate of the linear head.", hpe="lr")
        epochs: int = hparam(40, "Passes over the support set.", hpe="epochs")
        batch_size: int = hparam(64, "Optimiser batch size.", min=1)
        init_std: float = hparam(
            0.02,
            "Std of the scale ~ N(1, std) and shift ~ N(0, std) init; 0 = exact identity.",
            min=0,
        )

    def trainable(self, encoder: nn.Module, config: Any) -> list[torch.Tensor]:
        """Attach the SSF modules and return their parameters."""
        from fewtrans_board.methods.adapters.vision_peft.scale_shift import attach_ssf

        return attach_ssf(encoder, config.init_std, self.name)
