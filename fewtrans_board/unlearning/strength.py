"""Searching SSD's strength: one knob, bisected in log space until a measured target is met.

**The knob.** SSD dampens element ``i`` by ``beta_i = min(1, lambda F_r / F_f)`` when
``F_f > alpha F_r``. Of its two constants, ``alpha`` (selection) is searched and
``lambda = min(1, alpha)`` follows it:

- ``lambda`` alone cannot reach large losses: with ``alpha`` fixed it only rescales the
  elements ``alpha`` already selected (3.5% of the demo CLIP at alpha 30); even zeroing them
  all leaves the rest of the model, i.e. most of its general knowledge, untouched;
- lowering ``alpha`` selects more elements, the natural "how much general knowledge may be
  touched" control, but with ``lambda = 1`` it stops acting at ``alpha = 1`` (an element with
  ``F_f <= F_r`` gets ``beta = 1``); tying ``lambda = min(1, alpha)`` continues the path below
  1, where every selected element is scaled by ``alpha F_r / F_f``, down to zeroing whatever
  the forget set uses at all (no knowledge left).

Along this path every element's factor only shrinks as ``alpha`` falls (more elements are
selected, each at most as large), so the dampening is monotone in ``alpha``, and at
``alpha >= 1`` the path is exactly SSD with the paper's ``lambda = 1`` (its default,
``alpha = 30``, lies on it). Measured losses are step functions of finitely many test
images, so a target may sit between two neighbouring strengths; the search reports every
point it tried.

**The search** (:func:`search_strength`): evaluate the paper's default; move by factors of
10 in ``alpha`` until the target is bracketed (or a bound of :data:`SEARCH_ALPHA_RANGE` is
hit), then bisect ``log(alpha)`` until a point is accepted or the bracket is narrower than
0.2% in ``alpha``. Bisection, not a grid: evaluations are the cost (zero-shot on every
validation dataset, or probe training) and the response is monotone.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from fewtrans_board.unlearning.sets import ALPHA, LAMBDA, SEARCH_ALPHA_RANGE

MAX_EVALUATIONS = 24
"""At most this many strengths are evaluated by one search."""

STEP = 10.0
"""Factor between strengths while bracketing."""

MIN_BRACKET = 1.002
"""Bisection stops when the bracket's ends differ by less than this factor."""


def lambda_for(alpha: float) -> float:
    """The dampening constant that goes with ``alpha`` on the searched path."""
    return min(LAMBDA, alpha)


@dataclass(frozen=True)
class StrengthPoint:
    """One evaluated strength.

    Attributes:
        alpha: SSD selection weighting.
        lam: SSD dampening constant (``min(1, alpha)``).
        value: the measured quantity (grows with the strength).
        detail: whatever else the measurement reports (JSON-friendly).
    """

    alpha: float
    lam: float
    value: float
    detail: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return {"alpha": self.alpha, "lambda": self.lam, "value": self.value, **self.detail}


@dataclass
class StrengthSearch:
    """Outcome of a search.

    Attributes:
        target: the value sought.
        tolerance: how close counts as reached.
        rule: ``"at-most"`` (the strongest point with ``value <= target``, reached when
            within ``tolerance`` below it) or ``"nearest"`` (the point nearest the target,
            reached when within ``tolerance`` on either side).
        points: every evaluated strength, in evaluation order.
        chosen: the selected point.
        reached: whether ``chosen`` is within the tolerance.
    """

    target: float
    tolerance: float
    rule: str
    points: list[StrengthPoint]
    chosen: StrengthPoint
    reached: bool

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form (the record's ``search`` entry)."""
        return {
            "target": self.target,
            "tolerance": self.tolerance,
            "rule": self.rule,
            "knob": "alpha, with lambda = min(1, alpha)",
            "reached": self.reached,
            "chosen": self.chosen.to_dict(),
            "points": [p.to_dict() for p in self.points],
        }


def _accepted(value: float, target: float, tolerance: float, rule: str) -> bool:
    if rule == "at-most":
        return target - tolerance <= value <= target
    return abs(value - target) <= tolerance


def _choose(points: list[StrengthPoint], target: float, rule: str) -> StrengthPoint:
    if rule == "at-most":
        below = [p for p in points if p.value <= target]
        if below:
            return max(below, key=lambda p: (p.value, p.alpha))
        return max(points, key=lambda p: (-p.value, p.alpha))  # nothing below: the weakest
    return min(points, key=lambda p: (abs(p.value - target), -p.alpha))


def search_strength(
    measure: Callable[[float, float], tuple[float, dict[str, Any]]],
    target: float,
    tolerance: float,
    rule: Literal["at-most", "nearest"] = "at-most",
    start: float = ALPHA,
    bounds: tuple[float, float] = SEARCH_ALPHA_RANGE,
    max_evaluations: int = MAX_EVALUATIONS,
) -> StrengthSearch:
    """Find the SSD strength whose measured value meets ``target``.

    Args:
        measure: ``(alpha, lam) -> (value, detail)``; ``value`` must grow (weakly) as
            ``alpha`` falls (knowledge loss; the negated probe gap).
        target: the value sought.
        tolerance: how close counts as reached (see :class:`StrengthSearch`).
        rule: ``"at-most"`` or ``"nearest"``.
        start: the first ``alpha`` (the paper's 30).
        bounds: the smallest and largest ``alpha`` tried.
        max_evaluations: the evaluation budget.

    Returns:
        Every point tried, the chosen one and whether it meets the tolerance.
    """
    low_alpha, high_alpha = bounds
    points: list[StrengthPoint] = []
    seen: dict[float, StrengthPoint] = {}

    def evaluate(alpha: float) -> StrengthPoint:
        alpha = float(f"{alpha:.6g}")
        if alpha not in seen:
            value, detail = measure(alpha, lambda_for(alpha))
            seen[alpha] = StrengthPoint(alpha, lambda_for(alpha), float(value), detail)
            points.append(seen[alpha])
        return seen[alpha]

    def done(point: StrengthPoint) -> bool:
        return _accepted(point.value, target, tolerance, rule) or len(points) >= max_evaluations

    point = evaluate(min(max(start, low_alpha), high_alpha))
    # weak: value <= target (larger alpha); strong: value > target (smaller alpha)
    weak = point if point.value <= target else None
    strong = point if point.value > target else None
    while not done(point) and (weak is None or strong is None):
        if weak is None:
            if point.alpha >= high_alpha:
                break
            point = evaluate(min(point.alpha * STEP, high_alpha))
        else:
            if point.alpha <= low_alpha:
                break
            point = evaluate(max(point.alpha / STEP, low_alpha))
        if point.value <= target:
            weak = point if weak is None or point.alpha < weak.alpha else weak
        else:
            strong = point if strong is None or point.alpha > strong.alpha else strong
    while (
        not done(point)
        and weak is not None
        and strong is not None
        and weak.alpha / strong.alpha > MIN_BRACKET
    ):
        point = evaluate(math.sqrt(weak.alpha * strong.alpha))
        if point.value <= target:
            weak = point
        else:
            strong = point
    chosen = _choose(points, target, rule)
    return StrengthSearch(
        target, tolerance, rule, points, chosen, _accepted(chosen.value, target, tolerance, rule)
    )
