"""Tiny random-init backbones and toy episodes for fast CPU contract checks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fewtrans_board.api.backbone import Backbone
from fewtrans_board.api.episode_data import ImageSet, SupportSet

if TYPE_CHECKING:
    import torch

TINY_CLIP_NAME = "fewtrans-tiny-clip"
TINY_IMAGE_SIZE = 32


def tiny_vit_backbone(seed: int = 0, image_size: int = TINY_IMAGE_SIZE) -> Backbone:
    """Return a random-init timm ViT (2 blocks, width 32) wrapped as a ``Backbone``.

    Args:
        seed: torch seed for the random weights.
        image_size: input side in pixels (patch size 8).
    """
    import timm
    import torch

    torch.manual_seed(seed)
    model: Any = timm.create_model(
        "vit_tiny_patch16_224",
        pretrained=False,
        num_classes=0,
        img_size=image_size,
        patch_size=8,
        embed_dim=32,
        depth=2,
        num_heads=2,
    ).eval()
    return Backbone(
        name="tiny-vit.random",
        image_encoder=model,
        feature_dim=int(getattr(model, "head_hidden_size", model.num_features)),
        image_size=image_size,
        weights_id=f"tiny-vit-seed{seed}",
        info={"family": "timm", "architecture": "vit_tiny (test size)"},
    )


def register_tiny_clip_config() -> str:
    """Register the tiny open_clip config (a JSON file shipped here) and return its name."""
    from pathlib import Path

    import open_clip

    if TINY_CLIP_NAME not in open_clip.list_models():
        open_clip.add_model_config(Path(__file__).with_name(f"{TINY_CLIP_NAME}.json"))
    return TINY_CLIP_NAME


def tiny_clip_backbone(seed: int = 0) -> Backbone:
    """Return a random-init tiny open_clip model (OpenAI-style text tower) as a ``Backbone``."""
    import open_clip
    import torch

    from fewtrans_board.models.open_clip_family import backbone_from_open_clip, tokenizer_for

    name = register_tiny_clip_config()
    torch.manual_seed(seed)
    model = open_clip.create_model(name, pretrained=None).eval()
    tokenizer = tokenizer_for(name)
    return backbone_from_open_clip(
        model,
        tokenizer,
        name="tiny-clip.random",
        weights_id=f"tiny-clip-seed{seed}",
        architecture=name,
    )


@dataclass
class ToyEpisode:
    """A synthetic episode: support set, query images and (hidden) query labels."""

    support: SupportSet
    query: ImageSet
    query_labels: torch.Tensor
    class_names: list[str]


def toy_episode(
    shots: tuple[int, ...] = (1, 2, 3),
    n_query_per_class: int = 2,
    image_size: int = TINY_IMAGE_SIZE,
    seed: int = 0,
) -> ToyEpisode:
    """Build a small imbalanced episode of class-dependent random images.

    Each class has a distinct mean colour so that a reasonable adapter beats chance.

    Args:
        shots: support images per class (the way is ``len(shots)``).
        n_query_per_class: query images per class.
        image_size: image side in pixels.
        seed: generator seed.
    """
    import torch

    g = torch.Generator().manual_seed(seed)
    n_way = len(shots)
    centres = torch.randn(n_way, 3, 1, 1, generator=g)

    def make(counts: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        labels = torch.cat([torch.full((k,), c, dtype=torch.long) for c, k in enumerate(counts)])
        noise = 0.5 * torch.randn(len(labels), 3, image_size, image_size, generator=g)
        return centres[labels] + noise, labels

    s_pix, s_lab = make(list(shots))
    q_pix, q_lab = make([n_query_per_class] * n_way)
    return ToyEpisode(
        support=SupportSet(ImageSet(s_pix), s_lab, n_way),
        query=ImageSet(q_pix),
        query_labels=q_lab,
        class_names=[f"class {c}" for c in range(n_way)],
    )
