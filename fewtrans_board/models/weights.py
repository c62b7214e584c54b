"""Reading local checkpoints safely: safetensors preferred, ``torch.load`` only weights-only."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from fewtrans_board.core.errors import FewtransError

if TYPE_CHECKING:
    import torch
    from torch import nn

SAFE_SUFFIXES = (".safetensors",)
TORCH_SUFFIXES = (".pt", ".pth", ".bin", ".ckpt")


def file_sha256(path: Path, chunk: int = 1 << 20) -> str:
    """Return the hex sha256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def read_state_dict(path: Path) -> dict[str, torch.Tensor]:
    """Read a checkpoint into a state dict without executing pickled code.

    Args:
        path: a ``.safetensors`` file, or a torch file loadable with ``weights_only=True``.
            A dict with a ``"state_dict"`` or ``"model"`` entry is unwrapped.

    Raises:
        FewtransError: missing file, unknown suffix, or unreadable content.
    """
    import torch

    if not path.is_file():
        raise FewtransError(f"weights file {path} does not exist")
    suffix = path.suffix.lower()
    try:
        if suffix in SAFE_SUFFIXES:
            from safetensors.torch import load_file

            return dict(load_file(str(path)))
        if suffix in TORCH_SUFFIXES:
            loaded = torch.load(str(path), map_location="cpu", weights_only=True)
        else:
            raise FewtransError(
                f"weights file {path}: unknown suffix {suffix!r}; use .safetensors "
                f"(preferred) or one of {', '.join(TORCH_SUFFIXES)}"
            )
    except FewtransError:
        raise
    except Exception as exc:
        raise FewtransError(
            f"cannot read weights file {path}: {type(exc).__name__}: {exc}"
        ) from exc
    for key in ("state_dict", "model"):
        if isinstance(loaded, dict) and isinstance(loaded.get(key), dict):
            loaded = loaded[key]
    if not isinstance(loaded, dict):
        raise FewtransError(f"weights file {path} does not contain a state dict")
    return loaded


def fit_checkpoint(
    model: nn.Module,
    weights: Path,
    label: str,
    *,
    ignore: Callable[[str], bool] | None = None,
    mark_truncation: bool = False,
) -> str:
    """Load a local checkpoint into ``model``, refusing one that does not fit it.

    Args:
        model: the freshly created model.
        weights: the checkpoint file (see :func:`read_state_dict`).
        label: how errors name the model, e.g. ``"timm 'resnet10t'"``.
        ignore: keys that may be missing or unexpected (e.g. a classifier head).
        mark_truncation: end a key list shortened to five entries with ``...``.

    Returns:
        The weights id ``sha256:<hex digest of the file>``.

    Raises:
        FewtransError: unreadable file, mismatched tensor shapes, or missing or unexpected
            keys.
    """
    state = read_state_dict(weights)
    return fit_state_dict(
        model, state, weights, label, ignore=ignore, mark_truncation=mark_truncation
    )


def fit_state_dict(
    model: nn.Module,
    state: dict[str, torch.Tensor],
    weights: Path,
    label: str,
    *,
    ignore: Callable[[str], bool] | None = None,
    mark_truncation: bool = False,
) -> str:
    """Load a state dict read from ``weights`` into ``model``, refusing one that does not fit.

    Args:
        model: the freshly created model.
        state: the tensors, already under the model's names (a release format converted).
        weights: the file they come from (errors name it; the weights id hashes it).
        label: how errors name the model, e.g. ``"timm 'resnet10t'"``.
        ignore: keys that may be missing or unexpected (e.g. a classifier head).
        mark_truncation: end a key list shortened to five entries with ``...``.

    Returns:
        The weights id ``sha256:<hex digest of the file>``.

    Raises:
        FewtransError: mismatched tensor shapes, or missing or unexpected keys.
    """
    try:
        result = model.load_state_dict(state, strict=False)
    except RuntimeError as exc:  # shape mismatches raise even when strict=False
        raise FewtransError(
            f"weights file {weights} does not fit {label}: missing or "
            f"mismatched tensors ({str(exc).splitlines()[0]} ...)"
        ) from exc
    missing = [k for k in result.missing_keys if ignore is None or not ignore(k)]
    unexpected = [k for k in result.unexpected_keys if ignore is None or not ignore(k)]
    if missing or unexpected:
        raise FewtransError(
            f"weights file {weights} does not fit {label}: "
            f"missing {_shown(missing, mark_truncation)}, "
            f"unexpected {_shown(unexpected, mark_truncation)}"
        )
    return "sha256:" + file_sha256(weights)


def _shown(keys: list[str], mark_truncation: bool) -> str:
    return f"{keys[:5]}{'...' if mark_truncation and len(keys) > 5 else ''}"
