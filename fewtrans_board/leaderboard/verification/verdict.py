"""Turn one dataset's re-run checks into a verdict the report and the site can show.

Two rules, and the second always applies: *exact*, where the re-run's numeric environment
equals the recorded one, every prediction of every configuration and fusion must equal the
stored one; *statistical*, in either mode, claimed minus re-run of every accuracy the site can
show must stay within the margin (a paired one-sided t bound, Bonferroni over all of them), so
a recorded environment that differs (the submitter writes it) gains a forger no more than the
margin. Probes add failures: inductiveness, ``fit_many``, memorisation and cost (SECURITY.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fewtrans_board.leaderboard.verification.rerun import EpisodeCheck, config_quantity, quantity
from fewtrans_board.runner.inductive import INDUCTIVE_TOLERANCE
from fewtrans_board.stats.base_novel import harmonic_mean
from fewtrans_board.stats.bounds import lower_bound, upper_bound

AGREEMENT_CONFIDENCE = 0.95
"""Family-wise confidence of the claimed-minus-re-run bounds (split over every quantity)."""
FIT_CONFIDENCE = 0.99
PERTURBATION_CONFIDENCE = 0.95
PERTURBATION_DROP = 15.0
"""Accuracy points a memorisation probe may lose (one-sided 95% lower bound) before the
entry is flagged. Honest built-ins lose far less under the randomised probe on the digits
benchmarks (measured by ``benchmarks/verification_cost.py``; see ``benchmarks/README.md``);
a lookup table of support images loses what the table gave it."""
SLOWDOWN_FACTOR = 4.0
"""How many times its claimed fit seconds a re-run request may take (beyond the worker's
measured start-up and :data:`SLOWDOWN_ALLOWANCE_S`), and a probe the re-run's, before the
plugin is refused as slower under verification."""
SLOWDOWN_ALLOWANCE_S = 2.0
"""Seconds of slack on top of the factor (process start, data transfer, timer noise)."""
FUSIONS = ("logit-mean", "vote", "oracle", "mean-single")
"""The accuracies the site shows besides each configuration's (``hpe`` is one fusion)."""


def _finite(value: float) -> float | None:
    return value if np.isfinite(value) else None


@dataclass
class DatasetVerdict:
    """The verdict on one dataset of a submission.

    Attributes:
        dataset: the dataset.
        mode: ``exact`` (same numeric environment: predictions must equal the stored
            ones, and the statistical rule holds too) or ``statistical`` (claimed minus
            re-run of every accuracy bounded by the margin).
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


@dataclass(frozen=True)
class CostFacts:
    """What the judge knows of a plugin's cost besides the re-runs.

    Attributes:
        start_s: the judge's wall-clock seconds of the worker's first request (start-up
            and loading the plugin in a fresh episode process: every request pays it).
        comparable: the re-run device is of the recorded kind (CPU and CPU, CUDA and
            CUDA), so claimed seconds can be held against measured ones.
    """

    start_s: float = 0.0
    comparable: bool = True


@dataclass(frozen=True)
class Bound:
    """Claimed minus re-run of one accuracy over the re-run episodes."""

    claimed: float
    rerun: float
    difference: float
    bound: float

    def to_dict(self) -> dict[str, float | None]:
        """JSON-friendly form (an unbounded difference is ``None``)."""
        return {
            "claimed": self.claimed,
            "rerun": self.rerun,
            "difference": self.difference,
            "bound": _finite(self.bound),
        }


def _bound(pairs: list[list[float]], identical: bool, confidence: float) -> Bound:
    values = np.asarray(pairs, dtype=np.float64)
    claimed, rerun = values[:, 0], values[:, 1]
    differences = claimed - rerun
    if identical or not np.any(differences):
        bound = 0.0 if identical else float(differences.mean())
    elif not np.all(np.isfinite(differences)):
        bound = float("inf")  # a configuration or split the other side lacks
    else:
        bound = upper_bound(differences, confidence).bound
    return Bound(float(claimed.mean()), float(rerun.mean()), float(differences.mean()), bound)


def agreement_bounds(
    checks: list[EpisodeCheck], oracle: dict[str, int]
) -> tuple[dict[str, Bound], float]:
    """Claimed-minus-re-run bounds of every compared accuracy, and their confidence each.

    Args:
        checks: one per re-run episode.
        oracle: per split, the configuration with the best stored mean over every episode
            (the site's oracle).

    Returns:
        ``{quantity: bound}`` (every configuration, fusion and mean over configurations of
        every split, plus ``<split>:oracle``) and the per-quantity confidence.
    """
    identical = all(c.identical for c in checks)
    names = sorted({q for c in checks for q in c.accuracies})
    confidence = 1.0 - (1.0 - AGREEMENT_CONFIDENCE) / max(1, len(names))
    pairs: dict[str, list[list[float]]] = {q: [] for q in names}
    for check in checks:
        for name in names:
            pairs[name].append(check.accuracies.get(name, [float("nan"), float("nan")]))
    bounds = {name: _bound(pairs[name], identical, confidence) for name in names}
    for split, index in oracle.items():
        key = config_quantity(split, index)
        if key in bounds:
            bounds[quantity(split, "oracle")] = bounds[key]
    return bounds, confidence


def _agreement(
    verdict: DatasetVerdict,
    checks: list[EpisodeCheck],
    *,
    exact: bool,
    margin: float,
    oracle: dict[str, int],
) -> None:
    identical = [c.identical for c in checks]
    if exact and not all(identical):
        differing = [c for c, same in zip(checks, identical, strict=True) if not same]
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
    bounds, confidence = agreement_bounds(checks, oracle)
    over = {name: b for name, b in bounds.items() if not b.bound <= margin}
    splits = sorted({name.split(":")[0] for name in bounds})
    verdict.summary["agreement"] = {
        "quantities": len(bounds),
        "confidence_each": confidence,
        "fusions": {
            split: {
                f: bounds[quantity(split, f)].to_dict()
                for f in FUSIONS
                if quantity(split, f) in bounds
            }
            for split in splits
        },
        "worst": None
        if not bounds
        else {"quantity": (w := max(bounds, key=lambda n: bounds[n].bound)), **bounds[w].to_dict()},
    }
    if over:
        shown = "; ".join(
            f"{name} claimed {b.claimed:.2f}, re-run {b.rerun:.2f} (at most {b.bound:+.2f})"
            for name, b in sorted(over.items(), key=lambda kv: -kv[1].bound)[:4]
        )
        verdict.failures.append(
            f"claimed accuracy exceeds the re-run's by more than the margin {margin:.2f} on "
            f"{len(over)} of {len(bounds)} compared accuracies over {len(checks)} re-run "
            f"episodes ({AGREEMENT_CONFIDENCE:.0%} confidence over all of them): {shown}"
        )
    if "novel" in splits:
        hpe = verdict.summary["hpe_aggregation"]
        base, novel = bounds.get(quantity("base", hpe)), bounds.get(quantity("novel", hpe))
        if base is not None and novel is not None:
            verdict.summary["harmonic_mean"] = {
                "claimed": harmonic_mean(base.claimed, novel.claimed),
                "rerun": harmonic_mean(base.rerun, novel.rerun),
            }


def _median(values: list[float]) -> float:
    return float(np.median(values)) if values else 0.0


def _cost(verdict: DatasetVerdict, checks: list[EpisodeCheck], cost: CostFacts) -> None:
    claimed = _median([c.claimed_seconds for c in checks])
    rerun = _median([c.rerun_seconds for c in checks])
    probe_ratios = {
        kind: [
            c.probe_seconds[kind] / max(c.rerun_seconds, 1e-9)
            for c in checks
            if kind in c.probe_seconds
        ]
        for kind in ("inductive", "perturbed")
    }
    verdict.summary["verification_time"] = {
        "claimed_seconds": claimed,
        "rerun_seconds": rerun,
        "start_seconds": cost.start_s,
        "compared_with_claim": cost.comparable,
        "probe_over_rerun": {k: _median(v) for k, v in probe_ratios.items() if v},
        "factor": SLOWDOWN_FACTOR,
    }
    if cost.comparable and rerun - cost.start_s > SLOWDOWN_FACTOR * claimed + SLOWDOWN_ALLOWANCE_S:
        verdict.failures.append(
            f"a re-run request takes {rerun:.2f} s (median; the worker starts in "
            f"{cost.start_s:.2f} s), over {SLOWDOWN_FACTOR:.0f} times the {claimed:.2f} s the "
            "results claim for fitting the episode: the plugin is slower under verification "
            "than it claims"
        )
    for kind in probe_ratios:
        slow = [
            c
            for c in checks
            if kind in c.probe_seconds
            and c.probe_seconds[kind] > SLOWDOWN_FACTOR * c.rerun_seconds + SLOWDOWN_ALLOWANCE_S
        ]
        probed = sum(1 for c in checks if kind in c.probe_seconds)
        if slow and len(slow) * 2 > probed:
            verdict.failures.append(
                f"the {kind} probe takes over {SLOWDOWN_FACTOR:.0f} times the re-run of the "
                f"same episode in {len(slow)} of {probed} probed episodes: the plugin is "
                "slower when it is probed"
            )


def _probes(
    verdict: DatasetVerdict, checks: list[EpisodeCheck], *, transductive: bool, margin: float
) -> None:
    summary = verdict.summary
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
        probe = {
            "episodes": len(drops),
            "clean": float(np.mean([p[0] for p in perturbed])),
            "perturbed": float(np.mean([p[1] for p in perturbed])),
            "drop": bound.mean,
            "drop_bound": _finite(bound.bound),
            "threshold": PERTURBATION_DROP,
        }
        summary["memorisation_probe"] = probe
        if bound.bound > PERTURBATION_DROP:
            verdict.failures.append(
                f"with each query image shifted, cropped, jittered and re-encoded by a secret "
                f"draw, accuracy falls from {probe['clean']:.1f} to {probe['perturbed']:.1f} "
                f"(at least {bound.bound:.1f} points at {PERTURBATION_CONFIDENCE:.0%} "
                f"confidence; honest methods lose under {PERTURBATION_DROP:.0f}): the method "
                "looks images up instead of learning from the support set"
            )


def judge_dataset(
    dataset: str,
    checks: list[EpisodeCheck],
    *,
    exact: bool,
    margin: float,
    transductive: bool,
    aggregation: str = "vote",
    oracle: dict[str, int] | None = None,
    cost: CostFacts | None = None,
) -> DatasetVerdict:
    """The verdict on a dataset's re-run episodes.

    Args:
        dataset: the dataset.
        checks: one per re-run episode.
        exact: the re-run's numeric environment is the recorded one (predictions must
            then be identical; the statistical rule applies either way).
        margin: accuracy points claimed minus re-run may reach (statistical rule).
        transductive: the adapter declares transductive inference (no inductive probe).
        aggregation: the protocol's headline fusion (``hpe``).
        oracle: per split, the configuration with the best stored mean (the site's oracle).
        cost: what the judge measured of the worker besides the re-runs.
    """
    verdict = DatasetVerdict(dataset, "exact" if exact else "statistical")
    pairs = [[c.claimed, c.rerun] for c in checks]
    headline = _bound(pairs, all(c.identical for c in checks), AGREEMENT_CONFIDENCE)
    verdict.summary = {
        "hpe_aggregation": aggregation,
        "claimed_on_rerun_episodes": headline.claimed,
        "rerun_accuracy": headline.rerun,
        "difference": headline.difference,
        "difference_bound": _finite(headline.bound),
        "confidence": AGREEMENT_CONFIDENCE,
        "margin": margin,
        "identical_episodes": int(sum(c.identical for c in checks)),
        "prediction_agreement": float(np.mean([c.agreement for c in checks])),
    }
    _agreement(verdict, checks, exact=exact, margin=margin, oracle=oracle or {})
    _probes(verdict, checks, transductive=transductive, margin=margin)
    _cost(verdict, checks, cost or CostFacts())
    return verdict
