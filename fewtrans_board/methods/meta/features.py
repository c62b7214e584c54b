"""Feature maps of an image encoder, for the methods that compare maps (RelationNet).

Backbones expose pooled features (``[N, D]``); RelationNet's relation module convolves the
encoder's last feature *map* instead. The map is:

- timm models (they have ``forward_features``): its output, ``[N, C, H, W]`` for CNNs (a
  ResNet's ``layer4`` output before global pooling); for ViTs the patch tokens (prefix tokens
  dropped, after the final norm) laid out on their patch grid as ``[N, D, h, w]``;
- any other encoder: the output of its last block (:func:`~fewtrans_board.blocks.layers.encoder_blocks`;
  the demo CNN's last conv stage), captured with a forward hook while the encoder runs.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from fewtrans_board.core.errors import FewtransError

if TYPE_CHECKING:
    import torch
    from torch import nn


def _tokens_to_map(encoder: nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    prefix = int(getattr(encoder, "num_prefix_tokens", 0))
    patches = tokens[:, prefix:, :]
    grid = getattr(getattr(encoder, "patch_embed", None), "grid_size", None)
    count = patches.shape[1]
    if grid is not None and int(grid[0]) * int(grid[1]) == count:
        h, w = int(grid[0]), int(grid[1])
    else:
        side = math.isqrt(count)
        if side * side != count:
            raise FewtransError(
                f"cannot lay {count} patch tokens of {type(encoder).__name__} on a grid"
            )
        h = w = side
    return patches.transpose(1, 2).reshape(len(tokens), tokens.shape[-1], h, w)


def _as_map(encoder: nn.Module, output: Any) -> torch.Tensor:
    tensor: torch.Tensor = output[0] if isinstance(output, tuple | list) else output
    if tensor.ndim == 4:
        return tensor
    if tensor.ndim == 3:
        return _tokens_to_map(encoder, tensor)
    raise FewtransError(
        f"{type(encoder).__name__} gives no feature map (output shape {tuple(tensor.shape)})"
    )


def feature_maps(encoder: nn.Module, pixels: torch.Tensor) -> torch.Tensor:
    """The encoder's last feature map ``[N, C, H, W]`` of ``pixels`` (see the module docstring).

    Runs in the encoder's current mode and keeps gradients (meta-training differentiates it).
    """
    forward_features = getattr(encoder, "forward_features", None)
    if callable(forward_features):
        return _as_map(encoder, forward_features(pixels)).float()
    from fewtrans_board.blocks.layers import encoder_blocks

    captured: list[torch.Tensor] = []

    def hook(module: nn.Module, inputs: Any, output: Any) -> None:
        captured.append(_as_map(encoder, output))

    handle = encoder_blocks(encoder)[-1].register_forward_hook(hook)
    try:
        encoder(pixels)
    finally:
        handle.remove()
    return captured[-1].float()


def map_shape(encoder: nn.Module, image_size: int, device: str) -> tuple[int, int, int]:
    """``(C, H, W)`` of :func:`feature_maps` at ``image_size`` (one eval-mode probe forward)."""
    import torch

    was_training = encoder.training
    encoder.eval()
    try:
        with torch.no_grad():
            probe = feature_maps(encoder, torch.zeros(1, 3, image_size, image_size, device=device))
    finally:
        encoder.train(was_training)
    c, h, w = probe.shape[1:]
    return int(c), int(h), int(w)
