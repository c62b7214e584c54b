"""Reading local checkpoints safely: safetensors preferred, ``torch.load`` only weights-only."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING

from fewtrans_board.errors import FewtransError

if TYPE_CHECKING:
    import torch

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
