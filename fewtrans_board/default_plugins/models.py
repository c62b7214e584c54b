"""Built-in models: the demo CNN pair, the timm and open_clip families, curated backbones.

The backbones of FewTrans Table IV (and the iBOT and EsViT release families) live in
:mod:`fewtrans_board.models.curated`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fewtrans_board.api.backbone import Backbone
from fewtrans_board.api.hookspecs import hookimpl
from fewtrans_board.api.model_spec import ModelRegistry, ModelSpec
from fewtrans_board.core.errors import FewtransError


def _timm(argument: str, weights: Path | None, device: str) -> Backbone:
    from fewtrans_board.models.timm_family import RANDOM_TAG, load_timm_backbone

    architecture, _, tag = argument.rpartition(".")
    if architecture and tag == RANDOM_TAG:
        return load_timm_backbone(
            architecture, weights, device, name=f"timm:{argument}", random_init=True
        )
    return load_timm_backbone(argument, weights, device, name=f"timm:{argument}")


def _open_clip(argument: str, weights: Path | None, device: str) -> Backbone:
    from fewtrans_board.models.open_clip_family import load_open_clip_backbone

    return load_open_clip_backbone(argument, weights, device)


def _demo_pretrained(weights: Path | None, device: str) -> Backbone:
    from fewtrans_board.methods.trained.demo_cnn import load_pretrained

    return load_pretrained(weights, device)


def _demo_random(weights: Path | None, device: str) -> Backbone:
    from fewtrans_board.methods.trained.demo_cnn import load_random

    return load_random(weights, device)


def _demo_clip(name: str, weights: Path | None, device: str) -> Backbone:
    from fewtrans_board.methods.trained.demo_clip import load_demo_clip

    return load_demo_clip(name, weights, device)


def _library(
    argument: str, weights: Path | None, device: str, *, registry: ModelRegistry | None = None
) -> Backbone:
    from fewtrans_board.models.library import load_library
    from fewtrans_board.registry.lookup import registry_or_installed

    members = registry_or_installed(registry)

    def load_member(name: str, path: Path | None, member_device: str) -> Backbone:
        return members.load_model(name, path, member_device)

    return load_library(argument, weights, device, load_member)


def _meta_trained(
    weights: Path | None, device: str, *, registry: ModelRegistry | None = None
) -> Backbone:
    from fewtrans_board.methods.meta.model import load_meta_trained

    return load_meta_trained(weights, device, registry=registry)


def _curated_timm(architecture: str, name: str, weights: Path | None, device: str) -> Backbone:
    from fewtrans_board.models.timm_family import load_timm_backbone

    return load_timm_backbone(architecture, weights, device, name=name)


def _curated_clip(argument: str, name: str, weights: Path | None, device: str) -> Backbone:
    from fewtrans_board.models.open_clip_family import load_open_clip_backbone

    return load_open_clip_backbone(argument, weights, device, name=name)


def _known_timm_architecture(argument: str) -> None:
    import timm

    if argument.startswith(("hf-hub:", "local-dir:")):
        return  # timm resolves these at load time
    if not timm.is_model(argument):
        raise FewtransError(
            f"timm does not know architecture {argument.partition('.')[0]!r}; see "
            "timm.list_models() (timm:<model name>[.<pretrained tag>])"
        )


def _timm_spec(name: str, architecture: str, **fields: Any) -> ModelSpec:
    return ModelSpec(
        name=name,
        loader=functools.partial(_curated_timm, architecture, name),
        family="timm",
        architecture=architecture,
        source=f"hf-hub:timm/{architecture}",
        **fields,
    )


MODELS: tuple[ModelSpec, ...] = (
    ModelSpec(
        name="demo-cnn.digits",
        loader=_demo_pretrained,
        family="demo",
        architecture="demo-cnn",
        source="bundled (pretrained on digits 0-4 by python -m fewtrans_board.methods.trained.demo_cnn)",
        license="MIT",
        description="Small CNN pretrained on the digits source classes; the demo backbone.",
    ),
    ModelSpec(
        name="demo-cnn.random",
        loader=_demo_random,
        family="demo",
        architecture="demo-cnn",
        source="random-init (seed 0)",
        license="MIT",
        description="Random-init twin of demo-cnn.digits, to show what pretraining buys.",
    ),
    ModelSpec(
        name="demo-clip.digits",
        loader=functools.partial(_demo_clip, "demo-clip.digits"),
        family="demo",
        architecture="demo-clip",
        source="bundled (trained by python -m fewtrans_board.methods.trained.demo_clip_train)",
        license="MIT",
        description="Tiny open_clip dual encoder trained on all ten digits with name prompts.",
        modalities=("image", "text"),
    ),
    ModelSpec(
        name="demo-clip.digits-0-4",
        loader=functools.partial(_demo_clip, "demo-clip.digits-0-4"),
        family="demo",
        architecture="demo-clip",
        source="bundled (trained by python -m fewtrans_board.methods.trained.demo_clip_train)",
        license="MIT",
        description="demo-clip trained from scratch without the digits 5-9 (the oracle).",
        modalities=("image", "text"),
    ),
    ModelSpec(
        name="meta-trained",
        loader=_meta_trained,
        family="meta",
        architecture="base model named in the checkpoint",
        source="--weights CHECKPOINT written by 'fewtrans-board meta-train'",
        license="per base model",
        description="A meta-trained checkpoint (ProtoNet, MatchingNet, ...) on its base model.",
        paper="Guo et al., BSCD-FSL, ECCV 2020 (meta-learning baselines)",
    ),
    ModelSpec(
        name="timm",
        loader=None,
        family="timm",
        architecture="any",
        source="hf-hub or --weights",
        license="per model",
        description=(
            "Any timm architecture: timm:<model name>[.<pretrained tag>], or "
            "timm:<model name>.random for seeded random-init weights (no download)."
        ),
        family_loader=_timm,
        argument_check=_known_timm_architecture,
        argument_help=(
            "a timm model name with optional pretrained tag, "
            "e.g. vit_small_patch16_224.augreg_in21k, or .random for random-init weights"
        ),
    ),
    ModelSpec(
        name="open-clip",
        loader=None,
        family="open_clip",
        architecture="any",
        source="hf-hub or --weights",
        license="per model",
        description="Any open_clip model: open-clip:<architecture>/<pretrained tag>.",
        modalities=("image", "text"),
        family_loader=_open_clip,
        argument_help="ARCH/TAG as in open_clip.list_pretrained(), e.g. ViT-B-16/openai",
    ),
    ModelSpec(
        name="library",
        loader=None,
        family="library",
        architecture="several models",
        source="each member's own source",
        license="per member",
        description="Several models as one backbone (IMS-f, all embeddings): library:M1+M2[+...].",
        paper="Guo et al., BSCD-FSL, ECCV 2020 (transfer from multiple pre-trained models)",
        family_loader=_library,
        argument_help="models joined by '+', each optionally MODEL=CHECKPOINT, e.g. demo-cnn.digits+demo-cnn.random",
    ),
    ModelSpec(
        name="clip-vit-b16.openai",
        loader=functools.partial(_curated_clip, "ViT-B-16/openai", "clip-vit-b16.openai"),
        family="open_clip",
        architecture="ViT-B-16",
        source="open_clip ViT-B-16 pretrained='openai'",
        license="MIT (OpenAI CLIP)",
        description="OpenAI CLIP ViT-B/16, the FewTrans default multimodal backbone.",
        paper="Radford et al., Learning Transferable Visual Models From Natural Language "
        "Supervision, 2021",
        modalities=("image", "text"),
    ),
    _timm_spec(
        "vit-b16.augreg-in21k",
        "vit_base_patch16_224.augreg_in21k",
        license="Apache-2.0",
        description="Supervised ViT-B/16 on ImageNet-21k (AugReg).",
        paper="Steiner et al., How to train your ViT?, 2021",
    ),
)


@hookimpl
def register_models(register: Callable[[ModelSpec], None]) -> None:
    """Register the built-in models (with every backbone of FewTrans Table IV)."""
    from fewtrans_board.models.curated import table_iv_models

    for spec in (*MODELS, *table_iv_models()):
        register(spec)
