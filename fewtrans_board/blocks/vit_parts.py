"""Where transfer methods hook into ViTs: timm ``VisionTransformer`` and open_clip's visual tower.

Both expose a token sequence ``[batch, tokens, width]`` that passes through a list of
residual blocks; methods find the pieces here instead of special-casing architectures.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fewtrans_board.core.errors import FewtransError

if TYPE_CHECKING:
    from torch import nn


@dataclass
class BlockParts:
    """The parts of one transformer block.

    Attributes:
        block: the block module.
        attn: its attention module (timm ``Attention`` or ``nn.MultiheadAttention``).
        mlp: the MLP branch.
        norm1: the norm before attention.
        norm2: the norm before the MLP.
        mlp_branch_end: the last module of the MLP branch (timm ``drop_path2``, open_clip
            ``ls_2``), after LayerScale; its output is what the block adds to the residual
            stream. ``None`` when the block has no such module.
    """

    block: nn.Module
    attn: nn.Module
    mlp: nn.Module
    norm1: nn.Module
    norm2: nn.Module
    mlp_branch_end: nn.Module | None = None


@dataclass
class VitParts:
    """The hookable parts of a ViT image encoder.

    Attributes:
        kind: ``"timm"`` or ``"open_clip"``.
        blocks: the residual blocks in order.
        token_start: module whose output is the full token sequence entering the first block
            (timm ``norm_pre``, open_clip ``ln_pre``).
        patch_embed: the patch projection (timm ``patch_embed.proj``, open_clip ``conv1``).
        width: token width.
        batch_first: whether blocks see ``[batch, tokens, width]``. The output of
            ``token_start`` is ``[batch, tokens, width]`` either way (open_clip's
            ``Transformer`` transposes after it).
    """

    kind: str
    blocks: list[BlockParts]
    token_start: nn.Module
    patch_embed: nn.Module
    width: int
    batch_first: bool


def vit_parts(encoder: Any) -> VitParts:
    """Describe a timm ViT or an open_clip ``VisionTransformer``.

    Raises:
        FewtransError: the encoder is neither (e.g. a ResNet or a CNN).
    """
    if (
        hasattr(encoder, "blocks")
        and hasattr(encoder, "patch_embed")
        and hasattr(encoder, "norm_pre")
    ):
        blocks = [
            BlockParts(b, b.attn, b.mlp, b.norm1, b.norm2, _first_child(b, "drop_path2", "ls2"))
            for b in encoder.blocks
        ]
        return VitParts(
            "timm", blocks, encoder.norm_pre, encoder.patch_embed.proj, int(encoder.embed_dim), True
        )
    transformer = getattr(encoder, "transformer", None)
    if transformer is not None and hasattr(encoder, "ln_pre") and hasattr(encoder, "conv1"):
        blocks = [
            BlockParts(b, b.attn, b.mlp, b.ln_1, b.ln_2, _first_child(b, "ls_2"))
            for b in transformer.resblocks
        ]
        return VitParts(
            "open_clip",
            blocks,
            encoder.ln_pre,
            encoder.conv1,
            int(transformer.width),
            bool(getattr(transformer, "batch_first", True)),
        )
    raise FewtransError(
        f"{type(encoder).__name__} is not a ViT this method supports (timm VisionTransformer or "
        "open_clip VisionTransformer); choose a ViT backbone"
    )


def _first_child(block: Any, *names: str) -> nn.Module | None:
    for name in names:
        child = getattr(block, name, None)
        if child is not None:
            return child  # type: ignore[no-any-return]
    return None
