"""Single-task accuracy spread per shot count (FewTrans Fig. 1, the sampling lottery).

FewTrans Fig. 1 shows, per number of shots, how far the accuracy of *one* sampled task
strays from the mean: a 95% interval of a single task's accuracy, ``mean ± 1.96 s`` with
``s`` the standard deviation over tasks, not the CI of the mean (``1.96 s / sqrt(n)``)
that a results table prints. :func:`single_task_spread` gives both, with the empirical
2.5 and 97.5 percentiles (numpy's linear interpolation) and the range, over the tasks of
one shot count.

Shots per class come from the run's record of its manifest: a fixed N-way K-shot sampler
(``fewtrans-fixed``, ``bscd``) gives every episode K; a k-shot manifest (``clip-kshot``)
gives each episode its own K; a varied sampler (``fewtrans-varied``) mixes shot counts
within a task, so its episodes form one group, ``shots`` ``None`` ("varied").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from fewtrans_board.results.load import RunResults
from fewtrans_board.results.per_shot import shot_seed_pairs
from fewtrans_board.stats.intervals import Z_95, mean_ci


@dataclass(frozen=True)
class Spread:
    """How the accuracy of one task varies over the tasks of one shot count (percent).

    Attributes:
        shots: support items per class (``None``: a varied sampler's mixed shots).
        tasks: number of tasks.
        mean: mean accuracy over the tasks.
        std: standard deviation over the tasks (``ddof``; NaN for one task with ddof 1).
        low: ``mean - 1.96 std``, the single-task interval's lower end.
        high: ``mean + 1.96 std``.
        p2_5: empirical 2.5th percentile of the tasks' accuracies.
        p97_5: empirical 97.5th percentile.
        min: the lowest task accuracy.
        max: the highest.
        ci95: half-width of the 95% CI of the mean (``1.96 std / sqrt(n)``), for contrast.
        ddof: the standard deviation's delta degrees of freedom.
    """

    shots: int | None
    tasks: int
    mean: float
    std: float
    low: float
    high: float
    p2_5: float
    p97_5: float
    min: float
    max: float
    ci95: float
    ddof: int

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return asdict(self)


def single_task_spread(
    accuracy: Sequence[float] | np.ndarray, shots: int | None = None, ddof: int = 1
) -> Spread:
    """The single-task spread of per-task accuracies.

    Args:
        accuracy: one accuracy (percent) per task.
        shots: the tasks' shots per class, if one.
        ddof: delta degrees of freedom of the standard deviation (1: sample, FewTrans).

    Raises:
        ValueError: no task.
    """
    values = np.asarray(accuracy, dtype=np.float64)
    if values.size == 0:
        raise ValueError("a single-task spread needs at least one task")
    std = float(np.std(values, ddof=ddof)) if values.size > ddof else math.nan
    mean = float(values.mean())
    low, high = np.percentile(values, [2.5, 97.5])
    return Spread(
        shots=shots,
        tasks=int(values.size),
        mean=mean,
        std=std,
        low=mean - Z_95 * std,
        high=mean + Z_95 * std,
        p2_5=float(low),
        p97_5=float(high),
        min=float(values.min()),
        max=float(values.max()),
        ci95=mean_ci(values, ddof=ddof).ci95,
        ddof=ddof,
    )


def episode_shots(run: RunResults) -> np.ndarray | None:
    """Shots per class of each of the run's episodes (sorted), or ``None`` for mixed shots.

    Args:
        run: the loaded run.
    """
    episodes, _, _ = run.config_matrix()
    manifest = run.provenance.manifest.to_json()
    sampler = run.provenance.manifest.protocol.get("sampler", {})
    if sampler.get("kind") == "fixed":
        return np.full(len(episodes), int(sampler["shots"]), dtype=np.int64)
    pairs = shot_seed_pairs(manifest)
    if pairs is None:
        return None
    return np.array([pairs[int(e)][0] for e in episodes], dtype=np.int64)


def fixed_shots(run: RunResults) -> int | None:
    """The shots per class every episode of the run has (BSCD's 5, 20, 50), else ``None``."""
    shots = episode_shots(run)
    if shots is None or len(shots) == 0 or len(set(shots.tolist())) != 1:
        return None
    return int(shots[0])


def spread_by_shots(run: RunResults, aggregation: str = "hpe", ddof: int = 1) -> list[Spread]:
    """The single-task spread of a run's tasks per shot count (ascending; varied: one).

    Args:
        run: the loaded run.
        aggregation: whose per-task accuracy (default the run's headline, ``hpe``).
        ddof: delta degrees of freedom of the standard deviation.
    """
    accuracy = run.aggregations()[aggregation]
    shots = episode_shots(run)
    if shots is None:
        return [single_task_spread(accuracy, None, ddof)]
    return [
        single_task_spread(accuracy[shots == k], int(k), ddof) for k in sorted(set(shots.tolist()))
    ]
