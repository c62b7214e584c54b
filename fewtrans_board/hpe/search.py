"""The held-out centre search: FewTrans's iterative local search (``auto_find.py``).

Start from a full 3-point grid on every HPE axis around the start point (the neighbouring
rungs of :data:`EPOCH_LADDER`, or of the 1-2-5 ladder of learning rates). An axis whose best
value sits on the grid's low (high) edge moves down (up); later rounds evaluate only {next,
current} on moving axes; an axis stops once its best no longer moves, and the search when all do.
The reference decides the 1-2-5 step from the decimal string of the learning rate, which
misfires on exponents ('1e-05' contains a '5'); here the step follows the leading digit.

Options off the HPE axes (``hpe search --grid NAME=v1,v2``) are searched as a cross product
with the axes: every round scores each point of the round's axis grid with every listed
value of every such option, and the best point fixes them too (they do not move; the axes
move as above). The centre holds the chosen values.
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
        options: the values searched of each option off the HPE axes (``--grid``).
    """

    centre: dict[str, Any]
    start: dict[str, Any]
    rounds: list[dict[str, Any]] = field(default_factory=list)
    evaluations: int = 0
    options: dict[str, list[Any]] = field(default_factory=dict)


Directions = dict[str, str]
"""``axis -> "up" | "down" | "still"``."""


@dataclass(frozen=True)
class _Axes:
    """The searched axes (``name -> "lr" | "epochs"``) and their ladders."""

    roles: dict[str, str]

    def snap(self, name: str, value: Any) -> Any:
        """The nearest rung of the axis's ladder."""
        return snap_lr(float(value)) if self.roles[name] == "lr" else snap_epochs(int(value))

    def up(self, name: str, value: Any) -> Any:
        """The next rung up (``None`` at the top)."""
        return lr_up(value) if self.roles[name] == "lr" else epochs_up(value)

    def down(self, name: str, value: Any) -> Any:
        """The next rung down (``None`` at the bottom)."""
        return lr_down(value) if self.roles[name] == "lr" else epochs_down(value)

    def around(self, current: dict[str, Any]) -> dict[str, list[Any]]:
        """The first round's values: each axis's rung below, the current one, the one above."""
        return {
            n: [
                v
                for v in (self.down(n, current[n]), current[n], self.up(n, current[n]))
                if v is not None
            ]
            for n in self.roles
        }

    def first_directions(self, values: dict[str, list[Any]], best: dict[str, Any]) -> Directions:
        """After the full grid: an axis whose best sits on an edge moves past it."""
        directions = {}
        for n, tried in values.items():
            if len(tried) > 1 and best[n] == tried[0] and self.down(n, best[n]) is not None:
                directions[n] = "down"
            elif len(tried) > 1 and best[n] == tried[-1] and self.up(n, best[n]) is not None:
                directions[n] = "up"
            else:
                directions[n] = "still"
        return directions

    def next_directions(
        self, directions: Directions, current: dict[str, Any], best: dict[str, Any]
    ) -> Directions:
        """An axis keeps moving while its best moved and a next rung exists; else it stops."""
        moved = {}
        for n, direction in directions.items():
            step = self.down if direction == "down" else self.up
            nxt = step(n, best[n]) if direction != "still" else None
            moved[n] = direction if best[n] != current[n] and nxt is not None else "still"
        return moved

    def next_values(self, directions: Directions, current: dict[str, Any]) -> dict[str, list[Any]]:
        """A later round's values: {next, current} on a moving axis, the current one else."""
        values = {n: [current[n]] for n in directions}
        for n, d in directions.items():
            if d == "down":
                values[n].insert(0, self.down(n, current[n]))
            elif d == "up":
                values[n].append(self.up(n, current[n]))
        return values


def grid_options(
    adapter: type[Adapter], start: AdapterConfig, options: dict[str, list[Any]]
) -> dict[str, list[Any]]:
    """Check and type the values of options off the HPE axes to search (``--grid``).

    Raises:
        FewtransError: an option that is an HPE axis, not an option of the adapter, has
            no value, repeats a value, or a value its ``Config`` refuses.
    """
    roles = hpe_roles(adapter)
    fields = start.to_dict()
    typed: dict[str, list[Any]] = {}
    for name, values in options.items():
        if name in roles:
            raise FewtransError(
                f"--grid {name}: {name} is an HPE axis ({roles[name]}); the search moves it "
                "already (give a start point with --config)"
            )
        if name not in fields:
            raise FewtransError(
                f"--grid {name}: adapter {adapter.name!r} has no option {name!r}; its "
                f"options: {', '.join(fields)}"
            )
        checked = [adapter.Config.from_dict({**fields, name: v}).to_dict()[name] for v in values]
        if not checked or len({repr(v) for v in checked}) != len(checked):
            raise FewtransError(f"--grid {name}: give distinct values, e.g. {name}=0.1,0.5")
        typed[name] = checked
    return typed


def centre_search(
    adapter: type[Adapter],
    start: AdapterConfig,
    score: Scorer,
    max_rounds: int = MAX_ROUNDS,
    options: dict[str, list[Any]] | None = None,
) -> SearchResult:
    """Run the iterative local search from ``start`` with the given scorer.

    ``max_rounds`` caps the rounds (the search's log then ends before it settled: its last
    round's directions are not all ``still``). ``options`` lists values of options off the
    HPE axes, searched as a cross product with every round's grid (:func:`grid_options`).

    Raises:
        FewtransError: the adapter declares no HPE axis, or a bad ``options`` entry.
    """
    axes = _Axes(hpe_roles(adapter))
    if not axes.roles:
        raise FewtransError(
            f"adapter {adapter.name!r} declares no HPE axis (hpe='lr'/'epochs'); nothing to search"
        )
    extra = grid_options(adapter, start, options or {})
    current = start.to_dict()
    current.update({n: axes.snap(n, current[n]) for n in axes.roles})
    result = SearchResult(centre={}, start=dict(current), options=extra)
    scores: dict[str, float] = {}
    moving = axes.around(current)
    directions: Directions = {}
    for round_index in range(1, max_rounds + 1):
        values = {**moving, **extra}
        grid = [
            adapter.Config.from_dict({**current, **dict(zip(values, combo, strict=True))})
            for combo in itertools.product(*values.values())
        ]
        new = [c for c in grid if c.digest() not in scores]
        if new:
            scores.update(zip([c.digest() for c in new], score(new), strict=True))
        ranked = [(scores[c.digest()], -i, c) for i, c in enumerate(grid)]
        best = max(ranked, key=lambda r: (r[0], r[1]))[2].to_dict()
        directions = (
            axes.first_directions(moving, best)
            if round_index == 1
            else axes.next_directions(directions, current, best)
        )
        result.rounds.append(
            {
                "round": round_index,
                "grid": [{"config": c.to_dict(), "accuracy": scores[c.digest()]} for c in grid],
                "best": {n: best[n] for n in values},
                "best_accuracy": scores[adapter.Config.from_dict(best).digest()],
                "directions": dict(directions),
            }
        )
        current = best
        if all(d == "still" for d in directions.values()):
            break
        moving = axes.next_values(directions, current)
    result.centre = current
    result.evaluations = len(scores)
    return result
