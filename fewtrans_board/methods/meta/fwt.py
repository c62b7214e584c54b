"""Feature-wise transformation (FWT; Tseng et al., ICLR 2020) for meta-training.

In training mode only, features are scaled and shifted per channel after chosen
normalisation layers: ``gamma * x + beta`` with ``gamma ~ N(1, softplus(t_g))`` and
``beta ~ N(0, softplus(t_b))``, one draw per forward pass and channel. BSCD-FSL uses the
single-source variant, whose ``t_g = 0.3`` and ``t_b = 0.5`` are fixed hyperparameters
(Tseng et al.'s initial values; softplus with beta = 100, so the stds are about 0.3 and 0.5).
The transformation lives in forward hooks: it adds no parameters and disappears at test
time, so a checkpoint trained with FWT loads into the plain architecture.

Where (:func:`fwt_layers`), following the reference code (``hytseng0509/CrossDomainFewShot``,
``methods/backbone.py``, whose ``FeatureWiseTransformation2d_fw`` layers replace BatchNorms):

- residual blocks (timm/torchvision ``BasicBlock`` and ``Bottleneck``, recognised by their
  ``downsample`` attribute and BatchNorms): the BatchNorm at the end of the residual branch
  (``bn2``, ``bn3``; the reference's ``SimpleBlock.BN2``) and, in blocks with a projection
  shortcut, the shortcut's BatchNorm (the reference's ``BNshortcut`` is an FWT layer too).
  The stem's BatchNorm and the first BatchNorm inside each branch (``bn1``) stay plain, as
  the reference's ``BatchNorm2d_fw``;
- any other encoder, block by block (:func:`~fewtrans_board.blocks.layers.encoder_blocks`):
  the last normalisation layer of each block. For plain conv stages (the demo CNN) that is
  the stage's BatchNorm, as the reference's ``ConvBlock``; for pre-norm transformer blocks
  it is the LayerNorm before the MLP (``norm2``), a rule of this package (the FWT paper has
  no transformer).

Before this rule the last BatchNorm *inside each ResNet stage* was hooked, which on timm's
``resnet10t`` is the shortcut's BatchNorm only (``layer2.0.downsample.2``): the residual
branch was never transformed.
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


def _residual_layers(encoder: nn.Module) -> list[tuple[str, nn.Module]]:
    from torch import nn

    layers: list[tuple[str, nn.Module]] = []
    for name, unit in encoder.named_modules():
        if not name or not hasattr(unit, "downsample"):
            continue
        branch = [
            (child, m)
            for child, m in unit.named_modules()
            if isinstance(m, nn.BatchNorm2d) and not child.startswith("downsample")
        ]
        if not branch:
            continue
        layers.append((f"{name}.{branch[-1][0]}", branch[-1][1]))
        shortcut = unit.downsample
        if isinstance(shortcut, nn.Module):
            norms = [
                (child, m) for child, m in shortcut.named_modules() if isinstance(m, nn.BatchNorm2d)
            ]
            if norms:
                layers.append((f"{name}.downsample.{norms[-1][0]}", norms[-1][1]))
    return layers


def fwt_layers(encoder: nn.Module) -> list[tuple[str, nn.Module]]:
    """The ``(name, module)`` normalisation layers FWT transforms (see the module docstring).

    Raises:
        FewtransError: the encoder has no such layer.
    """
    from torch import nn

    from fewtrans_board.blocks.layers import encoder_blocks

    layers = _residual_layers(encoder)
    if layers:
        return layers
    names = {id(m): n for n, m in encoder.named_modules()}
    for block in encoder_blocks(encoder):
        inside = [m for m in block.modules() if isinstance(m, nn.BatchNorm2d | nn.LayerNorm)]
        if inside:
            layers.append((names[id(inside[-1])], inside[-1]))
    if not layers:
        raise FewtransError(
            f"{type(encoder).__name__} has no BatchNorm2d/LayerNorm inside its blocks for FWT"
        )
    return layers


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
    """Transform the output of the :func:`fwt_layers` while the encoder trains.

    Args:
        encoder: the image encoder being meta-trained.
        generator: the CPU generator of the FWT draws (seeded by the trainer).

    Yields:
        The number of hooked layers.
    """

    def hook(module: nn.Module, inputs: Any, output: torch.Tensor) -> torch.Tensor | None:
        return feature_wise_transform(output, generator) if module.training else None

    handles = [norm.register_forward_hook(hook) for _, norm in fwt_layers(encoder)]
    try:
        yield len(handles)
    finally:
        for handle in handles:
            handle.remove()
