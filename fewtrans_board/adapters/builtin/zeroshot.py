"""Zero-shot CLIP: class-name prompts through the text tower; the support set is unused."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fewtrans_board.adapters.base import Adapter, AdapterConfig, hparam
from fewtrans_board.errors import FewtransError

if TYPE_CHECKING:
    import torch

    from fewtrans_board.adapters.episode_data import ImageSet, SupportSet
    from fewtrans_board.models.backbone import Backbone

TEMPLATE_SETS: dict[str, tuple[str, ...]] = {
    "photo": ("a photo of a {}.",),
    "photo-ensemble": (
        "a photo of a {}.",
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


class ZeroShotPredictor:
    """``logit_scale * normalize(f(x)) @ W`` with the class text embeddings ``W``."""

    def __init__(self, backbone: Backbone, weights: torch.Tensor) -> None:
        self.backbone = backbone
        self.weights = weights

    def predict(self, query: ImageSet) -> torch.Tensor:
        """Scaled cosine similarities between query images and class prompts."""
        import torch.nn.functional as F

        assert self.backbone.text is not None
        features = F.normalize(query.features(self.backbone), dim=-1)
        return self.backbone.text.logit_scale * features @ self.weights.to(features.device)


class ZeroShotClipAdapter(Adapter):
    """CLIP zero-shot classification from class names (no adaptation)."""

    name = "zero-shot-clip"
    description = "CLIP zero-shot: cosine similarity to prompt embeddings of the class names."
    paper = "Radford et al., CLIP, ICML 2021"
    code = "https://github.com/mlfoundations/open_clip"
    needs_text = True
    frozen_backbone = True

    @dataclass(frozen=True)
    class Config(AdapterConfig):
        """Zero-shot options."""

        templates: str = hparam("photo", "Prompt template set: 'photo' or 'photo-ensemble'.")

    def fit(
        self,
        backbone: Backbone,
        support: SupportSet,
        class_names: Sequence[str],
        config: Config,
    ) -> ZeroShotPredictor:
        """Embed the class-name prompts."""
        if backbone.text is None:
            raise FewtransError(
                "zero-shot-clip needs a CLIP-style model with a text tower; "
                f"{backbone.name} has none"
            )
        if config.templates not in TEMPLATE_SETS:
            raise FewtransError(
                f"zero-shot-clip: unknown template set {config.templates!r}; "
                f"use one of {', '.join(TEMPLATE_SETS)}"
            )
        weights = class_text_weights(backbone, class_names, TEMPLATE_SETS[config.templates])
        return ZeroShotPredictor(backbone, weights)
