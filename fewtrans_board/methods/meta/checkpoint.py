"""Meta-trained checkpoints: one safetensors file with the encoder, the head and metadata.

Keys ``encoder.*`` hold the image encoder's state dict (loadable into the base model),
``head.*`` the method's learned head (relation module with its BatchNorm running statistics,
MatchingNet's FCE LSTMs, MetaOpt scale, MAML head init), and
the safetensors metadata field ``fewtrans_board.methods.meta`` the training record as JSON (method,
FWT, base model, source dataset, schedule, seeds, losses, versions).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fewtrans_board.core.atomic import write_with
from fewtrans_board.core.errors import FewtransError

if TYPE_CHECKING:
    import torch

METADATA_KEY = "fewtrans_board.meta"
ENCODER, HEAD = "encoder.", "head."


def check_checkpoint_path(path: Path) -> None:
    """Fail before training unless ``path`` names a ``.safetensors`` file.

    Raises:
        FewtransError: another suffix.
    """
    if path.suffix != ".safetensors":
        raise FewtransError(
            f"--out {path}: the checkpoint is written as .safetensors; name it "
            f"{path.with_suffix('.safetensors').name}"
        )


def write_checkpoint(
    path: Path,
    encoder: dict[str, torch.Tensor],
    head: dict[str, torch.Tensor],
    meta: dict[str, Any],
) -> None:
    """Write a checkpoint atomically.

    Args:
        path: the ``.safetensors`` file to write.
        encoder: the encoder's state dict.
        head: the head's tensors (may be empty).
        meta: the JSON-friendly training record.
    """
    from safetensors.torch import save_file

    tensors = {ENCODER + k: v.detach().cpu().contiguous() for k, v in encoder.items()}
    tensors.update({HEAD + k: v.detach().cpu().contiguous() for k, v in head.items()})
    text = json.dumps(meta, sort_keys=True)
    write_with(path, lambda tmp: save_file(tensors, str(tmp), metadata={METADATA_KEY: text}))


def read_checkpoint(
    path: Path,
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], dict[str, Any]]:
    """Read ``(encoder state, head tensors, metadata)`` of a meta-trained checkpoint.

    Raises:
        FewtransError: missing file, not safetensors, or not written by ``meta-train``.
    """
    from safetensors import safe_open

    if not path.is_file():
        raise FewtransError(f"meta-trained checkpoint {path} does not exist")
    try:
        with safe_open(str(path), framework="pt") as handle:
            raw = (handle.metadata() or {}).get(METADATA_KEY)
            tensors = {key: handle.get_tensor(key) for key in handle.keys()}  # noqa: SIM118
    except Exception as exc:
        raise FewtransError(f"cannot read {path} as safetensors: {exc}") from exc
    if raw is None:
        raise FewtransError(
            f"{path} is not a meta-trained checkpoint (no {METADATA_KEY!r} metadata); "
            "write one with 'fewtrans-board meta-train'"
        )
    encoder = {k[len(ENCODER) :]: v for k, v in tensors.items() if k.startswith(ENCODER)}
    head = {k[len(HEAD) :]: v for k, v in tensors.items() if k.startswith(HEAD)}
    return encoder, head, json.loads(raw)
