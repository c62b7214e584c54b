"""CoPrompt: MaPLe prompts + feature adapters, kept consistent with frozen CLIP.

MaPLe's coupled prompts (2 tokens, depth 9, from "a photo of a"); bottleneck adapters
(``Linear(D, D/4)``, ReLU, ``Linear(D/4, D)``, ReLU, no biases) on the final image and text
features, mixed in with ratios 0.1 (image) and 0.2 (text). Loss: cross-entropy +
``consistency_weight * [(1 - cos(text, frozen text of an LLM description)) +
(1 - cos(image, frozen image))]``; each step draws one description index (torch's global
generator) and class ``c`` uses description ``index mod n_c``. CoPrompt's second image view
is a separate augmentation; adapters here get no augmentation, so both views are the same
preprocessed image. Descriptions come from :mod:`.descriptions`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fewtrans_board.api.adapter import hparam
from fewtrans_board.blocks.training import upcast
from fewtrans_board.core.errors import FewtransError
from fewtrans_board.methods.adapters.clip_prompts.maple import MapleAdapter, MapleSession

if TYPE_CHECKING:
    import numpy as np
    import torch
    from torch import nn

    from fewtrans_board.api.backbone import Backbone
    from fewtrans_board.api.episode_data import ImageSet, SupportSet
    from fewtrans_board.blocks.clip_common import ClipPredictor

IMAGE_RATIO = 0.1
TEXT_RATIO = 0.2


def feature_adapter(dim: int, reduction: int = 4) -> nn.Module:
    """``Linear(D, D/r)``, ReLU, ``Linear(D/r, D)``, ReLU, without biases."""
    from torch import nn

    hidden = max(dim // reduction, 1)
    return nn.Sequential(
        nn.Linear(dim, hidden, bias=False), nn.ReLU(), nn.Linear(hidden, dim, bias=False), nn.ReLU()
    )


def description_features(backbone: Backbone, descriptions: list[list[str]]) -> list[torch.Tensor]:
    """Normalised frozen text features ``[n_c, D]`` of every class's descriptions."""
    import torch
    import torch.nn.functional as F

    assert backbone.text is not None
    out = []
    with torch.no_grad():
        for items in descriptions:
            encoded = upcast(backbone.text.encode(backbone.text.tokenize(items)))
            out.append(F.normalize(encoded, dim=-1).to(backbone.device))
    return out


class CopromptSession(MapleSession):
    """MaPLe session with feature adapters and consistency to frozen CLIP."""

    batchable = False
    not_batchable_reason = "CoPrompt's loss draws a random description per step"

    def __init__(
        self,
        backbone: Backbone,
        support: SupportSet,
        class_names: Sequence[str],
        *,
        weight: float,
        fallback: str | None,
        **kwargs: Any,
    ) -> None:
        import torch.nn.functional as F

        from fewtrans_board.methods.adapters.clip_prompts.descriptions import descriptions_for

        super().__init__(backbone, support, class_names, **kwargs)
        dim = backbone.feature_dim
        self.image_adapter = feature_adapter(dim).to(self.device)
        self.text_adapter = feature_adapter(dim).to(self.device)
        self.add_trainable_module("image_adapter", self.image_adapter)
        self.add_trainable_module("text_adapter", self.text_adapter)
        self.descriptions = description_features(
            backbone, descriptions_for(self.class_names, fallback)
        )
        self.frozen_images = F.normalize(upcast(support.images.features(backbone)), dim=-1).to(
            self.device
        )
        self.weight = weight

    def adapted_images(self, pixels: torch.Tensor) -> torch.Tensor:
        """Normalised ``0.1 * A(f) + 0.9 * f`` of the prompted image features."""
        import torch.nn.functional as F

        from fewtrans_board.blocks.training import autocast

        with autocast(self.device):
            features = upcast(self.model.visual(pixels))
        mixed = IMAGE_RATIO * self.image_adapter(features) + (1 - IMAGE_RATIO) * features
        return F.normalize(mixed, dim=-1)

    def text_features(self, class_names: Sequence[str]) -> torch.Tensor:
        """Normalised ``0.2 * A(t) + 0.8 * t`` of the prompted text features."""
        import torch.nn.functional as F

        features = super().text_features(class_names)
        mixed = TEXT_RATIO * self.text_adapter(features) + (1 - TEXT_RATIO) * features
        return F.normalize(mixed, dim=-1)

    def loss(self, batch: np.ndarray) -> torch.Tensor:
        """CE + text consistency to one description per class + image consistency."""
        import torch
        import torch.nn.functional as F

        index = torch.as_tensor(batch, device=self.device)
        images = self.adapted_images(self.pixels[index])
        texts = self.text_features(self.class_names)
        ce = F.cross_entropy(self.logit_scale * images @ texts.t(), self.labels[index])
        pick = int(torch.randint(max(len(d) for d in self.descriptions), (1,)))
        targets = torch.stack([d[pick % len(d)] for d in self.descriptions])
        text_gap = 1.0 - F.cosine_similarity(texts, targets, dim=-1).mean()
        image_gap = 1.0 - F.cosine_similarity(images, self.frozen_images[index], dim=-1).mean()
        return ce + self.weight * (text_gap + image_gap)

    def predictor(self) -> ClipPredictor:
        """Adapted prompted images against adapted prompted texts of any class names."""
        from fewtrans_board.blocks.clip_common import (
            ClipPredictor,
            batched_images,
            cached_for,
        )

        def images(query: ImageSet) -> torch.Tensor:
            return batched_images(self.adapted_images, query.pixels, self.device)  # type: ignore[arg-type]

        return ClipPredictor(
            images,
            cached_for(self.class_names, self.text_features),
            self.class_names,
            self.logit_scale,
        )


class CopromptAdapter(MapleAdapter):
    """CoPrompt: consistency-guided MaPLe prompts with feature adapters."""

    name = "coprompt"
    description = "CoPrompt: MaPLe prompts + feature adapters, consistent with frozen CLIP and LLM class descriptions."
    paper = (
        "Roy and Etemad, Consistency-guided Prompt Learning for Vision-Language Models "
        "(CoPrompt), ICLR 2024"
    )
    code = "https://github.com/ShuvenduRoy/CoPrompt"
    trains = "MaPLe prompts and projections + image/text bottleneck adapters"

    @dataclass(frozen=True)
    class Config(MapleAdapter.Config):
        """CoPrompt options (paper (b)'s config: consistency weight 1, cosine distillation)."""

        consistency_weight: float = hparam(
            1.0, "Weight of the text + image consistency terms.", min=0
        )
        missing_descriptions: str = hparam(
            "error",
            "Classes without shipped descriptions: 'error', or 'template' to use "
            "'a photo of a {}.' as their one description.",
        )

    def session(
        self,
        backbone: Backbone,
        support: SupportSet,
        class_names: Sequence[str],
        config: Any,
    ) -> CopromptSession:
        """Build the CoPrompt session."""
        from fewtrans_board.blocks.clip_common import TEMPLATE

        if config.missing_descriptions not in ("error", "template"):
            raise FewtransError(
                f"{self.name}: missing_descriptions must be 'error' or 'template', "
                f"got {config.missing_descriptions!r}"
            )
        return CopromptSession(
            backbone,
            support,
            class_names,
            weight=config.consistency_weight,
            fallback=TEMPLATE if config.missing_descriptions == "template" else None,
            n_ctx=config.n_ctx,
            ctx_init=config.ctx_init,
            depth=config.depth,
            method=self.name,
        )
