"""Training episodes drawn from the source classes of a dataset (seeded, with augmentation).

Meta-training samples fresh N-way K-shot Q-query episodes from the *source* classes: a
dataset's ``extra["source_classes"]`` (class indices; the digits 0-4, miniImageNet's 64
training classes) or, without it, its base split. These episodes are training data, not a
benchmark, so they are drawn on the fly rather than frozen in a manifest.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fewtrans_board.api.backbone import Preprocessing
from fewtrans_board.api.dataset_spec import DatasetSpec
from fewtrans_board.core.errors import FewtransError
from fewtrans_board.datasets.images import ImageStore

if TYPE_CHECKING:
    import torch


def source_classes(spec: DatasetSpec) -> tuple[int, ...]:
    """Class indices meta-training may use: ``extra["source_classes"]``, else the base split."""
    declared = spec.extra.get("source_classes")
    if declared is None:
        return spec.split.base
    return tuple(int(c) for c in declared)  # type: ignore[attr-defined]


@dataclass
class TrainingEpisode:
    """Support and query pixels with episode labels ``0 .. n_way - 1``."""

    support: torch.Tensor
    support_labels: torch.Tensor
    query: torch.Tensor
    query_labels: torch.Tensor


class SourceEpisodes:
    """Draws training episodes from a local copy of a dataset.

    Args:
        spec: the source dataset.
        root: its local copy (``None`` for embedded datasets).
        preprocessing: resize and normalisation of the backbone.
        n_way: classes per episode.
        shots: support images per class.
        queries: query images per class.
        augment: random resized crop, horizontal flip and colour jitter (BSCD-FSL's
            meta-training augmentation) on every image.

    Raises:
        FewtransError: fewer than ``n_way`` source classes with ``shots + queries`` images.
    """

    def __init__(
        self,
        spec: DatasetSpec,
        root: Path | None,
        preprocessing: Preprocessing,
        *,
        n_way: int,
        shots: int,
        queries: int,
        augment: bool,
    ) -> None:
        listing = spec.list_items(root)
        needed = shots + queries
        self.pools = [listing[c] for c in source_classes(spec) if len(listing[c]) >= needed]
        if len(self.pools) < n_way:
            raise FewtransError(
                f"dataset {spec.name!r} has {len(self.pools)} source classes with at least "
                f"{needed} images (shots + queries) at {root or 'its embedded copy'}; "
                f"{n_way}-way episodes need {n_way}: lower --ways, --shots or --queries"
            )
        self.store = ImageStore(spec, root, preprocessing)
        self.preprocessing = preprocessing
        self.n_way, self.shots, self.queries = n_way, shots, queries
        self.augment = _augmentation(preprocessing.image_size) if augment else None

    def sample(self, rng: np.random.Generator) -> TrainingEpisode:
        """Draw one episode (classes, then images of each class, without replacement)."""
        import torch

        classes = rng.choice(len(self.pools), size=self.n_way, replace=False)
        support, query = [], []
        for label, c in enumerate(classes):
            pool = self.pools[int(c)]
            picks = rng.choice(len(pool), size=self.shots + self.queries, replace=False)
            items = [pool[int(i)] for i in picks]
            support += [(item, label) for item in items[: self.shots]]
            query += [(item, label) for item in items[self.shots :]]

        def pixels(pairs: list[tuple[str, int]]) -> torch.Tensor:
            images = [self.store.uint8(item) for item, _ in pairs]
            if self.augment is not None:
                images = [self.augment(image) for image in images]
            return self.preprocessing.normalize(torch.stack(images))

        def labels(pairs: list[tuple[str, int]]) -> torch.Tensor:
            return torch.tensor([label for _, label in pairs], dtype=torch.long)

        return TrainingEpisode(pixels(support), labels(support), pixels(query), labels(query))


def _augmentation(size: int) -> Any:
    from torchvision.transforms import v2

    return v2.Compose(
        [
            v2.RandomResizedCrop(size, antialias=True),
            v2.RandomHorizontalFlip(),
            v2.ColorJitter(brightness=0.4, contrast=0.4, saturation=0.4),
        ]
    )
