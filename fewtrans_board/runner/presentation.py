"""Turn a manifest episode into what an adapter receives (and the labels it never sees).

Manifests list items grouped by class in label order, so an item's position would tell its
label. Both sides are presented in a seeded random order (manifest hash, episode index;
verification adds a secret ``salt`` to the queries'), adapters get tensors only (pixels or
cached features, support labels, class names), and logits go back into manifest order
before they are scored and stored.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Literal

import numpy as np

from fewtrans_board.api.dataset_spec import DatasetSpec
from fewtrans_board.api.episode_data import ImageSet, SupportSet
from fewtrans_board.datasets.images import ImageStore
from fewtrans_board.episodes.manifest import ManifestEpisode
from fewtrans_board.runner.features import FeatureCache

Side = Literal["support", "query", "novel"]
Serve = Literal["pixels", "features"]


def presentation_order(
    manifest_sha256: str, episode: int, side: Side, size: int, salt: str = ""
) -> np.ndarray:
    """The seeded order in which one side of an episode is shown to adapters.

    Args:
        manifest_sha256: the manifest's content hash.
        episode: the episode index.
        side: ``support``, ``query`` or ``novel``.
        size: number of items on that side.
        salt: extra secret mixed into the seed (verification uses a fresh one).

    Returns:
        ``order`` with ``order[i]`` = the manifest position shown at position ``i``.
    """
    text = f"{manifest_sha256}:{episode}:{side}:{salt}"
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")
    return np.random.default_rng(seed).permutation(size)


def in_manifest_order(values: np.ndarray, order: np.ndarray) -> np.ndarray:
    """Rows of ``values`` (in presented order) put back into manifest order."""
    restored = np.empty_like(values)
    restored[order] = values
    return restored


@dataclass
class EpisodeInputs:
    """One episode ready for adapters, and what only the core keeps.

    Attributes:
        episode: the manifest episode.
        class_names: natural-language names in label order.
        support: labeled support images, in presented order.
        query: query images, in presented order.
        query_labels: true query labels in manifest order (never given to adapters).
        query_order: ``query`` row ``i`` is manifest query ``query_order[i]``.
        novel_query: base-to-novel only: query images of unseen classes, presented order.
        novel_labels: their hidden labels (novel label space), manifest order.
        novel_order: presented-to-manifest order of the novel queries.
        novel_class_names: names of the novel classes, in novel-label order.
    """

    episode: ManifestEpisode
    class_names: list[str]
    support: SupportSet
    query: ImageSet
    query_labels: np.ndarray
    query_order: np.ndarray
    novel_query: ImageSet | None = None
    novel_labels: np.ndarray | None = None
    novel_order: np.ndarray | None = None
    novel_class_names: list[str] | None = None


def episode_inputs(
    episode: ManifestEpisode,
    spec: DatasetSpec,
    images: ImageStore,
    cache: FeatureCache | None,
    manifest_sha256: str,
    *,
    serve: Serve = "features",
    memoize_features: bool = True,
    salt: str = "",
) -> EpisodeInputs:
    """Build the presented support set and query images, and the hidden query labels.

    Args:
        episode: the manifest episode.
        spec: its dataset.
        images: the image store.
        cache: the frozen-feature cache (frozen-backbone adapters), if any.
        manifest_sha256: the manifest hash (seeds the presentation order).
        serve: ``features`` hands cached features when a cache is given (and no pixels);
            ``pixels`` always hands pixels (e.g. to a verification worker).
        memoize_features: let image sets keep features computed from pixels.
        salt: secret mixed into the query order (see :func:`presentation_order`).
    """
    import torch

    def load(items: list[str]) -> ImageSet:
        if serve == "features" and cache is not None:
            return ImageSet(features=cache.features(items), memoize=memoize_features)
        return ImageSet(images.pixels(items), memoize=memoize_features)

    def order(side: Side, size: int) -> np.ndarray:
        return presentation_order(
            manifest_sha256, episode.index, side, size, "" if side == "support" else salt
        )

    support_order = order("support", len(episode.support))
    query_order = order("query", len(episode.query))
    support = [episode.support[i] for i in support_order]
    novel: dict[str, object] = {}
    if episode.novel_query:
        novel_order = order("novel", len(episode.novel_query))
        novel = {
            "novel_query": load([episode.novel_query[i][0] for i in novel_order]),
            "novel_labels": np.array([label for _, label in episode.novel_query], dtype=np.int64),
            "novel_order": novel_order,
            "novel_class_names": [spec.class_names[c] for c in episode.novel_classes],
        }
    return EpisodeInputs(
        episode=episode,
        class_names=[spec.class_names[c] for c in episode.classes],
        support=SupportSet(
            load([item for item, _ in support]),
            torch.tensor([label for _, label in support], dtype=torch.long),
            episode.ways,
        ),
        query=load([episode.query[i][0] for i in query_order]),
        query_labels=np.array([label for _, label in episode.query], dtype=np.int64),
        query_order=query_order,
        **novel,  # type: ignore[arg-type]
    )
