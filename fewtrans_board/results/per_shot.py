"""CoOp-style reporting of few-shot CLIP runs: per K, the mean over seeds and their spread.

A ``clip-kshot`` manifest holds one episode per (K, seed): K training images per class, the
whole test split as queries. Pooling its episodes into one mean ± CI mixes shots, so these
runs are reported per K (the mean over the seeds with their standard deviation, as CoOp
and Dassl's ``parse_test_res`` print them), and the headline is the inductive-CLIP paper's
aggregation: the average over shots (and, for a table, over datasets).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fewtrans_board.episodes.samplers import CoopKShotSampler
from fewtrans_board.results.load import RunResults


@dataclass(frozen=True)
class ShotResult:
    """One K: accuracy of every seed, their mean and population standard deviation."""

    shots: int
    seeds: dict[int, float]

    @property
    def mean(self) -> float:
        """Mean over seeds."""
        return float(np.mean(list(self.seeds.values())))

    @property
    def std(self) -> float:
        """Standard deviation over seeds (ddof 0, as Dassl's ``parse_test_res``)."""
        return float(np.std(list(self.seeds.values())))

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return {
            "shots": self.shots,
            "mean": self.mean,
            "std": self.std,
            "seeds": [{"seed": s, "accuracy": a} for s, a in sorted(self.seeds.items())],
        }


@dataclass(frozen=True)
class PerShot:
    """Accuracy per (K, seed), summarised per K and averaged over shots.

    Attributes:
        accuracy: ``{(K, seed): accuracy}``.
    """

    accuracy: dict[tuple[int, int], float]

    @property
    def shots(self) -> list[ShotResult]:
        """Per K (ascending): the seeds' accuracies."""
        grouped: dict[int, dict[int, float]] = {}
        for (k, seed), value in sorted(self.accuracy.items()):
            grouped.setdefault(k, {})[seed] = value
        return [ShotResult(k, seeds) for k, seeds in grouped.items()]

    @property
    def by_shots(self) -> dict[int, ShotResult]:
        """:attr:`shots` keyed by K."""
        return {s.shots: s for s in self.shots}

    @property
    def average(self) -> float:
        """The headline: mean over K of the per-K means over seeds."""
        return float(np.mean([s.mean for s in self.shots]))

    @property
    def average_std(self) -> float:
        """Spread of the headline over seeds: std of each seed's average over K."""
        seeds = sorted({seed for _, seed in self.accuracy})
        per_seed = [
            np.mean([v for (_, s), v in self.accuracy.items() if s == seed]) for seed in seeds
        ]
        return float(np.std(per_seed))

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return {
            "shots": [s.to_dict() for s in self.shots],
            "average": self.average,
            "average_std": self.average_std,
        }


def shot_seed_pairs(manifest: Mapping[str, Any]) -> list[tuple[int, int]] | None:
    """``(K, seed)`` of each episode of a k-shot manifest, in episode order.

    Args:
        manifest: a manifest's metadata (``episode_info``) or the ``manifest`` block of a
            run's provenance (the sampler's ``shots`` and ``seeds``).

    Returns:
        The pairs, or ``None`` for manifests of other protocols.
    """
    info = manifest.get("episode_info")
    if info:
        return [(int(i["shots"]), int(i["seed"])) for i in info]
    sampler = manifest.get("protocol", {}).get("sampler", {})
    if sampler.get("kind") != "coop-kshot":
        return None
    return CoopKShotSampler(tuple(sampler["shots"]), tuple(sampler["seeds"])).pairs()


def per_shot(
    episodes: Sequence[int] | np.ndarray,
    accuracy: Sequence[float] | np.ndarray,
    pairs: Sequence[tuple[int, int]],
) -> PerShot:
    """Group per-episode accuracies by (K, seed).

    Args:
        episodes: episode indices (manifest order positions).
        accuracy: their accuracies, aligned with ``episodes``.
        pairs: ``(K, seed)`` of every manifest episode (:func:`shot_seed_pairs`).
    """
    return PerShot({pairs[int(e)]: float(a) for e, a in zip(episodes, accuracy, strict=True)})


def run_per_shot(run: RunResults, aggregation: str = "hpe") -> PerShot | None:
    """Per-K results of one run's base queries, or ``None`` if its manifest is not k-shot.

    Args:
        run: the loaded run.
        aggregation: one of :meth:`RunResults.aggregations`' names.
    """
    pairs = shot_seed_pairs(run.provenance.manifest.to_json())
    if pairs is None:
        return None
    episodes, _, _ = run.config_matrix()
    return per_shot(episodes, run.aggregations()[aggregation], pairs)


def average_over_datasets(results: Mapping[str, PerShot]) -> PerShot:
    """The paper's table aggregation: every (K, seed) averaged over datasets.

    Per K the mean and spread over seeds then describe the dataset-averaged accuracy, and
    :attr:`PerShot.average` is the average over shots and datasets. Only the (K, seed)
    pairs every dataset covers are averaged (all of them for complete runs).

    Raises:
        ValueError: no datasets, or no (K, seed) pair common to all of them.
    """
    if not results:
        raise ValueError("no datasets to average")
    common = set.intersection(*(set(r.accuracy) for r in results.values()))
    if not common:
        raise ValueError("the datasets share no (K, seed) pair")
    return PerShot(
        {p: float(np.mean([r.accuracy[p] for r in results.values()])) for p in sorted(common)}
    )
