"""One-sided bounds on a paired mean difference, and how likely a sample catches a forgery.

Verification uses both: when a re-run cannot be compared bit for bit with the claimed
run (another CPU or library), it bounds *claimed minus re-run* accuracy from above with a
paired one-sided Student-t bound; and it sizes the sample of re-run episodes so that a
bundle whose forged episodes make up a given share of a dataset is caught with a
stated probability (the hypergeometric chance that the sample contains one of them).
scipy.stats is imported where a bound is computed (a worker that never bounds skips it).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np


@dataclass(frozen=True)
class OneSidedBound:
    """A one-sided confidence bound on the mean of paired differences.

    Attributes:
        mean: the mean difference.
        bound: the upper (or lower) confidence bound.
        confidence: its confidence level.
        n: number of pairs.
    """

    mean: float
    bound: float
    confidence: float
    n: int

    def to_dict(self) -> dict[str, float | int]:
        """JSON-friendly form."""
        return asdict(self)


def _bound(
    differences: Sequence[float] | np.ndarray, confidence: float, sign: float
) -> OneSidedBound:
    d = np.asarray(differences, dtype=np.float64)
    if d.ndim != 1 or len(d) == 0:
        raise ValueError(f"need a non-empty 1-d sample of differences, got shape {d.shape}")
    if not 0.5 <= confidence < 1.0:
        raise ValueError(f"confidence must be in [0.5, 1), got {confidence}")
    mean = float(d.mean())
    n = len(d)
    if n == 1:
        return OneSidedBound(mean, sign * math.inf, confidence, n)
    sd = float(d.std(ddof=1))
    from scipy import stats

    margin = float(stats.t.ppf(confidence, n - 1)) * sd / math.sqrt(n)
    return OneSidedBound(mean, mean + sign * margin, confidence, n)


def upper_bound(
    differences: Sequence[float] | np.ndarray, confidence: float = 0.95
) -> OneSidedBound:
    """The one-sided Student-t upper confidence bound of the mean difference.

    ``P(true mean <= bound) = confidence`` under the t model; one pair gives ``inf``.
    """
    return _bound(differences, confidence, 1.0)


def lower_bound(
    differences: Sequence[float] | np.ndarray, confidence: float = 0.95
) -> OneSidedBound:
    """The one-sided Student-t lower confidence bound of the mean difference."""
    return _bound(differences, confidence, -1.0)


def forged_episodes(episodes: int, share: float) -> int:
    """How many episodes a forgery of ``share`` of a dataset alters (at least one)."""
    return max(1, math.ceil(share * episodes - 1e-9))


def detection_probability(episodes: int, forged: int, sampled: int) -> float:
    """Chance that a sample catches a forgery.

    ``sampled`` of ``episodes`` episodes, drawn without replacement, include at least one
    of ``forged`` altered ones: 1 minus the hypergeometric chance of none.
    """
    if forged <= 0:
        return 0.0
    sampled = min(sampled, episodes)
    if sampled > episodes - forged:
        return 1.0
    missed = math.exp(
        math.lgamma(episodes - forged + 1)
        - math.lgamma(episodes - forged - sampled + 1)
        - math.lgamma(episodes + 1)
        + math.lgamma(episodes - sampled + 1)
    )
    return float(min(1.0, max(0.0, 1.0 - missed)))


def sample_size_for(episodes: int, share: float, probability: float) -> int:
    """The fewest episodes to re-run so a forgery of ``share`` of them is caught.

    The catch probability is at least ``probability``.
    """
    forged = forged_episodes(episodes, share)
    for sampled in range(1, episodes + 1):
        if detection_probability(episodes, forged, sampled) >= probability:
            return sampled
    return episodes
