"""BitFit: only the bias parameters of the encoder (and the head) train."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fewtrans_board.api.adapter import hparam
from fewtrans_board.blocks.finetune import FinetuneAdapter

if TYPE_CHECKING:
    import torch
    from torch import nn


class BitFitAdapter(FinetuneAdapter):
    """Train every parameter whose name contains ``"bias"`` (FewTrans mode ``bias``).

    That covers attention in-projection/output biases, MLP biases, LayerNorm biases and the
    patch-embedding bias. FewTrans releases no centre for this mode; the default centre is
    our choice: backbone lr 1e-3 (between full fine-tuning's 1e-5 and LoRA's 2e-3, biases
    being pretrained values that should move less than fresh zero-init modules), head lr
    1e-2 and 40 epochs as for LoRA, batch 32 as in FewTrans's bias configuration.
    """

    name = "bitfit"
    trains = "all bias parameters of the image encoder + linear head"
    description = "BitFit: fine-tune only the encoder's biases (FewTrans mode 'bias')."
    paper = "Ben Zaken et al., BitFit, ACL 2022; FewTrans (arXiv:2603.00478) mode 'bias'"
    code = "https://github.com/Frankluox/FewTrans"

    @dataclass(frozen=True)
    class Config(FinetuneAdapter.Config):
        """BitFit hyperparameters (centre chosen by us; see the class docstring)."""

        lr_backbone: float = hparam(1e-3, "Adam learning rate of the bias parameters.", hpe="lr")
        lr_head: float = hparam(1e-2, "Adam learning rate of the linear head.", hpe="lr")
        epochs: int = hparam(40, "Passes over the support set.", hpe="epochs")
        batch_size: int = hparam(32, "Optimiser batch size (FewTrans bias mode: 32).", min=1)

    def trainable(self, encoder: nn.Module, config: Any) -> list[torch.Tensor]:
        """The encoder's bias parameters (ViT encoders only)."""
        from fewtrans_board.blocks.vit_hooks import parameters_named, require_vit

        require_vit(encoder, self.name)
        return parameters_named(encoder, "bias")
