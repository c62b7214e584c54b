"""Decode and resize each image once per process; normalise on demand."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from fewtrans_board.datasets.spec import DatasetSpec
from fewtrans_board.errors import FewtransError
from fewtrans_board.models.backbone import Preprocessing

if TYPE_CHECKING:
    import torch


class ImageStore:
    """An LRU cache of resized ``uint8`` images of one dataset under one preprocessing.

    Args:
        spec: the dataset.
        root: its local copy (``None`` for embedded datasets).
        preprocessing: the evaluation transform.
        max_bytes: cache budget; least recently used images are evicted beyond it.
    """

    def __init__(
        self,
        spec: DatasetSpec,
        root: Path | None,
        preprocessing: Preprocessing,
        max_bytes: int = 2 << 30,
    ) -> None:
        self.spec = spec
        self.root = root
        self.preprocessing = preprocessing
        self.max_bytes = max_bytes
        self._cache: OrderedDict[str, torch.Tensor] = OrderedDict()
        self._bytes = 0

    def uint8(self, item: str) -> torch.Tensor:
        """The resized ``uint8 [3, S, S]`` image of ``item``."""
        cached = self._cache.get(item)
        if cached is not None:
            self._cache.move_to_end(item)
            return cached
        try:
            image = self.spec.reader.load_image(self.root, item)
        except FewtransError as exc:
            raise FewtransError(f"dataset {self.spec.name!r}, item {item!r}: {exc}") from exc
        tensor = self.preprocessing.resize_uint8(image)
        self._cache[item] = tensor
        self._bytes += tensor.numel()
        while self._bytes > self.max_bytes and len(self._cache) > 1:
            _, evicted = self._cache.popitem(last=False)
            self._bytes -= evicted.numel()
        return tensor

    def pixels(self, items: Sequence[str]) -> torch.Tensor:
        """Normalised float pixels ``[N, 3, S, S]`` of ``items``."""
        import torch

        size = self.preprocessing.image_size
        if not items:
            return torch.zeros(0, 3, size, size)
        return self.preprocessing.normalize(torch.stack([self.uint8(i) for i in items]))
