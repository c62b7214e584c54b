"""TCP: textual-based class-aware prompts.

CoOp-style context ``[SOS][v_1 .. v_n][class][.]`` plus a Textual Knowledge Embedding: a
small MLP (``D -> D/4``, QuickGELU, ``D/4 -> n * W``) maps each class's frozen hand-crafted
text feature to ``n`` class-specific tokens, which overwrite the context positions before
text block ``layer`` (8 in TCP, capped at the last block). Loss: cross-entropy on frozen
image features + ``kg_weight * (1 - cos(text, hand-crafted))``. New class names get their
tokens from the same MLP, so the method scores unseen names too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fewtrans_board.api.adapter import hparam
from fewtrans_board.api.recipe import Recipe
from fewtrans_board.blocks.clip_common import (
    DASSL_RECIPE_NOTE,
    INDUCTIVE_CLIP_CODE,
    inductive_clip_templates,
)
from fewtrans_board.methods.adapters.clip_prompts.coop import CoopAdapter, CoopSession

if TYPE_CHECKING:
    import numpy as np
    import torch

    from fewtrans_board.api.backbone import Backbone
    from fewtrans_board.api.episode_data import SupportSet


class TcpSession(CoopSession):
    """CoOp session whose context is replaced by class-aware tokens inside the text tower."""

    def __init__(self, *args: Any, weight: float, layer: int, template: str, **kwargs: Any) -> None:
        from torch import nn

        from fewtrans_board.blocks.clip_common import handcrafted_text_features
        from fewtrans_board.methods.adapters.clip_prompts.fusion import QuickGELU

        super().__init__(*args, **kwargs)
        self.weight, self.template = weight, template
        self.handcrafted = handcrafted_text_features(self.backbone, self.class_names, template).to(
            self.device
        )
        dim, width, n = self.handcrafted.shape[1], self.prompter.width, self.prompter.n_ctx
        self.meta_net = nn.Sequential(
            nn.Linear(dim, max(dim // 4, 1)), QuickGELU(), nn.Linear(max(dim // 4, 1), n * width)
        ).to(self.device)
        self.add_trainable_module("meta_net", self.meta_net)
        text: Any = self.text
        blocks = text.transformer.resblocks
        self.layer = min(layer, len(blocks) - 1)
        self._class_tokens: torch.Tensor | None = None
        self._batch_first = bool(getattr(text.transformer, "batch_first", True))
        blocks[self.layer].register_forward_pre_hook(self._replace, with_kwargs=True)

    def _replace(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        import torch

        tokens = self._class_tokens
        if tokens is None:
            return None
        x = args[0] if self._batch_first else args[0].transpose(0, 1)
        n = tokens.shape[1]
        x = torch.cat([x[:, :1], tokens.to(x.dtype), x[:, 1 + n :]], dim=1)
        return (x if self._batch_first else x.transpose(0, 1), *args[1:]), kwargs

    def class_tokens(self, class_names: Sequence[str]) -> torch.Tensor:
        """``[C, n, W]`` class-aware tokens from the hand-crafted text features."""
        from fewtrans_board.blocks.clip_common import handcrafted_text_features

        if list(class_names) == self.class_names:
            features = self.handcrafted
        else:
            features = handcrafted_text_features(self.backbone, class_names, self.template)
            features = features.to(self.device)
        tokens: torch.Tensor = self.meta_net(features)
        return tokens.view(len(class_names), self.prompter.n_ctx, -1)

    def text_features(self, class_names: Sequence[str]) -> torch.Tensor:
        """Normalised text features with the class tokens injected at ``layer``."""
        self._class_tokens = self.class_tokens(class_names)
        try:
            return super().text_features(class_names)
        finally:
            self._class_tokens = None

    def loss(self, batch: np.ndarray) -> torch.Tensor:
        """Cross-entropy plus the knowledge-guided term."""
        import torch.nn.functional as F

        index = self.index(batch)
        texts = self.text_features(self.class_names)
        logits = self.logit_scale * self.features[index] @ texts.t()
        agreement = F.cosine_similarity(texts, self.handcrafted, dim=-1).mean()
        return F.cross_entropy(logits, self.labels[index]) + self.weight * (1.0 - agreement)


class TcpAdapter(CoopAdapter):
    """TCP: CoOp context replaced by class-aware tokens generated from text knowledge."""

    name = "tcp"
    description = (
        "TCP: class-aware prompt tokens from frozen text features, injected in a middle text layer."
    )
    paper = "Yao et al., TCP: Textual-based Class-aware Prompt tuning for Visual-Language Model, CVPR 2024"
    code = "https://github.com/htyao89/Textual-based_Class-aware_prompt_tuning"
    trains = "n_ctx context vectors + text-knowledge MLP (D -> D/4 -> n_ctx x W)"
    recipes = (
        Recipe(
            name="inductive-clip",
            source=(
                f"{INDUCTIVE_CLIP_CODE}: FSL/run_tcp.sh (NCTX=4, WEIGHT=1.0, CSC=False, "
                "CTP=end; config vit_b16); FSL/configs/trainers/TCP/vit_b16.yaml (OPTIM.NAME "
                "adam_tpc, TRAINER.COOP.CTX_INIT False); FSL/trainers/tcp.py (loss CE + "
                "8.0 * (1 - cos); CUSTOM_TEMPLATES_ori for the hand-crafted features, "
                "CUSTOM_TEMPLATES for the prompt); FSL/trainers/clip_text_tcp/model.py "
                "(class tokens before block 8, weight 1.0); "
                "models_prograddassl/Dassl.pytorch/dassl/optim/optimizer.py (adam_tpc: Adam "
                "with eps 1e-3), dassl/config/defaults.py (OPTIM.WEIGHT_DECAY 5e-4) and "
                "dassl/optim/lr_scheduler.py"
            ),
            values={
                "optimizer": "adam",
                "adam_eps": 1e-3,
                "weight_decay": 5e-4,
                "lr": 0.002,
                "epochs": 50,
                "batch_size": 32,
                "schedule": "cosine-epoch",
                "warmup_epochs": 1,
                "warmup_lr": 1e-5,
                "n_ctx": 4,
                "ctx_init": "",
                "kg_weight": 8.0,
                "layer": 8,
            },
            per_dataset=inductive_clip_templates("tcp"),
            notes=(
                "run_tcp.sh's WEIGHT=1.0 is the class-token mixing weight, which "
                "clip_text_tcp/model.py fixes at 1.0 anyway; the knowledge term's weight is "
                "8.0, written in tcp.py. The paper's learned prompt carries part of the "
                "template (tcp.py CUSTOM_TEMPLATES: 'X X X X {}, a type of flower.', "
                "'X X X X {}, a type of aircraft.', 'X X X X {} texture.', "
                "'X X X X {}, a type of car' (no full stop), 'X X X X {}, a type of food.', "
                "and for UCF101 the 4 context vectors in place of 'a photo of a' before "
                "'person doing {}.'); this adapter's prompt is always the context, the "
                "class name and '.', as the paper's is on the other datasets. " + DASSL_RECIPE_NOTE
            ),
        ),
    )

    @dataclass(frozen=True)
    class Config(CoopAdapter.Config):
        """TCP options (4 context tokens, layer 8, weight 8)."""

        n_ctx: int = hparam(
            4, "Context tokens (random N(0, 0.02) init); also the class tokens.", min=1
        )
        kg_weight: float = hparam(8.0, "Weight of 1 - cos(text, hand-crafted text).", min=0)
        layer: int = hparam(
            8, "Text block before which the class tokens replace the context (capped).", min=0
        )

    def session(
        self, backbone: Backbone, support: SupportSet, class_names: Sequence[str], config: Any
    ) -> TcpSession:
        """Build the TCP session."""
        from fewtrans_board.core.errors import FewtransError

        if config.layer < 1:
            raise FewtransError(f"{self.name}: layer must be >= 1, got {config.layer}")
        return TcpSession(
            backbone,
            support,
            class_names,
            config.n_ctx,
            config.ctx_init,
            self.name,
            weight=config.kg_weight,
            layer=config.layer,
            template=config.template,
        )
