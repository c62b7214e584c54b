"""AdaptFormer: a bottleneck parallel to every block's MLP, FewTrans scale 1."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fewtrans_board.api.adapter import hparam
from fewtrans_board.blocks.finetune import FinetuneAdapter

if TYPE_CHECKING:
    import torch
    from torch import nn


class AdaptFormerAdapter(FinetuneAdapter):
    """``x <- x + MLP(LN2(x)) + s * up(relu(down(x)))`` in every block.

    ``x`` is the residual stream after attention. In blocks with LayerScale the MLP term is
    ``ls2(MLP(LN2(x)))`` and the adapter term stays outside it, as AdaptFormer defines. The
    up-projection and biases start at zero; FewTrans uses ``s = 1`` (the original 0.1).
    FewTrans releases no centre for this mode; we use the LoRA centre (2e-3, 1e-2, 40
    epochs, batch 64).
    """

    name = "adaptformer"
    trains = "bottleneck adapters parallel to every MLP + linear head"
    description = "AdaptFormer: parallel bottleneck adapters (D-64-D, scale 1) beside every MLP."
    paper = "Chen et al., AdaptFormer, NeurIPS 2022; FewTrans mode 'adaptformer'"
    code = "https://github.com/ShoufaChen/AdaptFormer"

    @dataclass(frozen=True)
    class Config(FinetuneAdapter.Config):
        """AdaptFormer hyperparameters (centre chosen by us; see the class docstring)."""

        lr_backbone: float = hparam(2e-3, "Adam learning rate of the adapters.", hpe="lr")
        lr_head: float = hparam(1e-2, "Adam learning rate of the linear head.", hpe="lr")
        epochs: int = hparam(40, "Passes over the support set.", hpe="epochs")
        batch_size: int = hparam(64, "Optimiser batch size.", min=1)
        hidden: int = hparam(64, "Bottleneck width of each adapter.", min=1)
        scale: float = hparam(
            1.0, "Multiplier s of the adapter output (FewTrans 1, paper 0.1).", min=0
        )

    def trainable(self, encoder: nn.Module, config: Any) -> list[torch.Tensor]:
        """Attach the parallel adapters and return their parameters."""
        from fewtrans_board.blocks.bottleneck import attach_parallel

        return attach_parallel(encoder, config.hidden, config.scale, self.name)
