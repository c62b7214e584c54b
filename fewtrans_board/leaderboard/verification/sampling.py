"""Which episodes verification re-runs, drawn after the bundle is frozen, and how many.

The seed (:func:`draw_seed`) is unknown to the submitter when the bundle is made; every
dataset's sample, its order and the re-runs' query presentation order derive from it. Every
episode is re-run while the judge's own measure of a re-run projects within the budget, at
least enough to catch a forgery of :data:`FORGED_SHARE` of the episodes with probability
:data:`CATCH_PROBABILITY` (:meth:`SamplePlan.keep_going`; SECURITY.md's table).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fewtrans_board.stats.bounds import detection_probability, forged_episodes, sample_size_for

FORGED_SHARE = 0.05
CATCH_PROBABILITY = 0.99
DEFAULT_BUDGET_S = 1800.0
"""Seconds per dataset within which verification re-runs every episode."""
SESSION_OVERHEAD_S = 0.25
"""Per re-run request: forking a fresh episode process and loading the plugin."""


@dataclass(frozen=True)
class Seed:
    """The verification seed and where it came from (``urandom``, ``secret`` or ``given``)."""

    hex: str
    source: str

    def stream(self, label: str) -> np.random.Generator:
        """An independent generator for one purpose (a dataset's sample, its order, ...)."""
        digest = hashlib.sha256(f"{self.hex}:{label}".encode()).digest()
        return np.random.default_rng(int.from_bytes(digest[:16], "big"))

    def salt(self, label: str) -> str:
        """A secret text for the presentation order of one dataset's re-runs."""
        return hashlib.sha256(f"{self.hex}:presentation:{label}".encode()).hexdigest()


def draw_seed(digest: str, given: str | None = None, secret: bytes | None = None) -> Seed:
    """The seed of a verification, fixed only now that the bundle's ``digest`` is known.

    Args:
        digest: sha256 of the frozen bundle or entry (every file).
        given: a seed copied from an earlier report (reproduces it exactly).
        secret: a secret only the maintainers hold (CI); the seed is its HMAC with ``digest``.
    """
    if given:
        return Seed(given.lower(), "given")
    if secret:
        return Seed(hmac.new(secret, digest.encode(), hashlib.sha256).hexdigest(), "secret")
    return Seed(secrets.token_hex(32), "urandom")


@dataclass(frozen=True)
class SamplePlan:
    """How one dataset is verified.

    Attributes:
        order: episode positions in the order they are re-run (a secret random
            permutation of all of them, or its first ``sample`` with an explicit size).
        minimum: the fewest episodes that meet the catch probability (always re-run).
        estimate_s: the estimated cost of re-running every episode, from the claimed
            seconds (printed before the verification; never used to choose the sample).
        budget_s: the budget for the re-runs.
        explicit: a maintainer chose the sample size (``--sample``): no budget cut.
    """

    order: list[int]
    minimum: int
    estimate_s: float
    budget_s: float
    explicit: bool = False

    def keep_going(self, rerun_seconds: Sequence[float]) -> bool:
        """Whether to re-run the next planned episode, given the re-runs measured so far.

        Args:
            rerun_seconds: the judge's wall-clock seconds of each re-run request so far
                (probes excluded: their cost is spent once, on a few episodes).
        """
        done = len(rerun_seconds)
        if done >= len(self.order):
            return False
        if self.explicit or done < self.minimum:
            return True
        return float(np.mean(rerun_seconds)) * len(self.order) <= self.budget_s


def plan_sample(
    episodes: int,
    claimed_seconds: float,
    rng: np.random.Generator,
    *,
    budget_s: float = DEFAULT_BUDGET_S,
    sample: int | None = None,
    extra_requests: float = 1.0,
) -> SamplePlan:
    """Plan a dataset's re-runs: a secret order, the minimum, and the claimed estimate.

    Args:
        episodes: episodes in the dataset's manifest.
        claimed_seconds: mean claimed fit seconds of one episode (all configurations);
            only for the estimate.
        rng: the dataset's generator (from the secret seed).
        budget_s: seconds within which every episode is re-run (as measured).
        sample: an explicit number of episodes (a maintainer's choice; the report says
            what it catches).
        extra_requests: requests per episode beyond the re-run itself (probes), for the
            estimate.
    """
    order = [int(i) for i in rng.permutation(episodes)]
    minimum = sample_size_for(episodes, FORGED_SHARE, CATCH_PROBABILITY)
    estimate = episodes * (max(claimed_seconds, 0.0) * (1 + extra_requests) + SESSION_OVERHEAD_S)
    if sample is not None:
        size = min(sample, episodes)
        return SamplePlan(order[:size], size, estimate, budget_s, explicit=True)
    return SamplePlan(order, minimum, estimate, budget_s)


def catch_probabilities(episodes: int, rerun: int) -> dict[str, float | int]:
    """What re-running ``rerun`` of ``episodes`` episodes catches (for the report)."""
    forged = forged_episodes(episodes, FORGED_SHARE)
    return {
        "episodes": episodes,
        "rerun_episodes": rerun,
        "forged_share": FORGED_SHARE,
        "forged_episodes": forged,
        "catch_probability": detection_probability(episodes, forged, rerun),
        "catch_one_forged_episode": detection_probability(episodes, 1, rerun),
    }
