"""Feature-wise transformation (FWT; Tseng et al., ICLR 2020) for meta-training.

After the last normalisation layer of every block, in training mode only, features are
scaled and shifted per channel: ``gamma * x + beta`` with ``gamma ~ N(1, softplus(t_g))``
and ``beta ~ N(0, softplus(t_b))``, one draw per forward pass and channel. BSCD-FSL uses the
single-source variant, whose ``t_g = 0.3`` and ``t_b = 0.5`` are fixed hyperparameters
(Tseng et al.'s initial values; softplus with beta = 100, so the stds are about 0.3 and 0.5).
The transformation lives in forward hooks: it adds no parameters and disappears at test
time, so a checkpoint trained with FWT loads into the plain architecture.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from fewtrans_board.core.errors import FewtransError

if TYPE_CHECKING:
    import torch
    from torch import nn

GAMMA, BETA, SOFTPLUS_BETA = 0.3, 0.5, 100.0


def _norm_layers(encoder: nn.Module) -> list[nn.Module]:
    from torch import nn

    from fewtrans_board.blocks.layers import encoder_blocks

    norms: list[nn.Module] = []
    for block in encoder_blocks(encoder):
        inside = [m for m in block.modules() if isinstance(m, nn.BatchNorm2d | nn.LayerNorm)]
        if inside:
            norms.append(inside[-1])
    if not norms:
        raise FewtransError(
            f"{type(encoder).__name__} has no BatchNorm2d/LayerNorm inside its blocks for FWT"
        )
    return norms


def feature_wise_transform(features: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Apply one random FWT draw to ``[N, C, ...]`` (channels) or ``[..., C]`` (tokens)."""
    import torch
    import torch.nn.functional as F

    channels_first = features.ndim == 4
    channels = features.shape[1] if channels_first else features.shape[-1]
    shape = (1, channels, 1, 1) if channels_first else (channels,)
    std_g = F.softplus(torch.tensor(GAMMA), beta=SOFTPLUS_BETA)
    std_b = F.softplus(torch.tensor(BETA), beta=SOFTPLUS_BETA)
    noise = torch.randn((2, *shape), generator=generator).to(features.device, features.dtype)
    return (1.0 + noise[0] * std_g.to(features.device)) * features + noise[1] * std_b.to(
        features.device
    )


@contextmanager
def fwt_hooks(encoder: nn.Module, generator: torch.Generator) -> Iterator[int]:
    """Transform the output of each block's last norm layer while the encoder trains.

    Args:
        encoder: the image encoder being meta-trained.
        generator: the CPU generator of the FWT draws (seeded by the trainer).

    Yields:
        The number of hooked layers.
    """

    def hook(module: nn.Module, inputs: Any, output: torch.Tensor) -> torch.Tensor | None:
        return feature_wise_transform(output, generator) if module.training else None

    handles = [norm.register_forward_hook(hook) for norm in _norm_layers(encoder)]
    try:
        yield len(handles)
    finally:
        for handle in handles:
            handle.remove()
