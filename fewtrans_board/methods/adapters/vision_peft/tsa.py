"""TSA for ViTs (FewTrans mode ``TSA``): parallel adapters and a nearest-centroid (NCC) head.

Features are L2-normalised and mapped by a ``D x D`` linear transform that starts as the
identity; class prototypes are the means of the transformed support features, and logits
are ``10 * cos(feature, prototype)``. Training minimises the cross-entropy of the support
images against the prototypes of the same batch (URL/TSA's support NCC loss; with the whole
support set in one batch, exactly that); classes absent from a batch are left out of its
softmax. Queries are classified against the prototypes of the whole support set under the
final adapters and transform.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fewtrans_board.api.adapter import hparam
from fewtrans_board.blocks.finetune import FinetuneAdapter, FinetunePredictor, encoder_plan
from fewtrans_board.blocks.lockstep import TrainingPlan

if TYPE_CHECKING:
    import torch
    from torch import nn

    from fewtrans_board.api.backbone import Backbone
    from fewtrans_board.api.episode_data import SupportSet


class TsaAdapter(FinetuneAdapter):
    """Parallel (AdaptFormer-style) adapters + identity-initialised transform + NCC head.

    Only the adapters (lr_backbone) and the transform (lr_head) train. FewTrans releases no
    TSA centre; we use the LoRA centre (2e-3, 1e-2, 40 epochs, batch 64).
    """

    name = "tsa"
    trains = "parallel bottleneck adapters + identity-initialised linear transform (NCC head)"
    description = "TSA for ViTs: parallel adapters and a prototype-cosine (NCC) head (FewTrans)."
    paper = (
        "Li, Liu and Bilen, Cross-domain Few-shot Learning with Task-specific Adapters, CVPR 2022"
    )
    code = "https://github.com/VICO-UoE/URL"

    @dataclass(frozen=True)
    class Config(FinetuneAdapter.Config):
        """TSA hyperparameters (centre chosen by us; see the class docstring)."""

        lr_backbone: float = hparam(2e-3, "Adam learning rate of the adapters.", hpe="lr")
        lr_head: float = hparam(
            1e-2, "Adam learning rate of the D x D feature transform.", hpe="lr"
        )
        epochs: int = hparam(40, "Passes over the support set.", hpe="epochs")
        batch_size: int = hparam(64, "Optimiser batch size.", min=1)
        hidden: int = hparam(64, "Bottleneck width of each adapter.", min=1)
        adapter_scale: float = hparam(1.0, "Multiplier of the parallel adapters' output.", min=0)
        logit_scale: float = hparam(
            10.0, "Multiplier of the prototype cosine similarities.", above=0
        )

    def trainable(self, encoder: nn.Module, config: Any) -> list[torch.Tensor]:
        """Attach the parallel adapters and return their parameters."""
        from fewtrans_board.blocks.bottleneck import attach_parallel

        return attach_parallel(encoder, config.hidden, config.adapter_scale, self.name)

    def plan(
        self, backbone: Backbone, support: SupportSet, class_names: Sequence[str], config: Any
    ) -> TrainingPlan:
        """Train adapters and transform with the support NCC loss; the head is the NCC head."""
        from fewtrans_board.methods.adapters.vision_peft.ncc import NccHead

        device = backbone.device
        encoder, trainable = self.copy_encoder(backbone, config)
        head = NccHead(backbone.feature_dim, support.n_way, config.logit_scale, device)

        def finish() -> FinetunePredictor:
            import torch

            from fewtrans_board.blocks.training import autocast, normalized

            pixels = support.images.pixels.to(device)
            with torch.no_grad(), autocast(device):
                features = encoder(pixels)
            head.set_prototypes(normalized(features), support.labels.to(device))
            return FinetunePredictor(encoder, head, device, transductive=False)

        return encoder_plan(
            encoder, trainable, head, head.batch_loss, support, config, device, finish
        )
