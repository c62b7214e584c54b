"""Helpers shared by the vision PEFT adapters: ViT lookup, module placement, parameter lists."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

from fewtrans_board.adapters.builtin.vit_parts import VitParts, vit_parts
from fewtrans_board.errors import FewtransError

if TYPE_CHECKING:
    import torch
    from torch import nn

M = TypeVar("M", bound="nn.Module")


def require_vit(encoder: nn.Module, method: str) -> VitParts:
    """Return the ViT parts of ``encoder`` or fail naming the method.

    Args:
        encoder: the image encoder (a deep copy the adapter owns).
        method: adapter name, for the error message.

    Raises:
        FewtransError: the encoder is not a timm or open_clip ViT.
    """
    try:
        return vit_parts(encoder)
    except FewtransError as exc:
        raise FewtransError(f"{method}: {exc}") from exc


def place(host: nn.Module, name: str, module: M, like: nn.Module) -> M:
    """Register ``module`` as child ``name`` of ``host``, on the device and dtype of ``like``.

    Registering injected modules inside the encoder makes them follow ``.to()``, appear in
    ``encoder.parameters()`` and travel with the encoder into the predictor.

    Returns:
        The placed module.
    """
    reference = next(like.parameters())
    module = module.to(device=reference.device, dtype=reference.dtype)
    host.add_module(name, module)
    return module


def parameters_named(encoder: nn.Module, marker: str) -> list[torch.Tensor]:
    """Parameters of ``encoder`` whose qualified name contains ``marker``."""
    return [p for name, p in encoder.named_parameters() if marker in name]
