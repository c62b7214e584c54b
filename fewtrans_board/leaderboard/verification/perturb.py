"""Query images changed so that their meaning stays and an exact lookup breaks.

The memorisation probe re-runs episodes with every query image shifted, cropped, jittered
and re-encoded, each by a draw from the verification's secret seed, so no table can be keyed
on the probe's output in advance. The changes are as small as that requires (honest methods
on 32-pixel digits already lose a few points: ``benchmarks/verification_cost.py``). What it
catches and what it cannot (a lookup robust to small changes): SECURITY.md.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import torch

    from fewtrans_board.datasets.images import ImageStore

MAX_SHIFT = 1
"""Largest shift in pixels along each axis (at least one pixel along one axis)."""
MAX_CROP = 1
"""Largest crop, in pixels, taken off the image before it is resized back."""
JPEG_QUALITIES = (85, 95)
"""Range of JPEG qualities, inclusive."""
JITTER = 0.03
"""Largest relative change of brightness and of contrast."""


@dataclass(frozen=True)
class Perturbation:
    """How one query image is changed.

    Attributes:
        dx: horizontal shift in pixels (positive: right).
        dy: vertical shift in pixels (positive: down).
        crop: pixels cut off (split between the sides by ``crop_left``/``crop_top``)
            before the image is resized back to its size.
        crop_left: of ``crop``, pixels cut on the left (the rest on the right).
        crop_top: of ``crop``, pixels cut at the top (the rest at the bottom).
        brightness: multiplier of every pixel.
        contrast: multiplier of the deviation from the image's mean.
        quality: JPEG quality of the re-encoding.
    """

    dx: int
    dy: int
    crop: int
    crop_left: int
    crop_top: int
    brightness: float
    contrast: float
    quality: int


def draw_perturbation(rng: np.random.Generator) -> Perturbation:
    """One image's perturbation, drawn from the verification's secret stream."""
    while True:
        dx, dy = (int(v) for v in rng.integers(-MAX_SHIFT, MAX_SHIFT + 1, size=2))
        if dx or dy:
            break
    crop = int(rng.integers(0, MAX_CROP + 1))
    return Perturbation(
        dx=dx,
        dy=dy,
        crop=crop,
        crop_left=int(rng.integers(0, crop + 1)),
        crop_top=int(rng.integers(0, crop + 1)),
        brightness=float(rng.uniform(1 - JITTER, 1 + JITTER)),
        contrast=float(rng.uniform(1 - JITTER, 1 + JITTER)),
        quality=int(rng.integers(JPEG_QUALITIES[0], JPEG_QUALITIES[1] + 1)),
    )


def probe_rule() -> dict[str, Any]:
    """The ranges the probe draws from (for the report; the draws themselves stay secret)."""
    return {
        "max_shift": MAX_SHIFT,
        "max_crop": MAX_CROP,
        "jpeg_quality": list(JPEG_QUALITIES),
        "jitter": JITTER,
        "drawn_from": "the verification seed, per image",
    }


def _shift(image: np.ndarray, dx: int, dy: int) -> np.ndarray:
    """``image [3, S, S]`` moved by ``(dx, dy)``, the uncovered edge repeated."""
    size_y, size_x = image.shape[1:]
    padded = np.pad(image, ((0, 0), (abs(dy), abs(dy)), (abs(dx), abs(dx))), mode="edge")
    top, left = abs(dy) - dy, abs(dx) - dx
    return padded[:, top : top + size_y, left : left + size_x]


def perturb_uint8(image: np.ndarray, change: Perturbation) -> np.ndarray:
    """Apply ``change`` to a ``uint8 [3, S, S]`` image; returns the decoded JPEG."""
    from PIL import Image

    shifted = _shift(image, change.dx, change.dy).astype(np.float32)
    mean = shifted.mean()
    jittered = ((shifted - mean) * change.contrast + mean) * change.brightness
    picture = Image.fromarray(
        np.ascontiguousarray(np.clip(np.rint(jittered), 0, 255).astype(np.uint8).transpose(1, 2, 0))
    )
    if change.crop:
        width, height = picture.size
        left, top = change.crop_left, change.crop_top
        box = (left, top, width - (change.crop - left), height - (change.crop - top))
        picture = picture.crop(box).resize((width, height), Image.Resampling.BILINEAR)
    buffer = io.BytesIO()
    picture.save(buffer, format="JPEG", quality=change.quality)
    decoded = np.asarray(Image.open(io.BytesIO(buffer.getvalue())).convert("RGB"))
    return np.ascontiguousarray(decoded.transpose(2, 0, 1))


def perturbed_pixels(
    images: ImageStore, items: Sequence[str], rng: np.random.Generator
) -> torch.Tensor:
    """Normalised pixels ``[N, 3, S, S]`` of ``items``, each perturbed by its own draw."""
    import torch

    stacked = np.stack(
        [perturb_uint8(images.uint8(item).numpy(), draw_perturbation(rng)) for item in items]
    )
    return images.preprocessing.normalize(torch.from_numpy(stacked))
