"""Tiny random-init backbones of the real families, for smoke runs of a reproduction.

``reproduce TARGET --limit 1 --swap-model MODEL=smoke-vit.random`` runs every step of a
paper's table on a laptop in minutes before device hours are spent on it: the same code
paths as the paper's backbone (timm ViT, timm ResNet, open_clip dual encoder), at 32 px with
two blocks of width 32 (the ResNet at 64 px). Their accuracies mean nothing. They take
``--weights`` only to load a checkpoint made from them (a meta-trained smoke backbone).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

from fewtrans_board.api.backbone import Backbone
from fewtrans_board.api.hookspecs import hookimpl
from fewtrans_board.api.model_spec import ModelSpec
from fewtrans_board.core.errors import FewtransError

SMOKE_SIZE = 32


def _with_weights(backbone: Backbone, weights: Path | None) -> Backbone:
    """``backbone`` with its weights loaded from ``weights``, or as it is.

    A meta-trained smoke backbone's checkpoint holds the image encoder; an unlearned smoke
    CLIP's holds the whole dual encoder (both towers).
    """
    if weights is None:
        return backbone
    from safetensors.torch import load_file

    from fewtrans_board.models.weights import file_sha256

    try:
        module = getattr(backbone.text, "model", backbone.image_encoder)
        module.load_state_dict(load_file(str(weights)))
    except (OSError, RuntimeError) as exc:
        raise FewtransError(f"{backbone.name}: {weights} does not fit its encoder: {exc}") from exc
    return dataclasses.replace(backbone, weights_id="sha256:" + file_sha256(weights))


def _vit(weights: Path | None, device: str) -> Backbone:
    from fewtrans_board.testing.tiny import tiny_vit_backbone

    backbone = _with_weights(tiny_vit_backbone(image_size=SMOKE_SIZE), weights)
    backbone.image_encoder.to(device)
    return dataclasses.replace(backbone, name="smoke-vit.random", device=device)


def _resnet(weights: Path | None, device: str) -> Backbone:
    from fewtrans_board.models.timm_family import load_timm_backbone

    backbone = load_timm_backbone(
        "resnet10t", weights, device, name="smoke-resnet.random", random_init=weights is None
    )
    # 64 px: BSCD-FSL's recipes train BatchNorm on batches of one, which needs more than
    # the 1x1 map a 32 px image leaves after resnet10t's 32x downsampling
    return dataclasses.replace(backbone, image_size=2 * SMOKE_SIZE)


def _clip(weights: Path | None, device: str) -> Backbone:
    from fewtrans_board.testing.tiny import tiny_clip_backbone

    backbone = _with_weights(tiny_clip_backbone(), weights)
    getattr(backbone.text, "model", backbone.image_encoder).to(device)  # both towers
    return dataclasses.replace(backbone, name="smoke-clip.random", device=device)


def _spec(
    name: str, loader: Callable[..., Backbone], family: str, architecture: str, **extra: object
) -> ModelSpec:
    return ModelSpec(
        name=name,
        loader=loader,
        family=family,
        architecture=architecture,
        source="random-init (torch seed 0), built here: nothing is downloaded",
        license="MIT",
        description=f"Tiny {architecture} at {SMOKE_SIZE} px for smoke runs; its accuracy means nothing.",
        **extra,  # type: ignore[arg-type]
    )


@hookimpl
def register_models(register: Callable[[ModelSpec], None]) -> None:
    """Register the three smoke backbones."""
    register(_spec("smoke-vit.random", _vit, "timm", "ViT (2 blocks, width 32, patch 8)"))
    register(_spec("smoke-resnet.random", _resnet, "timm", "resnet10t (64 px)"))
    register(
        _spec(
            "smoke-clip.random",
            _clip,
            "open_clip",
            "CLIP ViT (2 blocks, width 32) with a text tower",
            modalities=("image", "text"),
        )
    )
