"""The loaded-model interface adapters program against.

``Backbone`` wraps an image encoder (pixels to features) and, for CLIP-style models, a
text encoder. It holds torch modules but this module itself imports torch only for type
checking, so that importing :mod:`fewtrans_board` stays light.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import torch
    from torch import nn

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


@dataclass(frozen=True)
class Preprocessing:
    """A deterministic evaluation transform, recorded in results.

    Attributes:
        name: ``"fewtrans"`` (squash resize) or ``"bscd"`` (resize then centre crop).
        image_size: final square side in pixels.
        resize: side of the (square) resize before cropping; equal to ``image_size`` when
            there is no crop.
        mean: per-channel normalisation mean.
        std: per-channel normalisation std.
    """

    name: str
    image_size: int
    resize: int
    mean: tuple[float, float, float] = IMAGENET_MEAN
    std: tuple[float, float, float] = IMAGENET_STD

    @classmethod
    def fewtrans(cls, image_size: int = 224) -> Preprocessing:
        """FewTrans evaluation transform: squash-resize to ``image_size``, ImageNet stats."""
        return cls("fewtrans", image_size, image_size)

    @classmethod
    def bscd(cls, image_size: int = 224) -> Preprocessing:
        """BSCD-FSL test transform: resize to ``int(1.15 * size)``, centre crop ``size``."""
        return cls("bscd", image_size, int(image_size * 1.15))

    @classmethod
    def named(cls, name: str, image_size: int) -> Preprocessing:
        """Build the named transform at a given image size."""
        builders = {"fewtrans": cls.fewtrans, "bscd": cls.bscd}
        if name not in builders:
            raise ValueError(f"unknown preprocessing {name!r}; use one of {sorted(builders)}")
        return builders[name](image_size)

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-friendly description."""
        return {**dataclasses.asdict(self), "mean": list(self.mean), "std": list(self.std)}

    def resize_uint8(self, image: Any) -> torch.Tensor:
        """Resize (and crop) a PIL image to a ``uint8`` tensor ``[3, S, S]`` (cacheable).

        FewTrans squashes to ``S x S``; BSCD resizes to ``R x R`` then centre-crops ``S``,
        both as torchvision's ``resize``, ``center_crop`` and ``pil_to_tensor`` do on PIL
        images (Pillow's antialiased bilinear resize), pixel for pixel. Pillow is called
        directly: importing torchvision (and the torch._dynamo it pulls in) cost every
        plugin worker and shard process that decodes images 1.5 s
        (``benchmarks/demo_embedding.py``).
        """
        import numpy as np
        import torch
        from PIL import Image

        side = (self.resize, self.resize)
        resized = image if image.size == side else image.resize(side, Image.Resampling.BILINEAR)
        if self.resize != self.image_size:
            resized = _centre_crop(resized, self.image_size)
        width, height = resized.size
        pixels = torch.as_tensor(np.array(resized, copy=True))
        return pixels.view(height, width, len(resized.getbands())).permute(2, 0, 1)

    def normalize(self, images: torch.Tensor) -> torch.Tensor:
        """Turn ``uint8 [N, 3, S, S]`` into normalised float32 pixels (on their device)."""
        import torch

        mean = torch.tensor(self.mean, dtype=torch.float32, device=images.device).view(1, 3, 1, 1)
        std = torch.tensor(self.std, dtype=torch.float32, device=images.device).view(1, 3, 1, 1)
        normalized: torch.Tensor = (images.float().div(255.0) - mean) / std
        return normalized

    def apply(self, image: Any) -> torch.Tensor:
        """Full transform of one PIL image to a normalised float tensor ``[3, S, S]``."""
        return self.normalize(self.resize_uint8(image)[None])[0]

    def digest(self) -> str:
        """Short content hash, part of feature-cache keys."""
        text = repr(sorted(self.to_dict().items()))
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def _centre_crop(image: Any, size: int) -> Any:
    """The crop of torchvision's ``center_crop(image, [size, size])`` of a PIL image.

    A crop larger than the image pads it with zeros first, the larger half of an odd
    padding on the right and bottom, as torchvision does.
    """
    width, height = image.size
    if size > width or size > height:
        from PIL import ImageOps

        wide, tall = max(size - width, 0), max(size - height, 0)
        border = (wide // 2, tall // 2, (wide + 1) // 2, (tall + 1) // 2)
        image = ImageOps.expand(image, border=border, fill=0)
        width, height = image.size
    top = round((height - size) / 2.0)
    left = round((width - size) / 2.0)
    return image.crop((left, top, left + size, top + size))


@runtime_checkable
class TextEncoder(Protocol):
    """Text side of a CLIP-style backbone.

    Attributes:
        model: the full CLIP module (prompt learners hook into its text tower).
        logit_scale: CLIP's temperature ``exp(s)``, kept frozen by CLIP methods.
    """

    model: nn.Module
    logit_scale: float

    def tokenize(self, texts: Sequence[str]) -> torch.Tensor:
        """Tokenize prompts into a LongTensor ``[N, context_length]``."""
        ...

    def encode(self, tokens: torch.Tensor) -> torch.Tensor:
        """Encode tokens into (unnormalised) text features ``[N, D]``."""
        ...


@dataclass
class Backbone:
    """A loaded pretrained model, ready for adapters.

    Attributes:
        name: registry name of the model.
        image_encoder: module mapping preprocessed pixels ``[N, 3, H, W]`` to features
            ``[N, feature_dim]``; fine-tuning adapters deep-copy it.
        feature_dim: output feature size.
        image_size: native input side in pixels.
        text: the text encoder of CLIP-style models, else ``None``.
        weights_id: content hash of the weights (part of feature-cache keys).
        device: torch device string the modules live on.
        info: extra provenance (architecture, source, checkpoint path ...).
    """

    name: str
    image_encoder: nn.Module
    feature_dim: int
    image_size: int
    text: TextEncoder | None = None
    weights_id: str = ""
    device: str = "cpu"
    info: dict[str, Any] = field(default_factory=dict)

    def embed(self, pixels: torch.Tensor, batch_size: int = 256) -> torch.Tensor:
        """Return frozen features of preprocessed images, without gradients.

        Args:
            pixels: float tensor ``[N, 3, H, W]``.
            batch_size: forward batch size.

        Returns:
            Float32 features ``[N, feature_dim]`` on the backbone's device (float64 for a
            float64 encoder).
        """
        import torch

        encoder = self.image_encoder
        was_training = encoder.training
        encoder.eval()
        outputs = []
        with torch.no_grad():
            for start in range(0, pixels.shape[0], batch_size):
                chunk = pixels[start : start + batch_size].to(self.device)
                output = encoder(chunk)
                # bf16/fp16 (autocast) become float32; float64 models stay float64
                outputs.append(output if output.dtype == torch.float64 else output.float())
        encoder.train(was_training)
        if not outputs:
            return torch.zeros(0, self.feature_dim, device=self.device)
        return torch.cat(outputs)
