"""KgCoOp: CoOp plus a pull of the prompted text features towards the hand-crafted ones."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fewtrans_board.api.adapter import hparam
from fewtrans_board.methods.adapters.clip_prompts.coop import CoopAdapter, CoopSession

if TYPE_CHECKING:
    import numpy as np
    import torch

    from fewtrans_board.api.backbone import Backbone
    from fewtrans_board.api.episode_data import SupportSet


class KgcoopSession(CoopSession):
    """CoOp session whose loss adds ``weight * (1 - mean_c cos(t_c, t_c^handcrafted))``."""

    def __init__(self, *args: Any, weight: float, **kwargs: Any) -> None:
        from fewtrans_board.blocks.clip_common import handcrafted_text_features

        super().__init__(*args, **kwargs)
        self.weight = weight
        self.handcrafted = handcrafted_text_features(self.backbone, self.class_names).to(
            self.device
        )

    def loss(self, batch: np.ndarray) -> torch.Tensor:
        """Cross-entropy plus the knowledge-guided term."""
        import torch.nn.functional as F

        index = self.index(batch)
        texts = self.text_features(self.class_names)
        logits = self.logit_scale * self.features[index] @ texts.t()
        agreement = (texts * self.handcrafted).sum(-1).mean()
        return F.cross_entropy(logits, self.labels[index]) + self.weight * (1.0 - agreement)


class KgcoopAdapter(CoopAdapter):
    """KgCoOp: CoOp regularised towards the hand-crafted prompt's text features."""

    name = "kgcoop"
    description = (
        "KgCoOp: CoOp + lambda * (1 - cos) to the frozen 'a photo of a {}.' text features."
    )
    paper = (
        "Yao et al., Visual-Language Prompt Tuning with Knowledge-guided Context "
        "Optimization (KgCoOp), CVPR 2023"
    )
    code = "https://github.com/htyao89/KgCoOp"
    trains = "n_ctx shared text context vectors"

    @dataclass(frozen=True)
    class Config(CoopAdapter.Config):
        """KgCoOp options."""

        kg_weight: float = hparam(
            8.0, "lambda of the 1 - cos term (KgCoOp's default 8; FewTrans uses 1).", min=0
        )

    def session(
        self,
        backbone: Backbone,
        support: SupportSet,
        class_names: Sequence[str],
        config: Any,
    ) -> KgcoopSession:
        """Build the KgCoOp session."""
        return KgcoopSession(
            backbone,
            support,
            class_names,
            config.n_ctx,
            config.ctx_init,
            self.name,
            weight=config.kg_weight,
        )
