"""SSF scale-and-shift modules (FewTrans variant) attached with forward hooks.

``y = gamma * x + beta`` per channel, with ``gamma ~ N(1, std)`` and ``beta ~ N(0, std)``
(std 0.02 in SSF/FewTrans; std 0 gives an exact identity), after the patch embedding
(channel axis 1 of the convolution output) and after both norms of every block (last axis).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from fewtrans_board.blocks.vit_hooks import place, require_vit


class ScaleShift(nn.Module):
    """Per-channel affine map applied to a module's output by a forward hook.

    Args:
        width: number of channels.
        init_std: std of the normal initialisation around scale 1 and shift 0.
        channel_axis: axis of the channels in the hooked output (1 for convolutions,
            -1 for token tensors).
    """

    def __init__(self, width: int, init_std: float, channel_axis: int) -> None:
        super().__init__()
        self.scale = nn.Parameter(1.0 + init_std * torch.randn(width))
        self.shift = nn.Parameter(init_std * torch.randn(width))
        self.channel_axis = channel_axis

    def on_output(self, module: nn.Module, args: Any, output: torch.Tensor) -> torch.Tensor:
        """Forward hook: scale and shift the output's channels."""
        shape = [1] * output.dim()
        shape[self.channel_axis] = -1
        return output * self.scale.view(shape) + self.shift.view(shape)


def attach_ssf(encoder: nn.Module, init_std: float, method: str) -> list[torch.Tensor]:
    """Attach SSF after the patch embedding and each block's norm1/norm2; return parameters."""
    parts = require_vit(encoder, method)
    sites: list[tuple[nn.Module, str, nn.Module, int]] = [
        (encoder, "ssf_patch", parts.patch_embed, 1)
    ]
    for part in parts.blocks:
        sites += [
            (part.block, "ssf_norm1", part.norm1, -1),
            (part.block, "ssf_norm2", part.norm2, -1),
        ]
    params: list[torch.Tensor] = []
    for host, name, target, axis in sites:
        ssf = place(host, name, ScaleShift(parts.width, init_std, axis), encoder)
        target.register_forward_hook(ssf.on_output)
        params.extend(ssf.parameters())
    return params
