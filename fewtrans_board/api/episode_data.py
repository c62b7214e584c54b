"""What an adapter is given: a support set with labels, and unlabeled query images.

Tensors only (preprocessed pixels and/or frozen features, the support labels; the class
names come separately): nothing here refers to item ids, file paths or manifest rows, and the
runner presents images in a seeded random order, so nothing reachable tells a query's label.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fewtrans_board.core.errors import FewtransError

if TYPE_CHECKING:
    import torch

    from fewtrans_board.api.backbone import Backbone


class ImageSet:
    """Images of one side of an episode, as pixels, frozen features, or both.

    Args:
        pixels: preprocessed images ``[N, 3, H, W]``, or ``None`` when the runner hands a
            frozen-backbone adapter cached features only.
        features: frozen backbone features ``[N, D]`` from the runner's feature cache, if
            any; otherwise :meth:`features` embeds ``pixels`` with the backbone.
        memoize: keep features computed from pixels for later calls (``False`` recomputes
            them on every call; benchmarks use it as the uncached baseline).

    Raises:
        ValueError: neither pixels nor features, or their lengths differ.
    """

    def __init__(
        self,
        pixels: torch.Tensor | None = None,
        *,
        features: torch.Tensor | None = None,
        memoize: bool = True,
    ) -> None:
        if pixels is None and features is None:
            raise ValueError("an ImageSet needs pixels, features or both")
        if pixels is not None and features is not None and len(pixels) != len(features):
            raise ValueError(f"{len(pixels)} images but {len(features)} feature rows")
        self._pixels = pixels
        self._features = features
        self._memoize = memoize
        self._feature_memo: dict[int, torch.Tensor] = {}
        self._size = int((pixels if pixels is not None else features).shape[0])  # type: ignore[union-attr]

    def __len__(self) -> int:
        return self._size

    @property
    def pixels(self) -> torch.Tensor:
        """Preprocessed images ``[N, 3, H, W]``.

        Raises:
            FewtransError: the runner served cached features only (a ``frozen_backbone``
                adapter reads :meth:`features`, never pixels).
        """
        if self._pixels is None:
            raise FewtransError(
                "these images were served as cached frozen features: an adapter that declares "
                "frozen_backbone = True reads query.features(backbone) (or "
                "support.images.features(backbone)), never pixels; set frozen_backbone = False "
                "to receive pixels"
            )
        return self._pixels

    def features(self, backbone: Backbone) -> torch.Tensor:
        """Frozen backbone features ``[N, D]`` of these images (no gradient).

        Args:
            backbone: the backbone whose (unmodified) image encoder defines the features.

        Returns:
            Float32 features on the backbone's device.
        """
        if self._features is not None:
            return self._features
        key = id(backbone)
        if key in self._feature_memo:
            return self._feature_memo[key]
        features = backbone.embed(self.pixels)
        if self._memoize:
            self._feature_memo[key] = features
        return features

    def served(self) -> tuple[str, torch.Tensor]:
        """What the runner handed over: ``("features", [N, D])`` or ``("pixels", [N, 3, H, W])``.

        The runner uses it to send the same tensors to a plugin worker.
        """
        if self._features is not None:
            return "features", self._features
        return "pixels", self.pixels

    def subset(self, index: torch.Tensor) -> ImageSet:
        """The images at ``index`` (a LongTensor of positions), in that order."""
        return ImageSet(
            None if self._pixels is None else self._pixels[index],
            features=None if self._features is None else self._features[index],
            memoize=self._memoize,
        )


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
