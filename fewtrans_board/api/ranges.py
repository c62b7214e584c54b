"""Valid ranges of numeric hyperparameters.

An adapter declares a range next to each hyperparameter (``hparam(..., min=1)``,
``hparam(..., above=0, below=1)``); the HPE role adds its own (a learning rate is above 0,
an epoch count at least 1). Building an ``AdapterConfig`` (constructor, ``replace``,
``from_dict``) refuses values outside the range for built-in and third-party adapters
alike, and ``adapters list --options`` shows it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Range:
    """An interval of real numbers; ``None`` ends are unbounded.

    Attributes:
        low: lower end.
        low_open: whether ``low`` itself is excluded.
        high: upper end.
        high_open: whether ``high`` itself is excluded.
    """

    low: float | None = None
    low_open: bool = False
    high: float | None = None
    high_open: bool = False

    @classmethod
    def of(cls, bounds: Mapping[str, Any]) -> Range:
        """The range of checked ``{min|above|max|below: number}`` bounds (see :func:`bound_problem`)."""
        low_key = "above" if bounds.get("above") is not None else "min"
        high_key = "below" if bounds.get("below") is not None else "max"
        low, high = bounds.get(low_key), bounds.get(high_key)
        return cls(
            None if low is None else float(low),
            low_key == "above" and low is not None,
            None if high is None else float(high),
            high_key == "below" and high is not None,
        )

    def intersect(self, other: Range) -> Range:
        """The stricter end on each side."""
        low, low_open = _stricter(
            (self.low, self.low_open), (other.low, other.low_open), upper=False
        )
        high, high_open = _stricter(
            (self.high, self.high_open), (other.high, other.high_open), upper=True
        )
        return Range(low, low_open, high, high_open)

    @property
    def bounded(self) -> bool:
        """Whether either end is set."""
        return self.low is not None or self.high is not None

    def contains(self, value: float) -> bool:
        """Whether ``value`` lies in the range."""
        if self.low is not None and (value < self.low or (self.low_open and value == self.low)):
            return False
        return self.high is None or not (
            value > self.high or (self.high_open and value == self.high)
        )

    def is_empty(self) -> bool:
        """Whether no number lies in the range."""
        if self.low is None or self.high is None:
            return False
        return self.low > self.high or (self.low == self.high and (self.low_open or self.high_open))

    def text(self) -> str:
        """``"> 0"``, ``">= 1"``, ``"<= 5"``, ``"in [0, 1)"``, or ``""`` when unbounded."""
        if self.low is not None and self.high is not None:
            return (
                f"in {'(' if self.low_open else '['}{_number(self.low)}, "
                f"{_number(self.high)}{')' if self.high_open else ']'}"
            )
        if self.low is not None:
            return f"{'>' if self.low_open else '>='} {_number(self.low)}"
        if self.high is not None:
            return f"{'<' if self.high_open else '<='} {_number(self.high)}"
        return ""

    def to_dict(self) -> dict[str, float]:
        """The set ends as ``{min|above: low, max|below: high}``."""
        out: dict[str, float] = {}
        if self.low is not None:
            out["above" if self.low_open else "min"] = self.low
        if self.high is not None:
            out["below" if self.high_open else "max"] = self.high
        return out


ROLE_RANGES: dict[str, Range] = {"lr": Range(low=0.0, low_open=True), "epochs": Range(low=1.0)}
"""What an HPE role implies on top of the declared range."""


def bound_problem(bounds: Mapping[str, Any], type_name: str) -> str | None:
    """Why declared bounds are unusable, or ``None`` when they are fine.

    Args:
        bounds: the ``hparam`` bound arguments that were given (values may be ``None``).
        type_name: the field's type (``"int"``, ``"float"``, ...).
    """
    given = {k: v for k, v in bounds.items() if v is not None}
    if not given:
        return None
    if type_name not in ("int", "float"):
        return f"a range ({', '.join(given)}) needs type int or float, not {type_name}"
    for key, value in given.items():
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
        ):
            return f"bound {key}={value!r} must be a finite number"
    if "min" in given and "above" in given:
        return "give min (inclusive) or above (exclusive), not both"
    if "max" in given and "below" in given:
        return "give max (inclusive) or below (exclusive), not both"
    if Range.of(given).is_empty():
        return f"range {Range.of(given).text()} holds no value"
    return None


def out_of_range(value: Any, valid: Range) -> str | None:
    """Why a numeric ``value`` is refused, or ``None`` when it is valid."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"{value!r} is not a finite number"
    if valid.bounded and not valid.contains(float(value)):
        return f"{value!r} is outside the valid range ({valid.text()})"
    return None


def _stricter(
    a: tuple[float | None, bool], b: tuple[float | None, bool], *, upper: bool
) -> tuple[float | None, bool]:
    if a[0] is None:
        return b
    if b[0] is None or a[0] == b[0]:
        return (a[0], a[1] or (b[0] is not None and b[1]))
    tighter = min if upper else max
    return a if tighter(a[0], b[0]) == a[0] else b


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"
