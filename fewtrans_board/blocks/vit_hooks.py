"""Helpers shared by the vision PEFT adapters: ViT lookup, module placement, parameter lists."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, TypeVar

from fewtrans_board.blocks.vit_parts import VitParts, vit_parts
from fewtrans_board.core.errors import FewtransError

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
    ``encoder.parameters()`` and travel with the encoder into the predictor. The module takes
    the training mode of ``host``: adapters inject into an encoder already put in eval mode
    (the fine-tuning recipe), and a fresh module in train mode would switch on its dropout.

    Returns:
        The placed module.
    """
    reference = next(like.parameters())
    module = module.to(device=reference.device, dtype=reference.dtype)
    module.train(host.training)
    host.add_module(name, module)
    return module


@contextmanager
def injecting(root: nn.Module) -> Iterator[None]:
    """Give modules added under ``root`` inside the block the training mode of their parent.

    For injections done by third-party code (peft): modules created in train mode inside an
    encoder in eval mode would otherwise run their dropout while the encoder trains.

    Args:
        root: the module being edited.
    """
    existing = {id(m) for m in root.modules()}
    yield

    def align(parent: nn.Module) -> None:
        for child in parent.children():
            if id(child) not in existing:
                child.training = parent.training
            align(child)

    align(root)


def parameters_named(encoder: nn.Module, marker: str) -> list[torch.Tensor]:
    """Parameters of ``encoder`` whose qualified name contains ``marker``."""
    return [p for name, p in encoder.named_parameters() if marker in name]
