"""Query images changed so that their meaning stays and an exact lookup breaks.

The memorisation probe re-runs episodes with every query image shifted by one pixel (the
edge row and column repeated) and re-encoded as JPEG. A method that learns from the
support set loses little; one that recognises images it has stored (a table of image
hashes and labels built from the public support sets) loses what the table gave it.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch

    from fewtrans_board.runner.images import ImageStore

JPEG_QUALITY = 90
SHIFT = 1


def perturb_uint8(image: np.ndarray) -> np.ndarray:
    """Shift a ``uint8 [3, S, S]`` image by one pixel right and down, then JPEG round-trip it."""
    from PIL import Image

    shifted = np.empty_like(image)
    shifted[:, SHIFT:, SHIFT:] = image[:, :-SHIFT, :-SHIFT]
    shifted[:, :SHIFT, SHIFT:] = image[:, :1, :-SHIFT]
    shifted[:, :, :SHIFT] = shifted[:, :, SHIFT : SHIFT + 1]
    buffer = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(shifted.transpose(1, 2, 0))).save(
        buffer, format="JPEG", quality=JPEG_QUALITY
    )
    decoded = np.asarray(Image.open(io.BytesIO(buffer.getvalue())).convert("RGB"))
    return np.ascontiguousarray(decoded.transpose(2, 0, 1))


def perturbed_pixels(images: ImageStore, items: Sequence[str]) -> torch.Tensor:
    """Normalised pixels ``[N, 3, S, S]`` of ``items`` after :func:`perturb_uint8`."""
    import torch

    stacked = np.stack([perturb_uint8(images.uint8(item).numpy()) for item in items])
    return images.preprocessing.normalize(torch.from_numpy(stacked))
