"""Zero-shot CLIP: class-name prompts through the text tower; the support set is unused."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fewtrans_board.api.adapter import Adapter, AdapterConfig, hparam
from fewtrans_board.blocks.clip_common import TEMPLATE, ClipPredictor, require_text
from fewtrans_board.core.errors import FewtransError

if TYPE_CHECKING:
    import torch

    from fewtrans_board.api.backbone import Backbone
    from fewtrans_board.api.episode_data import ImageSet, SupportSet

TEMPLATE_SETS: dict[str, tuple[str, ...]] = {
    "photo": (TEMPLATE,),
    "photo-ensemble": (
        TEMPLATE,
        "a bad photo of a {}.",
        "a photo of the large {}.",
        "a photo of the small {}.",
        "a cropped photo of a {}.",
        "a close-up photo of a {}.",
        "a bright photo of a {}.",
        "itap of a {}.",
    ),
}


def class_text_weights(
    backbone: Backbone, class_names: Sequence[str], templates: Sequence[str]
) -> torch.Tensor:
    """Class embeddings ``[D, C]``: mean of normalised template embeddings, renormalised."""
    import torch
    import torch.nn.functional as F

    assert backbone.text is not None
    columns = []
    with torch.no_grad():
        for name in class_names:
            tokens = backbone.text.tokenize([t.format(name) for t in templates])
            embedding = F.normalize(backbone.text.encode(tokens).float(), dim=-1).mean(0)
            columns.append(F.normalize(embedding, dim=-1))
    return torch.stack(columns, dim=1)


class ZeroShotClipAdapter(Adapter):
    """CLIP zero-shot classification from class names (no adaptation)."""

    name = "zero-shot-clip"
    description = "CLIP zero-shot: cosine similarity to prompt embeddings of the class names."
    paper = "Radford et al., CLIP, ICML 2021"
    code = "https://github.com/mlfoundations/open_clip"
    trains = "nothing (class-name prompts through the frozen text tower)"
    needs_text = True
    frozen_backbone = True
    training_free = True

    @dataclass(frozen=True)
    class Config(AdapterConfig):
        """Zero-shot options."""

        templates: str = hparam("photo", "Prompt template set: 'photo' or 'photo-ensemble'.")

    def fit(
        self, backbone: Backbone, support: SupportSet, class_names: Sequence[str], config: Config
    ) -> ClipPredictor:
        """Embed the class-name prompts (for the episode's or any other class names)."""
        text = require_text(backbone, self.name)
        if config.templates not in TEMPLATE_SETS:
            raise FewtransError(
                f"zero-shot-clip: unknown template set {config.templates!r}; "
                f"use one of {', '.join(TEMPLATE_SETS)}"
            )
        templates = TEMPLATE_SETS[config.templates]

        def text_features(names: Sequence[str]) -> torch.Tensor:
            return class_text_weights(backbone, names, templates).t()

        def image_features(query: ImageSet) -> torch.Tensor:
            return query.features(backbone)

        return ClipPredictor(image_features, text_features, class_names, text.logit_scale)
