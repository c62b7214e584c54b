"""Decode and resize each image once (per process, or once for all with a decoded cache)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from fewtrans_board.api.backbone import Preprocessing
from fewtrans_board.api.dataset_spec import DatasetSpec
from fewtrans_board.core.errors import FewtransError

if TYPE_CHECKING:
    import numpy as np
    import torch

    from fewtrans_board.datasets.decoded import DecodedImages


@dataclass(eq=False)
class ImageStore:
    """Resized ``uint8`` images of one dataset under one preprocessing.

    Items of the ``decoded`` file are read from it (decoded there once for every process);
    other items go through an in-process LRU cache.

    Attributes:
        spec: the dataset.
        root: its local copy (``None`` for embedded datasets).
        preprocessing: the evaluation transform.
        max_bytes: LRU budget; least recently used images are evicted beyond it.
        decoded: the shared decoded-image file of the run's manifest, if any.
        device: where :meth:`pixels` returns normalised pixels (``uint8`` travels, the
            float conversion happens there).
    """

    spec: DatasetSpec
    root: Path | None
    preprocessing: Preprocessing
    max_bytes: int = 2 << 30
    decoded: DecodedImages | None = None
    device: str = "cpu"
    _cache: OrderedDict[str, torch.Tensor] = field(default_factory=OrderedDict, init=False)
    _bytes: int = field(default=0, init=False)

    def decode(self, item: str) -> torch.Tensor:
        """Load ``item`` from the dataset and resize it to ``uint8 [3, S, S]`` (no caching).

        Raises:
            FewtransError: the reader cannot load the item (names dataset and item).
        """
        try:
            image = self.spec.reader.load_image(self.root, item)
        except FewtransError as exc:
            raise FewtransError(f"dataset {self.spec.name!r}, item {item!r}: {exc}") from exc
        return self.preprocessing.resize_uint8(image)

    def _decode_array(self, item: str) -> np.ndarray:
        return self.decode(item).numpy()

    def uint8(self, item: str) -> torch.Tensor:
        """The resized ``uint8 [3, S, S]`` image of ``item``."""
        import torch

        if self.decoded is not None and item in self.decoded:
            return torch.from_numpy(self.decoded.get(item, self._decode_array))
        cached = self._cache.get(item)
        if cached is not None:
            self._cache.move_to_end(item)
            return cached
        tensor = self.decode(item)
        self._cache[item] = tensor
        self._bytes += tensor.numel()
        while self._bytes > self.max_bytes and len(self._cache) > 1:
            _, evicted = self._cache.popitem(last=False)
            self._bytes -= evicted.numel()
        return tensor

    def pixels(self, items: Sequence[str]) -> torch.Tensor:
        """Normalised float pixels ``[N, 3, S, S]`` of ``items`` on :attr:`device`."""
        import torch

        size = self.preprocessing.image_size
        if not items:
            return torch.zeros(0, 3, size, size, device=self.device)
        stacked = torch.stack([self.uint8(i) for i in items])
        return self.preprocessing.normalize(stacked.to(self.device, non_blocking=True))
