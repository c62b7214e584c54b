"""KgCoOp: CoOp plus a pull of the prompted text features towards the hand-crafted ones."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fewtrans_board.api.adapter import hparam
from fewtrans_board.api.recipe import Recipe
from fewtrans_board.blocks.clip_common import (
    DASSL_RECIPE_NOTE,
    DASSL_SGD,
    INDUCTIVE_CLIP_CODE,
    inductive_clip_templates,
)
from fewtrans_board.methods.adapters.clip_prompts.coop import CoopAdapter, CoopSession

if TYPE_CHECKING:
    import numpy as np
    import torch

    from fewtrans_board.api.backbone import Backbone
    from fewtrans_board.api.episode_data import SupportSet


class KgcoopSession(CoopSession):
    """CoOp session whose loss adds ``weight * (1 - mean_c cos(t_c, t_c^handcrafted))``.

    The hand-crafted features are those of ``template`` (the config's).
    """

    def __init__(self, *args: Any, weight: float, template: str, **kwargs: Any) -> None:
        from fewtrans_board.blocks.clip_common import handcrafted_text_features

        super().__init__(*args, **kwargs)
        self.weight = weight
        self.handcrafted = handcrafted_text_features(self.backbone, self.class_names, template).to(
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
    recipes = (
        Recipe(
            name="inductive-clip",
            source=(
                f"{INDUCTIVE_CLIP_CODE}: FSL/run_kgcoop.sh (NCTX=4, WEIGHT=8.0, CSC=False, "
                "CTP=end; config vit_b16; Dassl.ProGrad.pytorch); "
                "FSL/configs/trainers/KgCoOp/vit_b16.yaml (TRAINER.COOP.CTX_INIT True); "
                "FSL/trainers/kgcoop.py (CTX_INIT: context from 'a photo of a'; "
                "CUSTOM_TEMPLATES); models_prograddassl/Dassl.ProGrad.pytorch/dassl/config/"
                "defaults.py (OPTIM.MOMENTUM 0.9, OPTIM.WEIGHT_DECAY 5e-4), "
                "dassl/optim/lr_scheduler.py and dassl/data/data_manager.py"
            ),
            values={
                **DASSL_SGD,
                "lr": 0.002,
                "epochs": 100,
                "batch_size": 128,
                "n_ctx": 4,
                "ctx_init": "a photo of a",
                "kg_weight": 8.0,
            },
            per_dataset=inductive_clip_templates("kgcoop"),
            notes=(
                "Dassl.ProGrad.pytorch's train loader drops an epoch's last incomplete batch "
                "when the support set holds at least 128 images (drop_last); here every "
                "epoch ends with that partial batch. " + DASSL_RECIPE_NOTE
            ),
        ),
    )

    @dataclass(frozen=True)
    class Config(CoopAdapter.Config):
        """KgCoOp options."""

        kg_weight: float = hparam(
            8.0, "lambda of the 1 - cos term (KgCoOp's default 8; FewTrans uses 1).", min=0
        )

    def session(
        self, backbone: Backbone, support: SupportSet, class_names: Sequence[str], config: Any
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
            template=config.template,
        )
