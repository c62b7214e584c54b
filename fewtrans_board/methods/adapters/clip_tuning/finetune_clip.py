"""FewTrans CLIP fine-tuning: visualFT, textFT and allFT.

The chosen tower(s) of a copied CLIP model train in full (the text tower includes the
token and positional embeddings, the final LayerNorm and the projection); the other tower
and the logit scale stay frozen. The classifier is always the text features of the
config's ``template`` ("a photo of a {}." by default) from the (possibly training) text
tower, logits ``logit_scale * cos``.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fewtrans_board.api.adapter import hparam
from fewtrans_board.blocks.clip_training import ClipTrainingConfig
from fewtrans_board.methods.adapters.clip_tuning.towers import TowerTuningAdapter

if TYPE_CHECKING:
    import torch
    from torch import nn

FROZEN_PARAMETERS = ("logit_scale", "logit_bias")
"""Top-level CLIP parameters that belong to neither tower (always frozen)."""


def tower_of(parameter_name: str) -> str | None:
    """``"visual"``, ``"text"`` or ``None`` (logit scale/bias) for a CLIP parameter name."""
    if parameter_name.startswith("visual."):
        return "visual"
    if parameter_name in FROZEN_PARAMETERS:
        return None
    return "text"


class FinetuneClipAdapter(TowerTuningAdapter):
    """Base of the FewTrans CLIP fine-tuning modes; ``towers`` names what trains (both here).

    The frozen tower is not copied: the copy shares the caller's modules for it and never
    runs them (frozen image features come from the cache, frozen text features from the
    caller's text tower without gradients).
    """

    name = "finetune-clip-both"
    description = "FewTrans allFT: both CLIP towers train; text-feature classifier, frozen scale."
    paper = "Luo et al., FewTrans (arXiv:2603.00478), mode 'allFT'"
    code = "https://github.com/Frankluox/FewTrans"
    trains = "all image- and text-tower parameters (logit scale frozen)"

    @dataclass(frozen=True)
    class Config(ClipTrainingConfig):
        """Fine-tuning hyperparameters.

        Centre: lr 1e-5 (FewTrans's backbone fine-tuning lr), 20 epochs (FewTrans's CLIP
        start point), batch 32.
        """

        lr: float = hparam(1e-5, "Adam learning rate of the trained tower(s).", hpe="lr")

    def prepare_model(
        self, source: nn.Module, config: Any
    ) -> tuple[nn.Module, list[torch.Tensor], list[nn.Module]]:
        """Copy the trained tower(s), share the frozen one, mark the trained parameters."""
        from fewtrans_board.blocks.clip_common import TEXT_TOWER_PARTS
        from fewtrans_board.blocks.training import train_only

        shared: list[object] = []
        if "visual" not in self.towers:
            shared.append(source.visual)
        if "text" not in self.towers:
            shared.extend(
                part
                for part in (getattr(source, name, None) for name in TEXT_TOWER_PARTS)
                if part is not None
            )
        model = copy.deepcopy(source, {id(part): part for part in shared}).eval()
        original = {id(p) for p in source.parameters()}
        trainable: list[torch.Tensor] = [
            p
            for n, p in model.named_parameters()
            if tower_of(n) in self.towers and id(p) not in original
        ]
        # The caller's parameters in the shared tower keep their flags.
        copied = (p for p in model.parameters() if id(p) not in original)
        return model, train_only(copied, trainable), []


class FinetuneClipVisualAdapter(FinetuneClipAdapter):
    """FewTrans visualFT: the image tower trains; frozen text-feature classifier."""

    name = "finetune-clip-visual"
    description = "FewTrans visualFT: CLIP image tower trains against frozen class text features."
    paper = "Luo et al., FewTrans (arXiv:2603.00478), mode 'visualFT'"
    trains = "all image-tower parameters (text tower and logit scale frozen)"
    towers = ("visual",)


class FinetuneClipTextAdapter(FinetuneClipAdapter):
    """FewTrans textFT: the text tower (with token embedding) trains; frozen image features."""

    name = "finetune-clip-text"
    description = "FewTrans textFT: CLIP text tower trains on cached frozen image features."
    paper = "Luo et al., FewTrans (arXiv:2603.00478), mode 'textFT'"
    trains = "all text-tower parameters incl. token embedding (image tower, scale frozen)"
    towers = ("text",)
