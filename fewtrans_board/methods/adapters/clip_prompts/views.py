"""Seeded augmented views of preprocessed support images (CoPrompt's two views).

CoPrompt trains on two independent augmentations of every support image: the prompted
model (cross-entropy and consistency) sees the first, frozen CLIP the second
(ShuvenduRoy/CoPrompt ``trainers/coprompt.py``: ``parse_batch_train`` splits
``batch["img"]`` into ``image1, image2``; ``CustomCLIP.forward`` encodes ``image2`` with the
frozen ``model_distill``). The views are two draws of Dassl's train transform with
``configs/trainers/coprompt.yaml``'s ``INPUT.TRANSFORMS ["randaugment", "normalize"]`` and
``DATALOADER.K_TRANSFORMS 2``: resize to 224, RandAugment (``n = 2`` operations drawn
with replacement, at magnitude ``m = 10`` of 30, from Dassl's ``randaugment_list``:
AutoContrast, Equalize, Invert, Rotate, Posterize, Solarize, SolarizeAdd, Color, Contrast,
Brightness, Sharpness, ShearX/Y, CutoutAbs, TranslateX/Y; ``RANDAUGMENT_N``/``_M``
defaults of ``dassl/config/defaults.py``), on PIL images, then normalisation.

Adapters here get the *preprocessed* pixels (resized, cropped, normalised with constants
the backbone does not expose), so RandAugment's photometric operations cannot be applied
faithfully. :class:`CropFlipViews` is a documented stand-in: a random resized crop (area
scale 0.08-1, aspect ratio 3/4-4/3, the crop resized back bicubically; Dassl's
``RRCROP_SCALE`` default and torchvision's ``RandomResizedCrop.get_params`` sampling) and a
horizontal flip with probability 1/2, drawn per image. It perturbs geometry where
RandAugment mostly perturbs colour and contrast (plus rotation, shear and translation), and
it adds crops and flips that CoPrompt's transform list does not have.

The draws come from a CPU ``torch.Generator`` seeded with :data:`VIEW_SEED` when a fit
builds its session, never from torch's global generator: every fit (every configuration
of an HPE grid, a re-run, verification) sees the same sequence of views, like the
``RandomState(11)`` batch order. Queries are never augmented.

Importing this module imports torch, so adapters import it inside their sessions.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

VIEW_SEED = 11
"""Seed of each fit's view generator (the batch order's ``RandomState`` seed, too)."""

CROP_SCALE = (0.08, 1.0)
CROP_RATIO = (3 / 4, 4 / 3)
FLIP_P = 0.5
CROP_TRIES = 10


class CropFlipViews:
    """Random resized crop + horizontal flip of ``[B, 3, H, W]`` tensors, from a seeded generator.

    Args:
        seed: seed of the generator (one per fit).
        scale: range of the crop's area as a fraction of the image.
        ratio: range of the crop's aspect ratio (width / height), sampled log-uniformly.
        flip: probability of a horizontal flip.
    """

    def __init__(
        self,
        seed: int = VIEW_SEED,
        scale: tuple[float, float] = CROP_SCALE,
        ratio: tuple[float, float] = CROP_RATIO,
        flip: float = FLIP_P,
    ) -> None:
        self.generator = torch.Generator().manual_seed(seed)
        self.scale, self.ratio, self.flip = scale, ratio, flip

    def _uniform(self, low: float, high: float) -> float:
        return float(torch.empty(1).uniform_(low, high, generator=self.generator))

    def _below(self, n: int) -> int:
        return int(torch.randint(0, n, (1,), generator=self.generator))

    def box(self, height: int, width: int) -> tuple[int, int, int, int]:
        """``(top, left, h, w)`` of one crop (``RandomResizedCrop.get_params``'s sampling)."""
        area = height * width
        log_ratio = (math.log(self.ratio[0]), math.log(self.ratio[1]))
        for _ in range(CROP_TRIES):
            target = area * self._uniform(*self.scale)
            aspect = math.exp(self._uniform(*log_ratio))
            w = round(math.sqrt(target * aspect))
            h = round(math.sqrt(target / aspect))
            if 0 < w <= width and 0 < h <= height:
                return self._below(height - h + 1), self._below(width - w + 1), h, w
        shape = width / height
        if shape < self.ratio[0]:
            w, h = width, round(width / self.ratio[0])
        elif shape > self.ratio[1]:
            w, h = round(height * self.ratio[1]), height
        else:
            w, h = width, height
        return (height - h) // 2, (width - w) // 2, h, w

    def __call__(self, pixels: torch.Tensor) -> torch.Tensor:
        """One new view of every image of ``pixels [B, 3, H, W]`` (same shape, dtype, device)."""
        height, width = int(pixels.shape[-2]), int(pixels.shape[-1])
        work = pixels if pixels.dtype in (torch.float32, torch.float64) else pixels.float()
        views = []
        for image in work:
            top, left, h, w = self.box(height, width)
            crop = image[None, :, top : top + h, left : left + w]
            view = F.interpolate(
                crop, size=(height, width), mode="bicubic", align_corners=False, antialias=True
            )
            if self._uniform(0.0, 1.0) < self.flip:
                view = view.flip(-1)
            views.append(view)
        return torch.cat(views).to(pixels.dtype) if views else pixels.clone()
