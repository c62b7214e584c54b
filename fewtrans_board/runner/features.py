"""Feature cache for frozen-backbone adapters: each image is embedded once per dataset.

Keys are (backbone weights id, preprocessing digest, item id). The cache lives in memory
and, when given a folder, in one ``.npy`` file per key prefix, written atomically so that
parallel shard workers and resumed runs reuse it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from fewtrans_board.atomic import write_with
from fewtrans_board.models.backbone import Backbone, Preprocessing
from fewtrans_board.runner.images import ImageStore

if TYPE_CHECKING:
    import torch


def cache_key(backbone: Backbone, preprocessing: Preprocessing) -> str:
    """Stable key of a (weights, preprocessing) pair."""
    text = f"{backbone.weights_id}|{preprocessing.digest()}"
    return hashlib.sha256(text.encode()).hexdigest()[:20]


class FeatureCache:
    """Frozen features of dataset items under one backbone and preprocessing.

    Args:
        backbone: the frozen backbone.
        images: the image store of the dataset.
        folder: where to persist features (``None`` keeps them in memory only).
        batch_size: embedding batch size.
        universe: every item the run may need. Items are embedded in fixed chunks of this
            sorted list, so an item's features never depend on which shard asked first
            (batch composition can change the last bits of CPU kernels).
    """

    def __init__(
        self,
        backbone: Backbone,
        images: ImageStore,
        folder: Path | None = None,
        batch_size: int = 256,
        universe: Sequence[str] = (),
    ) -> None:
        self.backbone = backbone
        self.images = images
        self.batch_size = batch_size
        self.key = cache_key(backbone, images.preprocessing)
        self.path = folder / f"{self.key}.npy" if folder is not None else None
        self._rows: dict[str, int] = {}
        self._matrix = np.zeros((0, backbone.feature_dim), dtype=np.float32)
        self._universe = sorted(set(universe))
        self._chunk_of = {item: i // batch_size for i, item in enumerate(self._universe)}
        if self.path is not None and self.path.is_file():
            self._load()

    def _load(self) -> None:
        assert self.path is not None
        items = json.loads(self.path.with_suffix(".json").read_text())
        self._matrix = np.load(self.path)
        self._rows = {item: i for i, item in enumerate(items)}

    def ensure(self, items: Sequence[str], progress: bool = False) -> None:
        """Embed every item not cached yet, in batches, and persist the cache."""
        from tqdm import tqdm

        wanted = [i for i in dict.fromkeys(items) if i not in self._rows]
        if not wanted:
            return
        outside = [i for i in wanted if i not in self._chunk_of]
        batches = [
            outside[s : s + self.batch_size] for s in range(0, len(outside), self.batch_size)
        ]
        for chunk in sorted({self._chunk_of[i] for i in wanted if i in self._chunk_of}):
            start = chunk * self.batch_size
            batches.append(self._universe[start : start + self.batch_size])
        missing = [i for batch in batches for i in batch]
        chunks = []
        bar = tqdm(total=len(missing), desc="embedding", unit="img", disable=not progress)
        for batch in batches:
            pixels = self.images.pixels(batch)
            chunks.append(self.backbone.embed(pixels, self.batch_size).cpu().numpy())
            bar.update(len(batch))
        bar.close()
        offset = len(self._rows)
        self._matrix = np.concatenate([self._matrix, *chunks]).astype(np.float32)
        self._rows.update({item: offset + i for i, item in enumerate(missing)})
        self._save()

    def _save(self) -> None:
        if self.path is None:
            return
        order = sorted(self._rows, key=self._rows.__getitem__)
        matrix = self._matrix
        write_with(self.path, lambda tmp: np.save(tmp.open("wb"), matrix))
        write_with(self.path.with_suffix(".json"), lambda tmp: _write_text(tmp, json.dumps(order)))

    def features(self, items: Sequence[str]) -> torch.Tensor:
        """Features ``[N, D]`` of ``items`` on the backbone's device (embedding any missing)."""
        import torch

        self.ensure(items)
        rows = [self._rows[i] for i in items]
        return torch.from_numpy(self._matrix[rows]).to(self.backbone.device)


def _write_text(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")
