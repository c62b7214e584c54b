"""The held-out centre search: FewTrans's iterative local search (``auto_find.py``).

Start from a full 3-point grid on every HPE axis around the start point (epochs: the
neighbouring rungs of the ladder 1, 2, 5, 10, 15, 20, 30, ..., 100; learning rates: the
neighbours on the 1-2-5 ladder). An axis whose best value sits on the grid's low (high)
edge moves down (up); later rounds evaluate only {next, current} on moving axes, and an axis
stops once the best no longer moves along it. The search ends when every axis has stopped.
The reference decides the 1-2-5 step from the decimal string of the learning rate, which
misfires on exponents ('1e-05' contains a '5'); here the step follows the leading digit.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fewtrans_board.api.adapter import Adapter, AdapterConfig
from fewtrans_board.core.errors import FewtransError
from fewtrans_board.hpe.protocols import hpe_roles

EPOCH_LADDER = (1, 2, 5, 10, 15, 20, 30, 40, 50, 60, 70, 80, 90, 100)
LR_FLOOR = 1e-7
MAX_ROUNDS = 30

Scorer = Callable[[list[AdapterConfig]], list[float]]
"""Mean accuracy of each configuration over the search episodes."""


def snap_lr(value: float) -> float:
    """Nearest value of the 1-2-5 ladder (in log space)."""
    exponent = math.floor(math.log10(value))
    candidates = [m * 10.0**e for e in (exponent - 1, exponent, exponent + 1) for m in (1, 2, 5)]
    best = min(candidates, key=lambda c: abs(math.log(c) - math.log(value)))
    return float(f"{best:.1g}")


def _leading_digit(value: float) -> int:
    return int(f"{value:.1e}"[0])


def lr_up(value: float) -> float:
    """Next rung up the 1-2-5 ladder (x2 from 1 and 5, x2.5 from 2)."""
    factor = 2.5 if _leading_digit(value) == 2 else 2.0
    return float(f"{value * factor:.1g}")


def lr_down(value: float) -> float | None:
    """Next rung down (/2 from 1 and 2, /2.5 from 5), or ``None`` below the floor."""
    factor = 2.5 if _leading_digit(value) == 5 else 2.0
    lower = float(f"{value / factor:.1g}")
    return lower if lower >= LR_FLOOR else None


def snap_epochs(value: int) -> int:
    """Nearest rung of the epoch ladder."""
    return min(EPOCH_LADDER, key=lambda e: (abs(e - value), e))


def epochs_up(value: int) -> int | None:
    """Next rung up, or ``None`` at the top."""
    i = EPOCH_LADDER.index(value)
    return EPOCH_LADDER[i + 1] if i + 1 < len(EPOCH_LADDER) else None


def epochs_down(value: int) -> int | None:
    """Next rung down, or ``None`` at the bottom."""
    i = EPOCH_LADDER.index(value)
    return EPOCH_LADDER[i - 1] if i > 0 else None


@dataclass
class SearchResult:
    """Outcome of a centre search.

    Attributes:
        centre: the final centre configuration values.
        start: the snapped start point.
        rounds: per round, the evaluated grid with accuracies, the best point and the
            axis directions after the round.
        evaluations: number of distinct configurations evaluated.
    """

    centre: dict[str, Any]
    start: dict[str, Any]
    rounds: list[dict[str, Any]] = field(default_factory=list)
    evaluations: int = 0


def centre_search(adapter: type[Adapter], start: AdapterConfig, score: Scorer) -> SearchResult:
    """Run the iterative local search from ``start`` with the given scorer.

    Raises:
        FewtransError: the adapter declares no HPE axis.
    """
    axes = hpe_roles(adapter)
    if not axes:
        raise FewtransError(
            f"adapter {adapter.name!r} declares no HPE axis (hpe='lr'/'epochs'); nothing to search"
        )

    def up(name: str, value: Any) -> Any:
        return lr_up(value) if axes[name] == "lr" else epochs_up(value)

    def down(name: str, value: Any) -> Any:
        return lr_down(value) if axes[name] == "lr" else epochs_down(value)

    current = start.to_dict()
    for name, kind in axes.items():
        current[name] = (
            snap_lr(float(current[name])) if kind == "lr" else snap_epochs(int(current[name]))
        )
    result = SearchResult(centre={}, start=dict(current))
    scores: dict[str, float] = {}
    values = {
        n: [v for v in (down(n, current[n]), current[n], up(n, current[n])) if v is not None]
        for n in axes
    }
    directions: dict[str, str] = {}
    for round_index in range(1, MAX_ROUNDS + 1):
        names = list(values)
        grid = [
            adapter.Config.from_dict({**current, **dict(zip(names, combo, strict=True))})
            for combo in itertools.product(*(values[n] for n in names))
        ]
        new = [c for c in grid if c.digest() not in scores]
        if new:
            for config, accuracy in zip(new, score(new), strict=True):
                scores[config.digest()] = accuracy
        ranked = [(scores[c.digest()], -i, c) for i, c in enumerate(grid)]
        best = max(ranked, key=lambda r: (r[0], r[1]))[2].to_dict()
        if round_index == 1:
            for n in names:
                if len(values[n]) > 1 and best[n] == values[n][0] and down(n, best[n]) is not None:
                    directions[n] = "down"
                elif len(values[n]) > 1 and best[n] == values[n][-1] and up(n, best[n]) is not None:
                    directions[n] = "up"
                else:
                    directions[n] = "still"
        else:
            for n in names:
                moved = best[n] != current[n]
                nxt = (
                    (down if directions[n] == "down" else up)(n, best[n])
                    if directions[n] != "still"
                    else None
                )
                directions[n] = directions[n] if moved and nxt is not None else "still"
        result.rounds.append(
            {
                "round": round_index,
                "grid": [{"config": c.to_dict(), "accuracy": scores[c.digest()]} for c in grid],
                "best": {n: best[n] for n in names},
                "best_accuracy": scores[adapter.Config.from_dict(best).digest()],
                "directions": dict(directions),
            }
        )
        current = best
        if all(d == "still" for d in directions.values()):
            break
        values = {
            n: (
                [down(n, current[n]), current[n]]
                if directions[n] == "down"
                else [current[n], up(n, current[n])]
                if directions[n] == "up"
                else [current[n]]
            )
            for n in names
        }
    result.centre = current
    result.evaluations = len(scores)
    return result
