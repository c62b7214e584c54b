"""The backbones of FewTrans Table IV, each pinned to the weights of the paper's pretraining.

timm names carry the hub tag of the weights (``resnet50.tv_in1k``); iBOT and EsViT are not
in timm or open_clip, so their entries load the authors' release checkpoint (``--weights``)
onto the timm architecture it matches (:mod:`fewtrans_board.models.releases`). The OpenAI
CLIP ViT-B/16 is the open_clip entry ``clip-vit-b16.openai``.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from fewtrans_board.api.backbone import Backbone
from fewtrans_board.api.model_spec import ModelSpec

IMG_224 = {"img_size": 224}
"""FewTrans feeds every backbone 224 px images (``IMG_SIZE=224``); DINOv2 is built at 518."""


def _hub_timm(
    architecture: str,
    model_kwargs: dict[str, Any],
    name: str,
    weights: Path | None,
    device: str,
) -> Backbone:
    from fewtrans_board.models.releases import timm_checkpoint
    from fewtrans_board.models.timm_family import load_timm_backbone

    return load_timm_backbone(
        architecture,
        weights,
        device,
        name=name,
        model_kwargs=model_kwargs,
        checkpoint=timm_checkpoint,
    )


def _release(
    project: str, architecture: str, name: str, weights: Path | None, device: str
) -> Backbone:
    from fewtrans_board.models.releases import ESVIT, IBOT, load_release_backbone

    release = {"ibot": IBOT, "esvit": ESVIT}[project]
    return load_release_backbone(release, architecture, weights, device, name=name)


def hub_spec(name: str, architecture: str, **fields: Any) -> ModelSpec:
    """A timm entry whose weights come from the hub under ``architecture``'s tag."""
    kwargs = fields.pop("model_kwargs", {})
    return ModelSpec(
        name=name,
        loader=functools.partial(_hub_timm, architecture, kwargs, name),
        family="timm",
        architecture=architecture,
        source=f"hf-hub:timm/{architecture}",
        **fields,
    )


def release_spec(name: str, project: str, architecture: str, **fields: Any) -> ModelSpec:
    """An entry that loads a project's release checkpoint onto a timm architecture."""
    return ModelSpec(
        name=name,
        loader=functools.partial(_release, project, architecture, name),
        family=project,
        architecture=architecture,
        **fields,
    )


def _ibot_family(argument: str, weights: Path | None, device: str) -> Backbone:
    return _release("ibot", argument, f"ibot:{argument}", weights, device)


def _esvit_family(argument: str, weights: Path | None, device: str) -> Backbone:
    return _release("esvit", argument, f"esvit:{argument}", weights, device)


IBOT_URL = "https://github.com/bytedance/ibot#pre-trained-models"
ESVIT_URL = "https://github.com/microsoft/esvit#pretrained-models"
ESVIT_SWIN_B = (
    "https://chunyleu.blob.core.windows.net/output/ckpts/esvit/swin/swin_base/"
    "bl_lr0.0005_gpu16_bs32_multicrop_epoch300_dino_aug/continued_from0200_dense/"
    "checkpoint_best.pth"
)


def supervised_models() -> tuple[ModelSpec, ...]:
    """Table IV's supervised backbones: ResNet-50, Swin-B, ConvNeXt-B (IN-1k), BiT (IN-21k)."""
    return (
        hub_spec(
            "resnet50.tv-in1k",
            "resnet50.tv_in1k",
            license="BSD-3-Clause (torchvision)",
            description=(
                "ResNet-50 supervised on ImageNet-1k, torchvision's original weights (Table IV "
                "'ResNet-50, IN-1M': FewTrans's resnet50.py is torchvision's ResNet, and the "
                "paper notes it 'does not use most of the training tricks')."
            ),
            paper="He et al., Deep Residual Learning for Image Recognition, CVPR 2016",
        ),
        hub_spec(
            "swin-b.ms-in1k",
            "swin_base_patch4_window7_224.ms_in1k",
            license="MIT",
            description=(
                "Swin-B (patch 4, window 7, 224 px) supervised on ImageNet-1k, Microsoft's "
                "release (Table IV 'Swin-B, IN-1M'; FewTrans builds swin_base_patch4_window7_224)."
            ),
            paper="Liu et al., Swin Transformer, ICCV 2021",
        ),
        hub_spec(
            "convnext-b.fb-in1k",
            "convnext_base.fb_in1k",
            license="MIT (facebookresearch/ConvNeXt)",
            description=(
                "ConvNeXt-B supervised on ImageNet-1k at 224 px, Meta's release (Table IV "
                "'ConvNext-B, IN-1M')."
            ),
            paper="Liu et al., A ConvNet for the 2020s, CVPR 2022",
        ),
        hub_spec(
            "bit-r101x1.goog-in21k",
            "resnetv2_101x1_bit.goog_in21k",
            license="Apache-2.0",
            description=(
                "BiT-M R101x1 supervised on ImageNet-21k, not fine-tuned (Table IV 'BiT-R101, "
                "IN-14M'). The paper names R101; FewTrans's BiT.py defaults to the 3x wider "
                "R101x3, which is timm:resnetv2_101x3_bit.goog_in21k."
            ),
            paper="Kolesnikov et al., Big Transfer (BiT), ECCV 2020",
        ),
    )


def self_supervised_models() -> tuple[ModelSpec, ...]:
    """Table IV's self-supervised backbones: MAE, iBOT, EsViT (IN-1k) and DINOv2 (LVD-142M)."""
    return (
        hub_spec(
            "mae-vit-b16.in1k",
            "vit_base_patch16_224.mae",
            model_kwargs={"global_pool": "avg", "fc_norm": False},
            license="CC-BY-NC-4.0",
            description=(
                "MAE ViT-B/16 self-supervised on ImageNet-1k, the pretraining checkpoint (Table "
                "IV 'MAE-base'). Features: the mean of the patch tokens after the final norm; "
                "FewTrans's mae_official.py pools the mean through a fresh LayerNorm instead."
            ),
            paper="He et al., Masked Autoencoders Are Scalable Vision Learners, CVPR 2022",
        ),
        release_spec(
            "ibot-vit-b16.in1k",
            "ibot",
            "vit_base_patch16_224",
            source=f"--weights: the iBOT ViT-B/16 ImageNet-1k release ({IBOT_URL}): "
            "backbone (t) checkpoint_teacher.pth, or the full checkpoint (its teacher)",
            license="Apache-2.0",
            description=(
                "iBOT ViT-B/16 self-supervised on ImageNet-1k (Table IV 'IBOT-ViT'): the "
                "release's teacher backbone on timm's vit_base_patch16_224 (the same parameter "
                "names); features: the class token after the final norm, as in FewTrans."
            ),
            paper="Zhou et al., iBOT: Image BERT Pre-Training with Online Tokenizer, ICLR 2022",
        ),
        release_spec(
            "esvit-swin-b.in1k",
            "esvit",
            "swin_base_patch4_window7_224",
            source=f"--weights: the EsViT Swin-B (W=7) ImageNet-1k checkpoint_best.pth "
            f"({ESVIT_URL})",
            license="MIT",
            description=(
                "EsViT Swin-B (window 7) self-supervised on ImageNet-1k with view- and "
                "region-level tasks (Table IV 'EsViT-SwinB'): the release's teacher on timm's "
                "swin_base_patch4_window7_224, converted by timm's Swin converter; features: "
                "the mean of the final normed tokens, as EsViT's forward_features. File: "
                + ESVIT_SWIN_B
            ),
            paper="Li et al., Efficient Self-supervised Vision Transformers (EsViT), ICLR 2022",
        ),
        hub_spec(
            "dinov2-vit-s14.lvd142m",
            "vit_small_patch14_dinov2.lvd142m",
            model_kwargs=IMG_224,
            license="Apache-2.0",
            description=(
                "DINOv2 ViT-S/14 self-supervised on LVD-142M (Table IV 'DINOv2-small'), run at "
                "224 px like every FewTrans backbone: position embeddings resampled from 518."
            ),
            paper="Oquab et al., DINOv2, 2023",
        ),
        hub_spec(
            "dinov2-vit-b14.lvd142m",
            "vit_base_patch14_dinov2.lvd142m",
            model_kwargs=IMG_224,
            license="Apache-2.0",
            description=(
                "DINOv2 ViT-B/14 self-supervised on LVD-142M (Table IV 'DINOv2-base'), run at "
                "224 px: position embeddings resampled from 518."
            ),
            paper="Oquab et al., DINOv2, 2023",
        ),
    )


def release_families() -> tuple[ModelSpec, ...]:
    """``ibot:ARCH`` and ``esvit:ARCH``: any release of the two projects on its timm twin."""
    return (
        ModelSpec(
            name="ibot",
            loader=None,
            family="ibot",
            architecture="a timm ViT",
            source=f"--weights: an iBOT release checkpoint ({IBOT_URL})",
            license="Apache-2.0",
            description="iBOT checkpoints on the timm ViT they match: ibot:<timm ViT>.",
            paper="Zhou et al., iBOT, ICLR 2022",
            family_loader=_ibot_family,
            argument_help="the release's timm ViT, e.g. vit_small_patch16_224 (iBOT ViT-S/16)",
        ),
        ModelSpec(
            name="esvit",
            loader=None,
            family="esvit",
            architecture="a timm Swin",
            source=f"--weights: an EsViT release checkpoint ({ESVIT_URL})",
            license="MIT",
            description="EsViT Swin checkpoints on the timm Swin they match: esvit:<timm Swin>.",
            paper="Li et al., EsViT, ICLR 2022",
            family_loader=_esvit_family,
            argument_help="the release's timm Swin, e.g. swin_tiny_patch4_window7_224 (W=7)",
        ),
    )


def table_iv_models() -> tuple[ModelSpec, ...]:
    """Every Table IV backbone but CLIP (the open_clip entry) and the two release families."""
    return (*supervised_models(), *self_supervised_models(), *release_families())
