"""FewTrans Table IV backbones: pinned hub weights, release checkpoints, 224 px DINOv2."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest
import torch

from fewtrans_board.core.errors import FewtransError
from fewtrans_board.registry.lookup import Registry
from fewtrans_board.registry.manager import get_plugin_manager

# Table IV's rows and the entry that stands for each.
TABLE_IV = {
    "ResNet-50": "resnet50.tv-in1k",
    "MAE-base": "mae-vit-b16.in1k",
    "Swin-B": "swin-b.ms-in1k",
    "EsViT-SwinB": "esvit-swin-b.in1k",
    "ConvNext-B": "convnext-b.fb-in1k",
    "IBOT-ViT": "ibot-vit-b16.in1k",
    "BiT-R101": "bit-r101x1.goog-in21k",
    "CLIP-base": "clip-vit-b16.openai",
    "DINOv2-small": "dinov2-vit-s14.lvd142m",
    "DINOv2-base": "dinov2-vit-b14.lvd142m",
}

# What each hub entry must ask timm for: the architecture, its weights tag, extra arguments.
HUB_REQUESTS = {
    "resnet50.tv-in1k": ("resnet50.tv_in1k", {}),
    "swin-b.ms-in1k": ("swin_base_patch4_window7_224.ms_in1k", {}),
    "convnext-b.fb-in1k": ("convnext_base.fb_in1k", {}),
    "bit-r101x1.goog-in21k": ("resnetv2_101x1_bit.goog_in21k", {}),
    "mae-vit-b16.in1k": ("vit_base_patch16_224.mae", {"global_pool": "avg", "fc_norm": False}),
    "dinov2-vit-s14.lvd142m": ("vit_small_patch14_dinov2.lvd142m", {"img_size": 224}),
    "dinov2-vit-b14.lvd142m": ("vit_base_patch14_dinov2.lvd142m", {"img_size": 224}),
}

# Published sizes in millions of parameters (with a 1000-class head where the paper counts
# one), from each architecture's paper: ResNet-50 25.6 (He et al. 2016), ResNet-101 44.5
# (BiT's R101x1 is a ResNet-101 v2), Swin-B 88 (Liu et al. 2021, Table 1), ConvNeXt-B 89
# (Liu et al. 2022, Table 1), ViT-B/16 86 (Dosovitskiy et al. 2021, Table 1), DINOv2
# ViT-S/14 21 and ViT-B/14 86 backbones (Oquab et al. 2023).
PUBLISHED_MILLIONS = {
    "resnet50.tv-in1k": (25.6, True),
    "swin-b.ms-in1k": (88.0, True),
    "esvit-swin-b.in1k": (88.0, True),
    "convnext-b.fb-in1k": (89.0, True),
    "bit-r101x1.goog-in21k": (44.5, True),
    "mae-vit-b16.in1k": (86.0, True),
    "ibot-vit-b16.in1k": (86.0, True),
    "dinov2-vit-s14.lvd142m": (21.0, False),
    "dinov2-vit-b14.lvd142m": (86.0, False),
}


@pytest.fixture(scope="module")
def registry() -> Registry:
    return Registry.from_plugin_manager(get_plugin_manager(entry_points=False))


def test_every_table_iv_backbone_has_an_entry(registry: Registry) -> None:
    for row, name in TABLE_IV.items():
        spec = registry.model(name).obj
        assert spec.description and spec.license and spec.source, row
    # the release entries say where their checkpoint comes from
    assert "github.com/bytedance/ibot" in registry.model("ibot-vit-b16.in1k").obj.source
    assert "github.com/microsoft/esvit" in registry.model("esvit-swin-b.in1k").obj.source


def test_hub_entries_ask_timm_for_the_pinned_weights(
    registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    import timm

    from fewtrans_board.models import hub

    real = timm.create_model
    calls: list[tuple[str, bool, dict[str, Any]]] = []

    def record(name: str, pretrained: bool = False, **kwargs: Any) -> Any:
        calls.append((name, pretrained, kwargs))
        return real("test_vit", pretrained=False)  # tiny stand-in: nothing is downloaded

    monkeypatch.setattr(timm, "create_model", record)
    monkeypatch.setattr(hub, "hub_reachable", lambda timeout=0.0: True)
    for name, (architecture, kwargs) in HUB_REQUESTS.items():
        calls.clear()
        backbone = registry.model(name).obj.load()
        assert calls == [(architecture, True, kwargs)], name
        assert backbone.name == name and backbone.info["weights"] == "hub"
        assert backbone.image_size == kwargs.get("img_size", backbone.image_size)


@pytest.mark.parametrize("name", sorted(PUBLISHED_MILLIONS))
def test_entries_build_the_papers_architecture(registry: Registry, name: str) -> None:
    import timm

    millions, with_head = PUBLISHED_MILLIONS[name]
    spec = registry.model(name).obj
    kwargs = dict(HUB_REQUESTS.get(name, ("", {}))[1])
    with torch.device("meta"):  # shapes only: no memory, no download
        model = timm.create_model(
            spec.architecture, pretrained=False, num_classes=1000 if with_head else 0, **kwargs
        )
    count = sum(p.numel() for p in model.parameters()) / 1e6
    assert abs(count - millions) / millions < 0.05, (name, count)


def _save(state: dict[str, torch.Tensor], path: Path) -> Path:
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in state.items()}, str(path))
    return path


def test_dinov2_runs_at_224_from_a_518_checkpoint(registry: Registry, tmp_path: Path) -> None:
    import timm
    import torch.nn.functional as F

    torch.manual_seed(0)
    source = timm.create_model("vit_small_patch14_dinov2", pretrained=False).eval()
    state = source.state_dict()
    assert state["pos_embed"].shape == (1, 1 + 37 * 37, 384)  # built at 518 px
    timm_file = _save(state, tmp_path / "timm.safetensors")
    # facebookresearch's release keeps DINOv2's mask token next to the same names
    upstream_file = tmp_path / "dinov2_vits14_pretrain.pth"
    torch.save({**state, "mask_token": torch.zeros(1, 384)}, upstream_file)

    spec = registry.model("dinov2-vit-s14.lvd142m").obj
    loaded = [
        spec.load(weights=path).image_encoder.state_dict() for path in (timm_file, upstream_file)
    ]
    backbone = spec.load(weights=timm_file)
    assert backbone.image_size == 224 and backbone.feature_dim == 384
    for got in loaded:
        assert got["pos_embed"].shape == (1, 1 + 16 * 16, 384)
        assert all(torch.equal(got[k], v) for k, v in state.items() if k != "pos_embed")
        # the class position kept, the 37x37 grid resampled to 16x16 (bicubic, antialiased)
        assert torch.equal(got["pos_embed"][:, :1], state["pos_embed"][:, :1])
        grid = state["pos_embed"][:, 1:].reshape(1, 37, 37, 384).permute(0, 3, 1, 2)
        want = F.interpolate(grid, size=(16, 16), mode="bicubic", antialias=True)
        want = want.permute(0, 2, 3, 1).reshape(1, 256, 384)
        assert torch.allclose(got["pos_embed"][:, 1:], want, atol=1e-5)
    pixels = torch.randn(1, 3, 224, 224)
    assert torch.isfinite(backbone.embed(pixels)).all()


# The iBOT ViT's parameter names (bytedance/ibot models/vision_transformer.py: PatchEmbed.proj,
# Block.norm1/attn.qkv/attn.proj/norm2/mlp.fc1/mlp.fc2, the final norm) are timm's; the
# loader relies on it, so the test states it.
IBOT_NAMES = (
    "cls_token",
    "pos_embed",
    "patch_embed.proj.weight",
    "blocks.0.norm1.weight",
    "blocks.0.attn.qkv.bias",
    "blocks.0.attn.proj.weight",
    "blocks.0.norm2.bias",
    "blocks.0.mlp.fc1.weight",
    "blocks.0.mlp.fc2.bias",
    "norm.weight",
)


def _ibot_files(tmp_path: Path) -> tuple[Any, Path, Path]:
    """A ViT-Ti/16 in iBOT's two release formats: the full checkpoint and the backbone file."""
    import timm

    torch.manual_seed(3)
    teacher = timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=0).eval()
    backbone = teacher.state_dict()
    assert set(IBOT_NAMES) <= set(backbone)
    head = {"head.mlp.0.weight": torch.randn(16, 192), "head.last_layer.weight_g": torch.ones(8, 1)}
    full = {
        "teacher": {**{f"backbone.{k}": v for k, v in backbone.items()}, **head},
        # the student is what DDP saved, with iBOT's mask embedding; the loader must not
        # take it (its patch embedding differs, its other tensors are absent)
        "student": {
            "module.backbone.patch_embed.proj.weight": torch.zeros_like(
                backbone["patch_embed.proj.weight"]
            ),
            "module.backbone.masked_embed": torch.zeros(1, 192),
            **{f"module.{k}": v for k, v in head.items()},
        },
        "optimizer": {"state": {}, "param_groups": []},
        "epoch": 800,
        "args": argparse.Namespace(
            arch="vit_tiny", patch_size=16, out_dim=8192, pred_ratio=[0.0, 0.3]
        ),
        "ibot_loss": {"center": torch.zeros(1, 8192)},
    }
    full_path = tmp_path / "checkpoint.pth"
    torch.save(full, full_path)
    backbone_path = tmp_path / "checkpoint_teacher.pth"
    torch.save({"state_dict": backbone}, backbone_path)  # extract_backbone_weights.py's output
    return teacher, full_path, backbone_path


def test_ibot_release_checkpoints_load_the_teacher(registry: Registry, tmp_path: Path) -> None:
    teacher, full_path, backbone_path = _ibot_files(tmp_path)
    spec = registry.model("ibot:vit_tiny_patch16_224").obj
    pixels = torch.randn(2, 3, 224, 224)
    with torch.no_grad():
        want = teacher(pixels)
    for path in (full_path, backbone_path):
        backbone = spec.load(weights=path)
        assert backbone.name == "ibot:vit_tiny_patch16_224"
        assert backbone.weights_id.startswith("sha256:")
        assert torch.equal(backbone.embed(pixels), want), path.name
    assert registry.model("ibot-vit-b16.in1k").obj.architecture == "vit_base_patch16_224"


def _esvit_file(tmp_path: Path) -> tuple[dict[str, torch.Tensor], Path]:
    """A Swin-T in EsViT's full-checkpoint layout (the original Swin's parameter names)."""
    import re

    import timm

    torch.manual_seed(4)
    model = timm.create_model("swin_tiny_patch4_window7_224", pretrained=False, num_classes=0)
    state = model.state_dict()
    # EsViT's BasicLayer downsamples at the end of a stage (timm: at the start of the next)
    # and stores each block's relative_position_index buffer.
    original = {
        re.sub(r"layers\.(\d+)\.downsample", lambda m: f"layers.{int(m[1]) - 1}.downsample", k): v
        for k, v in state.items()
    }
    for key, buffer in model.named_buffers():
        if key.endswith("relative_position_index"):
            original[key] = buffer
    assert "layers.0.downsample.reduction.weight" in original
    heads = {
        "head.mlp.0.weight": torch.randn(8, 768),
        "head_dense.last_layer.weight_g": torch.ones(4, 1),
    }
    full = {
        "teacher": {**original, **heads},
        "student": {"module.patch_embed.proj.weight": torch.zeros(96, 3, 4, 4)},
        "optimizer": {"state": {}, "param_groups": []},
        "epoch": 300,
        "args": argparse.Namespace(arch="swin_tiny", use_dense_prediction=True),
        "dino_loss": {"center": torch.zeros(1, 65536)},
    }
    path = tmp_path / "checkpoint_best.pth"
    torch.save(full, path)
    return state, path


def test_esvit_release_checkpoint_maps_onto_timm_swin(registry: Registry, tmp_path: Path) -> None:
    state, path = _esvit_file(tmp_path)
    backbone = registry.model("esvit:swin_tiny_patch4_window7_224").obj.load(weights=path)
    got = backbone.image_encoder.state_dict()
    assert set(got) == set(state)
    assert all(torch.equal(got[k], v) for k, v in state.items())
    assert backbone.feature_dim == 768 and backbone.image_size == 224
    spec = registry.model("esvit-swin-b.in1k").obj
    assert spec.architecture == "swin_base_patch4_window7_224"


def test_release_entries_fail_in_one_line(registry: Registry, tmp_path: Path) -> None:
    def error(name: str, weights: Path | None) -> str:
        with pytest.raises(FewtransError) as caught:
            registry.model(name).obj.load(weights=weights)
        message = str(caught.value)
        assert "\n" not in message, message
        return message

    assert "github.com/bytedance/ibot" in error("ibot-vit-b16.in1k", None)
    assert "github.com/microsoft/esvit" in error("esvit-swin-b.in1k", None)
    assert "does not exist" in error("esvit-swin-b.in1k", tmp_path / "nope.pth")
    _, esvit = _esvit_file(tmp_path)
    assert "does not fit" in error("ibot:vit_tiny_patch16_224", esvit)
    other = tmp_path / "other.pth"
    torch.save({"teacher": {"backbone.x": torch.zeros(1)}, "payload": Path("/etc")}, other)
    assert "cannot read weights file" in error("ibot:vit_tiny_patch16_224", other)
    empty = tmp_path / "empty.pth"
    torch.save({"epoch": 1}, empty)
    assert "holds no iBOT backbone" in error("ibot:vit_tiny_patch16_224", empty)


def test_models_list_shows_the_table_iv_entries(invoke: Any) -> None:
    result = invoke(["models", "list", "--json"])
    listed = {row["name"]: row for row in __import__("json").loads(result.output)}
    assert set(TABLE_IV.values()) <= set(listed)
    assert listed["ibot"]["argument"] and listed["esvit"]["argument"]
