"""What a strength search measures: knowledge loss on validation datasets, or the oracle gap.

Both measurements dampen the loaded base model in place for one strength and restore it
afterwards (:class:`Dampener`), so no model copy is written per point.

- :func:`knowledge_loss_measure`: TKL on the validation datasets' test splits under one
  weighting (MMD, the paper's primary, or uniform), as a fraction of the original model's
  knowledge there: ``TKL / sum_v w_v (acc_v - chance_v)``. Knowledge is measured above
  chance so that 100% means "no better than guessing" (an untrained model), the only reading
  under which the paper's 90% severity is reachable and means "almost not trained".
- :func:`oracle_measure`: a linear probe (any adapter) on frozen features, on few-shot
  episodes inside the forget dataset's *train* split (:mod:`.probe`), against the same probe
  on the model trained without the forget classes; the forget dataset's test images are
  never read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from fewtrans_board.core.errors import FewtransError
from fewtrans_board.unlearning.data import LabeledSplit
from fewtrans_board.unlearning.importance import Importances
from fewtrans_board.unlearning.oracle import oracle_verdict
from fewtrans_board.unlearning.probe import episode_accuracies, train_episodes
from fewtrans_board.unlearning.ssd import DampeningStats, dampen
from fewtrans_board.unlearning.tkl import knowledge_loss, normalized, total_knowledge_loss, uniform
from fewtrans_board.unlearning.zeroshot import ZeroShotResult, zero_shot

if TYPE_CHECKING:
    from fewtrans_board.api.backbone import Backbone
    from fewtrans_board.registry.lookup import Registry

Measure = Callable[[float, float], tuple[float, dict[str, Any]]]

SEARCH_WEIGHTINGS = ("mmd", "uniform")
"""Weightings a knowledge-loss search can target (WordNet and PAD are reported by ``tkl``)."""


class Dampener:
    """Apply SSD at a given strength to a backbone's CLIP model, in place, and undo it.

    Args:
        backbone: the loaded base model (restored after every :meth:`applied`).
        forget: forget-set importances.
        retain: mean retain importances.
    """

    def __init__(self, backbone: Backbone, forget: Importances, retain: Importances) -> None:
        from fewtrans_board.blocks.clip_common import clip_model

        self.model = clip_model(backbone, "unlearning")
        self.parameters = dict(self.model.named_parameters())
        self.saved = {n: p.detach().clone() for n, p in self.parameters.items()}
        self.forget, self.retain = forget, retain

    @contextmanager
    def applied(self, alpha: float, lam: float) -> Iterator[DampeningStats]:
        """The model dampened at ``(alpha, lam)`` inside the block, restored after it."""
        import torch

        try:
            yield dampen(self.parameters, self.forget, self.retain, alpha, lam)
        finally:
            with torch.no_grad():
                for name, param in self.parameters.items():
                    param.copy_(self.saved[name])


def _stats(stats: DampeningStats) -> dict[str, Any]:
    return {"selected_fraction": stats.selected / max(stats.total, 1)}


@dataclass
class KnowledgeBaseline:
    """The original model on the validation datasets.

    Attributes:
        tests: validation test splits.
        before: the original model's zero-shot results on them.
        weighting: ``mmd`` or ``uniform``.
        weights: dataset -> weight (summing to 1).
        knowledge: ``sum_v w_v (acc_v - chance_v)`` in points.
    """

    tests: dict[str, LabeledSplit]
    before: dict[str, ZeroShotResult]
    weighting: str
    weights: dict[str, float]
    knowledge: float

    def measure(self, backbone: Backbone) -> dict[str, Any]:
        """TKL (points, CI), its fraction of the knowledge, and the per-dataset drops."""
        losses = {
            v: knowledge_loss(self.before[v], zero_shot(backbone, t)) for v, t in self.tests.items()
        }
        tkl, ci = total_knowledge_loss(losses, self.weights)
        return {
            "fraction": tkl / self.knowledge,
            "tkl": tkl,
            "tkl_ci95": ci,
            "drops": {v: loss.drop for v, loss in losses.items()},
        }

    def to_dict(self) -> dict[str, Any]:
        """The weighting, weights, original accuracies and knowledge (for the record)."""
        return {
            "validation": list(self.tests),
            "weighting": self.weighting,
            "weights": self.weights,
            "before": {v: r.accuracy for v, r in self.before.items()},
            "chance": {v: 100.0 * r.chance for v, r in self.before.items()},
            "knowledge": self.knowledge,
        }


def knowledge_baseline(
    original: Backbone,
    forget_train: LabeledSplit,
    validation_train: Mapping[str, LabeledSplit],
    validation_test: Mapping[str, LabeledSplit],
    weighting: str,
) -> KnowledgeBaseline:
    """Zero-shot of the original model on the validation tests and the TKL weights.

    MMD weights use the forget and validation *train* splits' features (as ``tkl`` does).

    Raises:
        FewtransError: an unsupported weighting, or no knowledge above chance to lose.
    """
    from fewtrans_board.unlearning.similarity import mmd_distance
    from fewtrans_board.unlearning.tkl_run import dataset_features

    if weighting not in SEARCH_WEIGHTINGS:
        raise FewtransError(
            f"a knowledge-loss search targets TKL under {' or '.join(SEARCH_WEIGHTINGS)}, "
            f"not {weighting!r}"
        )
    before = {v: zero_shot(original, t) for v, t in validation_test.items()}
    if weighting == "mmd":
        reference = dataset_features(original, forget_train)
        weights = normalized(
            {
                v: mmd_distance(reference, dataset_features(original, s))
                for v, s in validation_train.items()
            }
        )
    else:
        weights = uniform(list(validation_test))
    knowledge = sum(w * (before[v].accuracy - 100.0 * before[v].chance) for v, w in weights.items())
    if knowledge <= 0:
        raise FewtransError(
            "the original model is at or below chance on the validation datasets; there is "
            "no knowledge to lose"
        )
    return KnowledgeBaseline(dict(validation_test), before, weighting, weights, knowledge)


def knowledge_loss_measure(
    dampener: Dampener, backbone: Backbone, baseline: KnowledgeBaseline, say: Callable[[str], None]
) -> Measure:
    """``(alpha, lam) -> (knowledge-loss fraction, detail)``."""

    def measure(alpha: float, lam: float) -> tuple[float, dict[str, Any]]:
        with dampener.applied(alpha, lam) as stats:
            got = baseline.measure(backbone)
        say(
            f"alpha={alpha:.4g} lambda={lam:.4g}: TKL {got['tkl']:.2f} points "
            f"({100 * got['fraction']:.1f}% of the knowledge)"
        )
        return got["fraction"], {**got, **_stats(stats)}

    return measure


@dataclass
class OracleProbe:
    """The oracle side of the probe comparison, on train-split episodes.

    Attributes:
        scratch: the trained-without model's name.
        adapter: the probe adapter.
        split: the forget dataset's train split.
        episodes: the held-out episodes inside it.
        accuracies: the trained-without model's per-episode accuracy.
    """

    scratch: str
    adapter: str
    split: LabeledSplit
    episodes: list[Any]
    accuracies: np.ndarray

    def to_dict(self) -> dict[str, Any]:
        """Scratch model, adapter, the episodes' description and its mean accuracy."""
        return {
            "scratch_model": self.scratch,
            "adapter": self.adapter,
            "episodes": (
                f"{len(self.episodes)} episodes inside the {self.split.name} train split "
                "(support: even positions per class, queries: odd; K in 1/2/4/8/16, seeds 1-3)"
            ),
            "scratch_accuracy": float(self.accuracies.mean()),
        }


def oracle_probe(
    registry: Registry,
    scratch_name: str,
    scratch: Backbone,
    forget_train: LabeledSplit,
    adapter: str,
) -> OracleProbe:
    """Score the trained-without model with ``adapter`` on train-split episodes."""
    episodes = train_episodes(forget_train)
    accuracies = episode_accuracies(registry, adapter, scratch, forget_train, episodes)
    return OracleProbe(scratch_name, adapter, forget_train, episodes, accuracies)


def oracle_measure(
    registry: Registry,
    dampener: Dampener,
    backbone: Backbone,
    probe: OracleProbe,
    say: Callable[[str], None],
) -> Measure:
    """``(alpha, lam) -> (-(probe gap), detail)``; the gap is unlearned - scratch (points)."""

    def measure(alpha: float, lam: float) -> tuple[float, dict[str, Any]]:
        with dampener.applied(alpha, lam) as stats:
            accuracies = episode_accuracies(
                registry, probe.adapter, backbone, probe.split, probe.episodes
            )
        verdict = oracle_verdict(accuracies, probe.accuracies)
        say(
            f"alpha={alpha:.4g} lambda={lam:.4g}: {probe.adapter} {verdict.unlearned:.1f} vs "
            f"{verdict.scratch:.1f} trained without (gap {verdict.difference:+.1f})"
        )
        detail = {
            "probe_accuracy": verdict.unlearned,
            "gap": verdict.difference,
            "verdict": verdict.to_dict(),
            **_stats(stats),
        }
        return -verdict.difference, detail

    return measure
