"""Sequential bottleneck adapter (FewTrans mode ``adapter``) on every block's MLP output."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fewtrans_board.api.adapter import hparam
from fewtrans_board.blocks.finetune import FinetuneAdapter

if TYPE_CHECKING:
    import torch
    from torch import nn


class SequentialBottleneckAdapter(FinetuneAdapter):
    """``h <- h + up(relu(down(h)))`` on the MLP branch output of every block.

    ``h`` is the branch's residual update after LayerScale, ``h = ls2(MLP(LN2(x)))`` (plain
    ``MLP(LN2(x))`` for blocks without LayerScale), so the block computes
    ``x + h + A(h)``; see :mod:`~fewtrans_board.blocks.bottleneck`.
    Up-projection and biases start at zero (identity at init). FewTrans releases no centre
    for this mode; we use the LoRA centre (2e-3, 1e-2, 40 epochs, batch 64).
    """

    name = "adapter"
    trains = "bottleneck adapters after every MLP + linear head"
    description = "Sequential bottleneck adapters (D-64-D) on every block's MLP output (FewTrans)."
    paper = "Houlsby et al., Parameter-Efficient Transfer Learning for NLP, ICML 2019; FewTrans"
    code = "https://github.com/Frankluox/FewTrans"

    @dataclass(frozen=True)
    class Config(FinetuneAdapter.Config):
        """Adapter hyperparameters (centre chosen by us; see the class docstring)."""

        lr_backbone: float = hparam(2e-3, "Adam learning rate of the adapters.", hpe="lr")
        lr_head: float = hparam(1e-2, "Adam learning rate of the linear head.", hpe="lr")
        epochs: int = hparam(40, "Passes over the support set.", hpe="epochs")
        batch_size: int = hparam(64, "Optimiser batch size.", min=1)
        hidden: int = hparam(64, "Bottleneck width of each adapter.", min=1)

    def trainable(self, encoder: nn.Module, config: Any) -> list[torch.Tensor]:
        """Attach the adapters and return their parameters."""
        from fewtrans_board.blocks.bottleneck import attach_sequential

        return attach_sequential(encoder, config.hidden, self.name)
