"""Turn a manifest episode into what an adapter receives (and the labels it never sees)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from fewtrans_board.adapters.episode_data import ImageSet, SupportSet
from fewtrans_board.datasets.spec import DatasetSpec
from fewtrans_board.episodes.manifest import ManifestEpisode
from fewtrans_board.runner.features import FeatureCache
from fewtrans_board.runner.images import ImageStore

if TYPE_CHECKING:
    from fewtrans_board.models.backbone import Backbone


@dataclass
class EpisodeInputs:
    """One episode ready for adapters.

    Attributes:
        episode: the manifest episode.
        class_names: natural-language names in label order.
        support: labeled support images.
        query: query images (labels are kept apart in ``query_labels``).
        query_labels: true query labels, used by the core to score predictions.
        novel_query: base-to-novel only: query images of unseen (novel) classes.
        novel_labels: their hidden labels (novel label space).
        novel_class_names: names of the novel classes, in novel-label order.
    """

    episode: ManifestEpisode
    class_names: list[str]
    support: SupportSet
    query: ImageSet
    query_labels: np.ndarray
    novel_query: ImageSet | None = None
    novel_labels: np.ndarray | None = None
    novel_class_names: list[str] | None = None


def _image_set(
    items: list[str], images: ImageStore, cache: FeatureCache | None, memoize: bool
) -> ImageSet:
    def pixels() -> object:
        return images.pixels(items)

    def features(backbone: Backbone) -> object:
        assert cache is not None
        return cache.features(items)

    return ImageSet(
        pixels,  # type: ignore[arg-type]
        size=len(items),
        features=features if cache is not None else None,  # type: ignore[arg-type]
        memoize=memoize,
    )


def episode_inputs(
    episode: ManifestEpisode,
    spec: DatasetSpec,
    images: ImageStore,
    cache: FeatureCache | None,
    *,
    memoize_features: bool = True,
) -> EpisodeInputs:
    """Build the support set, query images and hidden query labels of an episode."""
    import torch

    support_items = [item for item, _ in episode.support]
    query_items = [item for item, _ in episode.query]
    labels = torch.tensor([label for _, label in episode.support], dtype=torch.long)
    novel: dict[str, Any] = {}
    if episode.novel_query:
        novel_items = [item for item, _ in episode.novel_query]
        novel = {
            "novel_query": _image_set(novel_items, images, cache, memoize_features),
            "novel_labels": np.array([label for _, label in episode.novel_query], dtype=np.int64),
            "novel_class_names": [spec.class_names[c] for c in episode.novel_classes],
        }
    return EpisodeInputs(
        episode=episode,
        class_names=[spec.class_names[c] for c in episode.classes],
        support=SupportSet(
            _image_set(support_items, images, cache, memoize_features), labels, episode.ways
        ),
        query=_image_set(query_items, images, cache, memoize_features),
        query_labels=np.array([label for _, label in episode.query], dtype=np.int64),
        **novel,
    )
