"""What a run cost in time, per 600 tasks (FewTrans Table IX).

FewTrans Table IX reports the total time of evaluating 600 tasks serially on one GPU
(the whole HPE grid of each task) and the peak GPU memory. Every result row records the
seconds its configuration took to fit and predict (a batched ``fit_many`` shares its time
evenly among the configurations it fitted); a task's time is the sum over its
configurations. The total over a run's tasks is scaled to 600 tasks when the run has
another number (``evaluate --limit``, a smaller manifest), and says so. Feature caching,
image decoding and the worker's start-up are outside the rows' seconds; the peak memory
(:func:`~fewtrans_board.results.summary.peak_memory`) covers them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from fewtrans_board.results.load import RunResults
from fewtrans_board.results.row_schema import CONFIG_KIND

PAPER_TASKS = 600
"""FewTrans Table IX's unit: the time of 600 tasks."""


@dataclass(frozen=True)
class RunCost:
    """Time of a run's tasks and its projection to :data:`PAPER_TASKS` tasks.

    Attributes:
        tasks: tasks (episodes) the run evaluated.
        seconds: their total fit and predict seconds (every configuration).
        seconds_per_task: the mean per task.
        tasks_reported: :data:`PAPER_TASKS`.
        seconds_reported: the time of :data:`PAPER_TASKS` tasks: ``seconds`` itself when
            the run has that many, else ``seconds_per_task * 600``.
        scaled: whether ``seconds_reported`` was scaled from another number of tasks.
    """

    tasks: int
    seconds: float
    seconds_per_task: float
    tasks_reported: int
    seconds_reported: float
    scaled: bool

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return asdict(self)


def run_cost(run: RunResults) -> RunCost:
    """The time of ``run``'s tasks (base-split configuration rows) and per 600 tasks.

    Args:
        run: the loaded run.
    """
    mask = (run.column("kind") == CONFIG_KIND) & (run.column("split") == "base")
    episodes = run.column("episode")[mask]
    seconds = run.column("seconds")[mask].astype(np.float64)
    tasks = len(np.unique(episodes))
    total = float(seconds.sum())
    per_task = total / tasks if tasks else float("nan")
    scaled = tasks != PAPER_TASKS
    return RunCost(
        tasks=tasks,
        seconds=total,
        seconds_per_task=per_task,
        tasks_reported=PAPER_TASKS,
        seconds_reported=per_task * PAPER_TASKS if scaled else total,
        scaled=scaled,
    )


def duration(seconds: float) -> str:
    """``seconds`` in the unit that reads best: ``0.0123 s``, ``4.5 min`` or ``13.3 h``."""
    if not np.isfinite(seconds):
        return "n/a"
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds:.3g} s"
