"""What an adapter is given: a support set with labels, and unlabeled query images."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from fewtrans_board.models.backbone import Backbone

FeatureLoader = Callable[["Backbone"], "torch.Tensor"]


class ImageSet:
    """Preprocessed images of one side of an episode.

    Pixels are loaded lazily and at most once; frozen features come from the runner's
    feature cache when one is attached, so frozen-backbone adapters never pay for decoding
    images whose features are cached.

    Args:
        pixels: a tensor ``[N, 3, H, W]`` or a zero-argument callable producing it.
        size: number of images (required when ``pixels`` is a callable).
        features: optional ``features(backbone) -> [N, D]`` supplied by the runner.
        memoize: keep computed features for later calls (``False`` recomputes them on
            every call; benchmarks use it as the uncached baseline).
    """

    def __init__(
        self,
        pixels: torch.Tensor | Callable[[], torch.Tensor],
        *,
        size: int | None = None,
        features: FeatureLoader | None = None,
        memoize: bool = True,
    ) -> None:
        if callable(pixels):
            if size is None:
                raise ValueError("size is required when pixels are loaded lazily")
            self._pixels: torch.Tensor | None = None
            self._load: Callable[[], torch.Tensor] | None = pixels
            self._size = size
        else:
            self._pixels = pixels
            self._load = None
            self._size = int(pixels.shape[0])
        self._features = features
        self._memoize = memoize
        self._feature_memo: dict[int, torch.Tensor] = {}

    def __len__(self) -> int:
        return self._size

    @property
    def pixels(self) -> torch.Tensor:
        """Preprocessed images ``[N, 3, H, W]`` (loaded on first access)."""
        if self._pixels is None:
            assert self._load is not None
            self._pixels = self._load()
            self._load = None
        return self._pixels

    def features(self, backbone: Backbone) -> torch.Tensor:
        """Frozen backbone features ``[N, D]`` of these images (no gradient).

        Args:
            backbone: the backbone whose (unmodified) image encoder defines the features.

        Returns:
            Float32 features on the backbone's device.
        """
        key = id(backbone)
        if key in self._feature_memo:
            return self._feature_memo[key]
        loader = self._features
        features = loader(backbone) if loader is not None else backbone.embed(self.pixels)
        if self._memoize:
            self._feature_memo[key] = features
        return features


class SupportSet:
    """Labeled support images of one episode.

    Args:
        images: the support images.
        labels: LongTensor ``[N]`` of episode labels in ``0 .. n_way - 1``.
        n_way: number of classes in the episode.
    """

    def __init__(self, images: ImageSet, labels: torch.Tensor, n_way: int) -> None:
        if len(images) != int(labels.shape[0]):
            raise ValueError(f"support has {len(images)} images but {int(labels.shape[0])} labels")
        self.images = images
        self.labels = labels
        self.n_way = n_way

    def __len__(self) -> int:
        return len(self.images)
