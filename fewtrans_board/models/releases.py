"""Checkpoints in a release's own format, mapped onto the timm architecture they match.

iBOT and EsViT are not in timm or open_clip: their weights are the authors' ``.pth``
files, a DINO-style training checkpoint (``student``/``teacher`` with projection heads,
``args`` as an ``argparse.Namespace``) or an extracted backbone (``{"state_dict": ...}``).
Their backbones are timm's ViT and Swin with the same parameter names, so a release file
is unwrapped here (pick the teacher, strip ``module.``/``backbone.``, drop the heads) and
then converted by timm's own ``checkpoint_filter_fn`` for the architecture (Swin's
downsample moved to the next stage, position embeddings resampled, DINOv2's layout).
"""

from __future__ import annotations

import argparse
import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fewtrans_board.core.errors import FewtransError
from fewtrans_board.models.weights import SAFE_SUFFIXES, TORCH_SUFFIXES, read_state_dict

if TYPE_CHECKING:
    import torch
    from torch import nn

    from fewtrans_board.api.backbone import Backbone

StateDict = dict[str, "torch.Tensor"]


@dataclass(frozen=True)
class ReleaseFormat:
    """How one project's checkpoints hold the backbone.

    Attributes:
        project: the project's name in messages (``"iBOT"``).
        url: where the official checkpoints are published.
        keys: top-level entries that may hold the backbone, in order of preference (the
            teacher before the student, as the projects evaluate it).
        prefixes: key prefixes stripped, in order (a DDP ``module.``, DINO's ``backbone.``).
        dropped: key prefixes that are not backbone parameters (projection heads).
    """

    project: str
    url: str
    keys: tuple[str, ...] = ("state_dict", "teacher", "model")
    prefixes: tuple[str, ...] = ("module.", "backbone.")
    dropped: tuple[str, ...] = ("head.", "head_dense.", "masked_embed")


IBOT = ReleaseFormat(
    project="iBOT",
    url="https://github.com/bytedance/ibot#pre-trained-models",
)
"""Backbone files (``checkpoint_teacher.pth``: ``{"state_dict": ViT keys}``) or full
checkpoints (``teacher``: ``backbone.*`` and ``head.*``; ``student``: ``module.backbone.*``
and a ``masked_embed``)."""

ESVIT = ReleaseFormat(
    project="EsViT",
    url="https://github.com/microsoft/esvit#pretrained-models",
)
"""Full checkpoints (``checkpoint_best.pth``: ``teacher`` holds the Swin backbone with its
DINO heads ``head.*`` and ``head_dense.*``; the student's keys start with ``module.``)."""


def first_line(exc: BaseException) -> str:
    """An exception's first line without terminal colour codes (torch's messages have some)."""
    lines = str(exc).splitlines()
    return re.sub(r"\x1b\[[0-9;]*m", "", lines[0]).strip() if lines else ""


def read_release(path: Path) -> Any:
    """The top-level object of a checkpoint file, read without running pickled code.

    Torch files load with ``weights_only=True``; ``argparse.Namespace`` (the ``args`` of
    DINO-style training checkpoints: plain attributes) is the one class allowed beyond
    tensors and containers.

    Raises:
        FewtransError: missing file, unknown suffix, or content beyond the allowed types.
    """
    import torch

    if not path.is_file():
        raise FewtransError(f"weights file {path} does not exist")
    suffix = path.suffix.lower()
    if suffix in SAFE_SUFFIXES:
        return read_state_dict(path)
    if suffix not in TORCH_SUFFIXES:
        raise FewtransError(
            f"weights file {path}: unknown suffix {suffix!r}; use one of "
            f"{', '.join(SAFE_SUFFIXES + TORCH_SUFFIXES)}"
        )
    try:
        with torch.serialization.safe_globals([argparse.Namespace]):
            return torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as exc:
        raise FewtransError(
            f"cannot read weights file {path}: {type(exc).__name__}: {first_line(exc)}"
        ) from exc


def backbone_state(loaded: Any, release: ReleaseFormat, path: Path) -> StateDict:
    """The backbone's parameters from a release checkpoint, under the backbone's own names.

    Raises:
        FewtransError: no entry of the file holds tensors.
    """
    import torch

    state = loaded
    if isinstance(loaded, dict):
        for key in release.keys:
            if isinstance(loaded.get(key), dict):
                state = loaded[key]
                break
    tensors = isinstance(state, dict) and all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()
    )
    if not (tensors and state):
        raise FewtransError(
            f"weights file {path} holds no {release.project} backbone: expected tensors, "
            f"at the top level or under one of {', '.join(release.keys)}"
        )
    out: StateDict = {}
    for key, value in state.items():
        for prefix in release.prefixes:
            key = key.removeprefix(prefix)
        if not key.startswith(release.dropped):
            out[key] = value
    return out


def timm_filter(model: nn.Module) -> Callable[[StateDict, nn.Module], StateDict]:
    """The ``checkpoint_filter_fn`` timm has for the model's architecture (else the identity)."""
    module = importlib.import_module(type(model).__module__)
    found = getattr(module, "checkpoint_filter_fn", None)
    if found is None:
        return lambda state, _model: state
    return found  # type: ignore[no-any-return]


def convert(state: StateDict, model: nn.Module, path: Path) -> StateDict:
    """Apply timm's conversion for the model, naming the file if it fails."""
    try:
        return timm_filter(model)(state, model)
    except Exception as exc:
        raise FewtransError(
            f"weights file {path} cannot be converted for {type(model).__name__}: "
            f"{type(exc).__name__}: {first_line(exc)}"
        ) from exc


def release_checkpoint(release: ReleaseFormat) -> Callable[[Path, Any], StateDict]:
    """``(path, model) -> state dict`` reading a release file for ``load_timm_backbone``."""

    def read(path: Path, model: Any) -> StateDict:
        return convert(backbone_state(read_release(path), release, path), model, path)

    return read


def timm_checkpoint(path: Path, model: Any) -> StateDict:
    """A local timm-format (or upstream) checkpoint converted by timm for ``model``.

    DINOv2's entries run at 224 px: a checkpoint saved at 518 px (timm's hub files, or the
    facebookresearch release with its ``mask_token``) has its position embeddings resampled.
    """
    return convert(read_state_dict(path), model, path)


def load_release_backbone(
    release: ReleaseFormat,
    architecture: str,
    weights: Path | None,
    device: str,
    *,
    name: str,
) -> Backbone:
    """A timm backbone with weights from a release checkpoint (required: no hub copy).

    Args:
        release: the checkpoint format.
        architecture: the timm architecture the release's backbone matches.
        weights: the release file (``--weights``).
        device: torch device.
        name: registry name recorded on the backbone.

    Raises:
        FewtransError: no file given, a missing or unreadable file, or keys that do not fit.
    """
    from fewtrans_board.models.timm_family import load_timm_backbone

    if weights is None:
        raise FewtransError(
            f"model {name!r} has no hub weights: pass --weights with the {release.project} "
            f"release checkpoint ({release.url})"
        )
    return load_timm_backbone(
        architecture, weights, device, name=name, checkpoint=release_checkpoint(release)
    )
