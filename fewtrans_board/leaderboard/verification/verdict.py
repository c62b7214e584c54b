"""Turn one dataset's re-run checks into a verdict the report and the site can show."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fewtrans_board.leaderboard.verification.rerun import EpisodeCheck
from fewtrans_board.runner.inductive import INDUCTIVE_TOLERANCE
from fewtrans_board.stats.bounds import lower_bound, upper_bound

AGREEMENT_CONFIDENCE = 0.95
FIT_CONFIDENCE = 0.99
PERTURBATION_CONFIDENCE = 0.95
PERTURBATION_DROP = 15.0
"""Accuracy points a memorisation probe may lose (one-sided 95% lower bound) before the
entry is flagged. Honest built-ins lose far less on the digits benchmarks (measured by
``benchmarks/verification_cost.py``; see ``benchmarks/README.md``); a lookup table of
support images loses what the table gave it."""


def _finite(value: float) -> float | None:
    return value if np.isfinite(value) else None


@dataclass
class DatasetVerdict:
    """The verdict on one dataset of a submission.

    Attributes:
        dataset: the dataset.
        mode: ``exact`` (same numeric environment: predictions must equal the stored
            ones) or ``statistical`` (claimed minus re-run accuracy bounded by the margin).
        failures: why it failed (empty: passed).
        summary: what the report and the site show.
    """

    dataset: str
    mode: str
    failures: list[str] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        """Whether every check passed."""
        return not self.failures


def judge_dataset(
    dataset: str,
    checks: list[EpisodeCheck],
    *,
    exact: bool,
    margin: float,
    transductive: bool,
) -> DatasetVerdict:
    """The verdict on a dataset's re-run episodes.

    Args:
        dataset: the dataset.
        checks: one per re-run episode.
        exact: the re-run's numeric environment is the recorded one.
        margin: accuracy points claimed minus re-run may reach (statistical mode).
        transductive: the adapter declares transductive inference (no inductive probe).
    """
    verdict = DatasetVerdict(dataset, "exact" if exact else "statistical")
    claimed = np.array([c.claimed for c in checks])
    rerun = np.array([c.rerun for c in checks])
    identical = [c.configs_equal == c.configs and c.hpe_equal for c in checks]
    difference = upper_bound(claimed - rerun, AGREEMENT_CONFIDENCE)
    summary: dict[str, Any] = {
        "claimed_on_rerun_episodes": float(claimed.mean()),
        "rerun_accuracy": float(rerun.mean()),
        "difference": float((claimed - rerun).mean()),
        "difference_bound": _finite(difference.bound),
        "confidence": AGREEMENT_CONFIDENCE,
        "margin": margin,
        "identical_episodes": int(sum(identical)),
        "prediction_agreement": float(np.mean([c.agreement for c in checks])),
    }
    if exact:
        differing = [c for c, same in zip(checks, identical, strict=True) if not same]
        if differing:
            shown = ", ".join(
                f"{c.episode} ({c.configs - c.configs_equal} configurations"
                f"{'' if c.hpe_equal else ' and the HPE ensemble'})"
                for c in differing[:5]
            )
            verdict.failures.append(
                f"re-run in the recorded numeric environment, {len(differing)} of {len(checks)} "
                f"episodes predict differently from the stored results (episodes {shown}); "
                "identical inputs and kernels must give identical predictions"
            )
    elif not difference.bound <= margin:
        verdict.failures.append(
            f"claimed accuracy exceeds the re-run's by {difference.mean:+.2f} points on "
            f"{len(checks)} re-run episodes (at most {difference.bound:+.2f} at "
            f"{AGREEMENT_CONFIDENCE:.0%} confidence; the margin is {margin:.2f}); claimed "
            f"{claimed.mean():.2f}, re-run {rerun.mean():.2f}"
        )
    gaps = [c.probe_gap for c in checks if c.probe_gap is not None]
    if gaps:
        summary["inductive_gap"] = float(max(gaps))
        if not transductive and max(gaps) > INDUCTIVE_TOLERANCE:
            worst = max(
                (c for c in checks if c.probe_gap is not None), key=lambda c: c.probe_gap or 0
            )
            verdict.failures.append(
                f"episode {worst.episode}: queries asked in subsets get logits that differ by "
                f"{worst.probe_gap:.3g} (relative) from the same fit asked for the whole set, so "
                "a query's logits depend on the other queries (declare transductive = True)"
            )
    gains = [c.fit_gain for c in checks if c.fit_gain is not None]
    if gains:
        bound = lower_bound(gains, FIT_CONFIDENCE)
        summary["fit_many_gain"] = {"mean": bound.mean, "bound": _finite(bound.bound)}
        if bound.bound > margin:
            verdict.failures.append(
                f"fit_many() scores {bound.mean:+.2f} points above fitting each configuration "
                f"alone with fit() on {len(gains)} episodes (at least {bound.bound:+.2f} at "
                f"{FIT_CONFIDENCE:.0%} confidence): fit_many() must compute what fit() computes"
            )
    perturbed = [(c.rerun, c.perturbed) for c in checks if c.perturbed is not None]
    if perturbed:
        drops = np.array([clean - altered for clean, altered in perturbed])
        bound = lower_bound(drops, PERTURBATION_CONFIDENCE)
        summary["memorisation_probe"] = {
            "episodes": len(drops),
            "clean": float(np.mean([p[0] for p in perturbed])),
            "perturbed": float(np.mean([p[1] for p in perturbed])),
            "drop": bound.mean,
            "drop_bound": _finite(bound.bound),
            "threshold": PERTURBATION_DROP,
        }
        if bound.bound > PERTURBATION_DROP:
            verdict.failures.append(
                f"with each query image shifted by one pixel and re-encoded, accuracy falls "
                f"from {summary['memorisation_probe']['clean']:.1f} to "
                f"{summary['memorisation_probe']['perturbed']:.1f} (at least {bound.bound:.1f} "
                f"points at {PERTURBATION_CONFIDENCE:.0%} confidence; honest methods lose under "
                f"{PERTURBATION_DROP:.0f}): the method looks images up instead of learning "
                "from the support set"
            )
    verdict.summary = summary
    return verdict
