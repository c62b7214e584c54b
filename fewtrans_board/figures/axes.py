"""Axes of hand-written SVG figures: "nice" 1-2-5 ticks, log ticks and the shared elements.

Every figure opens with :func:`svg_open`, draws its frame, grid and axis titles with the
helpers here (titles shortened by :func:`~fewtrans_board.figures.text.fit_text`) and ends
with :func:`svg_close`; all text is escaped.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from markupsafe import Markup, escape

from fewtrans_board.figures.text import fit_text

PALETTE = ("#3366cc", "#dc3912", "#109618", "#ff9900", "#990099", "#0099c6", "#dd4477", "#66aa00")
"""Series colours, in order."""


def nice_step(span: float, count: int = 5) -> float:
    """The 1-2-5 step (1, 2 or 5 times a power of ten) closest to ``span / (count - 1)``.

    Closeness is measured on a log scale, so ``span / (count - 1) = 1.61`` gives 2.
    """
    raw = abs(span) / max(count - 1, 1)
    if not math.isfinite(raw) or raw <= 0:
        return 1.0
    power = 10.0 ** math.floor(math.log10(raw))
    candidates = [m * power for m in (1, 2, 5, 10)]
    return min(candidates, key=lambda c: abs(math.log(c / raw)))


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Round tick values for an axis over ``[low, high]``: multiples of :func:`nice_step`.

    The first tick is the largest multiple at or below ``low`` (an axis starts at a tick:
    see :func:`nice_axis`), the last the largest at or below ``high``; e.g. 0.493 to 6.95
    gives ``[0, 2, 4, 6]``. A degenerate range gets the ticks of a unit range around it.
    """
    if not (math.isfinite(low) and math.isfinite(high)):
        low, high = 0.0, 1.0
    if high < low:
        low, high = high, low
    if high - low < 1e-12:
        low, high = low - 0.5, high + 0.5
    step = nice_step(high - low, count)
    first = math.floor(low / step + 1e-9)
    ticks = []
    k = first
    while k * step <= high + 1e-9 * step:
        ticks.append(_clean(k * step, step))
        k += 1
    return ticks


def nice_axis(low: float, high: float, count: int = 5) -> tuple[float, float, list[float]]:
    """``(axis low, axis high, ticks)``: the range extended down to the first nice tick."""
    ticks = nice_ticks(low, high, count)
    return min(low, ticks[0]), max(high, ticks[-1]), ticks


def _clean(value: float, step: float) -> float:
    """``value`` rounded to the step's decimals (no ``0.30000000000000004``)."""
    return round(value, max(0, -math.floor(math.log10(step))) + 1) + 0.0


def tick_text(value: float, step: float) -> str:
    """A tick's label with as many decimals as the step needs (``0.5``, ``2``, ``0.05``)."""
    decimals = max(0, -math.floor(math.log10(step) + 1e-9)) if step > 0 else 0
    text = f"{value:.{decimals}f}"
    return "0" if text.strip("-0.") == "" else text


def ticks_with_text(low: float, high: float, count: int = 5) -> list[tuple[float, str]]:
    """:func:`nice_ticks` with their labels."""
    ticks = nice_ticks(low, high, count)
    step = ticks[1] - ticks[0] if len(ticks) > 1 else nice_step(high - low, count)
    return [(t, tick_text(t, step)) for t in ticks]


def log_ticks(low: float, high: float) -> list[tuple[float, str]]:
    """Ticks of a log axis over ``[low, high]`` (both > 0), with their labels.

    Powers of ten, with 2 and 5 between them when the range spans at most two decades;
    labels like ``0.01``, ``20``.
    """
    low, high = max(low, 1e-12), max(high, low * 1.000001)
    first, last = math.floor(math.log10(low)), math.ceil(math.log10(high))
    mantissas = (1, 2, 5) if last - first <= 2 else (1,)
    out = []
    for exponent in range(first, last + 1):
        for m in mantissas:
            value = m * 10.0**exponent
            if low * (1 - 1e-9) <= value <= high * (1 + 1e-9):
                out.append((value, f"{value:.{max(0, -exponent)}f}"))
    if not out:  # less than one step of the mantissas: label both ends
        out = [(low, f"{low:.3g}"), (high, f"{high:.3g}")]
    return out


def svg_open(width: float, height: float, title: str, kind: str = "plot") -> str:
    """The opening ``<svg class="{kind}">`` of a ``width`` x ``height`` figure and its title."""
    return (
        f'<svg class="{kind}" role="img" viewBox="0 0 {width} {height}" width="{width}" '
        f'height="{height}" xmlns="http://www.w3.org/2000/svg"><title>{escape(title)}</title>'
    )


def svg_close(parts: list[str]) -> Markup:
    """The figure of ``parts`` (opened by :func:`svg_open`), closed."""
    return Markup("".join(parts) + "</svg>")


def plot_frame(left: float, top: float, right: float, bottom: float) -> str:
    """The plot area's grey frame."""
    return (
        f'<rect x="{left}" y="{top}" width="{right - left}" height="{bottom - top}" '
        'fill="none" stroke="#999"/>'
    )


def y_grid(
    ticks: Sequence[tuple[float, str]], left: float, right: float, py: Callable[[float], float]
) -> list[str]:
    """A light grid line and a label left of the frame for each ``(value, text)`` tick."""
    return [
        f'<line x1="{left}" x2="{right}" y1="{py(tick):.1f}" y2="{py(tick):.1f}" stroke="#eee"/>'
        f'<text x="{left - 5}" y="{py(tick) + 4:.1f}" text-anchor="end" class="tick">{text}</text>'
        for tick, text in ticks
    ]


def x_axis_title(text: str, centre: float, y: float, room: float) -> str:
    """The x axis title centred at ``centre``, shortened to ``room`` px."""
    return (
        f'<text x="{centre:.0f}" y="{y}" text-anchor="middle" class="label">'
        f"{escape(fit_text(text, room))}</text>"
    )


def y_axis_title(text: str, middle: float, room: float) -> str:
    """The y axis title, upright along the left edge at ``middle``, shortened to ``room`` px."""
    return (
        f'<text x="14" y="{middle:.0f}" text-anchor="middle" class="label" '
        f'transform="rotate(-90 14 {middle:.0f})">{escape(fit_text(text, room))}</text>'
    )
