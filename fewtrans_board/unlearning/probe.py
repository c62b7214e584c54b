"""Few-shot episodes inside a dataset's train split, for decisions that must not see test images.

Choosing an unlearning strength by the oracle (``unlearn --match-oracle``) compares few-shot
accuracy of two models; doing that on the test split would tune the benchmark model on the
images it is later scored on. These episodes never leave the train split: per class, items
at even positions (in split order) form the support pool and items at odd positions the
query pool, so support and queries are disjoint; each episode draws K support images per
class from the pool (``RandomState(1000 * seed + K)``) and queries the whole query pool,
like the ``clip-kshot`` protocol (K in 1/2/4/8/16, seeds 1-3) does on train/test.

Any registered adapter scores the episodes with a given configuration on frozen features
computed once per model (:func:`episode_accuracies`), so the comparison uses the same
linear probe (or other method) the benchmark runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from fewtrans_board.core.errors import FewtransError
from fewtrans_board.unlearning.data import LabeledSplit

if TYPE_CHECKING:
    from fewtrans_board.api.backbone import Backbone
    from fewtrans_board.registry.lookup import Registry

SHOTS = (1, 2, 4, 8, 16)
"""Support images per class, as the ``clip-kshot`` protocol."""

SEEDS = (1, 2, 3)
"""Episode seeds, as the ``clip-kshot`` protocol."""


@dataclass(frozen=True)
class TrainEpisode:
    """One episode inside a train split (positions into the split's items).

    Attributes:
        shots: support images per class.
        seed: the draw's seed.
        support: positions of the support items.
        query: positions of the query items.
    """

    shots: int
    seed: int
    support: np.ndarray
    query: np.ndarray


def train_episodes(
    split: LabeledSplit, shots: Sequence[int] = SHOTS, seeds: Sequence[int] = SEEDS
) -> list[TrainEpisode]:
    """Episodes whose support and queries both come from ``split`` (a train split), disjoint.

    Raises:
        FewtransError: ``split`` is a test split, or a class has fewer support-pool items
            than the largest K.
    """
    if split.partition == "test":
        raise FewtransError(
            f"{split.name}: held-out episodes are drawn from the train split, never the test split"
        )
    labels = np.asarray(split.labels)
    pools = []
    for c in range(len(split.class_names)):
        positions = np.flatnonzero(labels == c)
        support, query = positions[0::2], positions[1::2]
        if len(support) < max(shots) or len(query) == 0:
            raise FewtransError(
                f"{split.name}: class {split.class_names[c]!r} has {len(positions)} train items, "
                f"too few for {max(shots)}-shot held-out episodes"
            )
        pools.append((support, query))
    query = np.concatenate([q for _, q in pools])
    episodes = []
    for seed in seeds:
        for k in shots:
            rng = np.random.RandomState(1000 * seed + k)
            support = np.concatenate([rng.choice(s, size=k, replace=False) for s, _ in pools])
            episodes.append(TrainEpisode(k, seed, support, query))
    return episodes


def split_features(backbone: Backbone, split: LabeledSplit) -> tuple[Any, Any]:
    """``(pixels, frozen features)`` of every item of ``split`` (small splits only)."""
    import numpy as np

    pixels = split.pixels(np.arange(len(split.items)))
    return pixels, backbone.embed(pixels)


def episode_accuracies(
    registry: Registry,
    adapter: str,
    backbone: Backbone,
    split: LabeledSplit,
    episodes: Sequence[TrainEpisode],
    config: dict[str, Any] | None = None,
) -> np.ndarray:
    """Accuracy (%) of ``adapter`` on every episode, trained from its default configuration.

    Args:
        registry: where ``adapter`` is registered.
        adapter: the adapter's name (e.g. ``linear-probe``).
        backbone: the frozen model.
        split: the train split the episodes index.
        episodes: from :func:`train_episodes`.
        config: overrides of the adapter's default configuration.

    Returns:
        One accuracy per episode, in order (torch is seeded with the episode's seed before
        every fit, so a rerun gives the same numbers).
    """
    import torch

    from fewtrans_board.api.episode_data import ImageSet, SupportSet

    cls = registry.adapters.get(adapter).obj
    instance = cls()
    values = {**cls.Config().to_dict(), **(config or {})}
    chosen = cls.Config.from_dict(values)
    pixels, features = split_features(backbone, split)
    labels = torch.as_tensor(split.labels)
    names = split.class_names
    out = []
    for episode in episodes:
        s, q = torch.as_tensor(episode.support), torch.as_tensor(episode.query)
        support = SupportSet(ImageSet(pixels[s], features=features[s]), labels[s], len(names))
        torch.manual_seed(episode.seed)
        predictor = instance.fit(backbone, support, names, chosen)
        with torch.no_grad():
            logits = predictor.predict(ImageSet(pixels[q], features=features[q]))
        predicted = logits.argmax(dim=1).cpu()
        out.append(float((predicted == labels[q]).double().mean()) * 100.0)
    return np.asarray(out)
