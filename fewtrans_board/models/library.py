"""A library of pretrained models used as one backbone (``library:MODEL+MODEL...``).

BSCD-FSL's multi-model methods (IMS-f, "all embeddings") pick layers from several models.
The library backbone holds every member; its plain forward concatenates the members'
features (so any frozen-feature adapter can use it), and IMS-f reaches the members through
:func:`library_members`. Members keep their own input sizes: pixels are resized for each.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fewtrans_board.api.backbone import Backbone
from fewtrans_board.core.errors import FewtransError

if TYPE_CHECKING:
    import torch
    from torch import nn

SEPARATOR = "+"


@dataclass(frozen=True)
class LibraryMember:
    """One model of a library: its name, encoder, input size and feature size."""

    name: str
    encoder: nn.Module
    image_size: int
    feature_dim: int


def resize_pixels(pixels: torch.Tensor, size: int) -> torch.Tensor:
    """Pixels resized (bilinear, antialiased) to ``size`` unless they already have it."""
    import torch.nn.functional as F

    if pixels.shape[-1] == size and pixels.shape[-2] == size:
        return pixels
    return F.interpolate(pixels, size=(size, size), mode="bilinear", antialias=True)


def _encoder_class() -> type:
    from torch import nn

    class LibraryEncoder(nn.Module):
        """Concatenated features of every member (each on pixels resized to its size)."""

        def __init__(self, members: list[Backbone]) -> None:
            super().__init__()
            self.members = nn.ModuleList([b.image_encoder for b in members])
            self.names = [b.name for b in members]
            self.sizes = [b.image_size for b in members]
            self.feature_dims = [b.feature_dim for b in members]

        def forward(self, pixels: Any) -> Any:
            import torch

            return torch.cat(
                [
                    m(resize_pixels(pixels, s)).float()
                    for m, s in zip(self.members, self.sizes, strict=True)
                ],
                dim=1,
            )

    return LibraryEncoder


def parse_members(argument: str) -> list[tuple[str, Path | None]]:
    """``MODEL[=CHECKPOINT]+MODEL...`` into ``(name, checkpoint)`` pairs.

    Raises:
        FewtransError: an empty member or no member at all.
    """
    members = []
    for part in argument.split(SEPARATOR):
        name, _, weights = part.partition("=")
        if not name:
            raise FewtransError(f"library:{argument}: empty member name")
        members.append((name, Path(weights) if weights else None))
    return members  # one member is BSCD-FSL Table 5's first row


def load_library(
    argument: str,
    weights: Path | None,
    device: str,
    load_member: Callable[[str, Path | None, str], Backbone],
) -> Backbone:
    """Load every member and wrap them as one backbone.

    Args:
        argument: ``MODEL[=CHECKPOINT]+MODEL[=CHECKPOINT]...``.
        weights: must be ``None`` (members name their own checkpoints).
        device: torch device.
        load_member: ``(model name, checkpoint, device) -> Backbone`` (the registry's).

    Raises:
        FewtransError: ``--weights`` given, a member is unknown or fails to load.
    """
    if weights is not None:
        raise FewtransError(
            "model 'library' takes no --weights; give each member's checkpoint as MODEL=FILE"
        )
    loaded = [load_member(name, path, device) for name, path in parse_members(argument)]
    encoder = _encoder_class()(loaded)
    digest = hashlib.sha256("|".join(b.weights_id for b in loaded).encode()).hexdigest()
    return Backbone(
        name=f"library:{argument}",
        image_encoder=encoder.to(device).eval(),
        feature_dim=sum(b.feature_dim for b in loaded),
        image_size=loaded[0].image_size,
        weights_id="library:" + digest,
        device=device,
        info={
            "family": "library",
            "members": [
                {"name": b.name, "weights_id": b.weights_id, "info": b.info} for b in loaded
            ],
        },
    )


def library_members(backbone: Backbone) -> list[LibraryMember]:
    """The members of a library backbone, or the backbone itself as a library of one."""
    encoder: Any = backbone.image_encoder
    if type(encoder).__name__ == "LibraryEncoder" and hasattr(encoder, "members"):
        return [
            LibraryMember(name, member, size, dim)
            for name, member, size, dim in zip(
                encoder.names, encoder.members, encoder.sizes, encoder.feature_dims, strict=True
            )
        ]
    return [LibraryMember(backbone.name, encoder, backbone.image_size, backbone.feature_dim)]
