"""What every hand-written SVG figure shares: text extents, "nice" ticks and label placement.

The site's plots (``website/plots.py``, ``website/clip_settings.py``, ``website/cost.py``,
``website/lottery.py``) and the analysis figures (``analysis/plots.py``) draw their axes and
labels with these helpers, so that every tick is a round number and every label stays
inside its SVG. Pure Python: importable anywhere, nothing heavy.

Text width is estimated, not measured (no font is available when the site is built): a
character is :data:`EM` of the font size wide, narrow characters less, wide and capital
ones more; the estimate is generous for the sans-serif fonts browsers pick for
``system-ui``, so a label estimated inside the frame is drawn inside it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

FONT_PX = 11.0
"""Font size of plot text on the site (``svg.plot text`` in ``site/static``'s CSS)."""
EM = 0.62
"""Width of an ordinary character, in font sizes."""
_NARROW = set("il.,:;|!'`ijtfr()[] ")
_WIDE = set("mwMW@%")
LINE = 1.3
"""Line height, in font sizes."""


def char_width(char: str, size: float = FONT_PX) -> float:
    """Estimated width of one character at ``size`` px (see the module's rule)."""
    if char in _NARROW:
        return 0.36 * size
    if char in _WIDE:
        return 0.95 * size
    if char.isupper() or not char.isascii():
        return 0.75 * size
    return EM * size


def text_width(text: str, size: float = FONT_PX) -> float:
    """Estimated width of ``text`` at ``size`` px (an upper bound for common sans fonts)."""
    return sum(char_width(c, size) for c in text)


def fit_text(text: str, width: float, size: float = FONT_PX) -> str:
    """``text``, or its longest prefix plus ``…`` that is at most ``width`` px wide."""
    if text_width(text, size) <= width:
        return text
    out = ""
    for char in text:
        if text_width(out + char + "…", size) > width:
            break
        out += char
    return out.rstrip() + "…" if out else "…"


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


Box = tuple[float, float, float, float]
"""``(x from, y from, x to, y to)`` of a label's estimated extent (y grows downwards)."""


def text_box(x: float, y: float, text: str, anchor: str = "start", size: float = FONT_PX) -> Box:
    """The estimated extent of ``<text x y text-anchor>`` (``y`` is the baseline)."""
    width = text_width(text, size)
    left = {"start": x, "middle": x - width / 2, "end": x - width}[anchor]
    # A browser's text box is the font's ascent + descent (about 1.2 sizes for sans fonts).
    return (left, y - 0.95 * size, left + width, y + 0.3 * size)


def _overlaps(a: Box, b: Box) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def place_label(
    x: float,
    y: float,
    text: str,
    frame: Box,
    placed: list[Box],
    *,
    size: float = FONT_PX,
    gap: float = 6.0,
) -> tuple[float, float, str, str]:
    """Where to write the label of the point ``(x, y)`` so it stays inside ``frame``.

    The label goes right of the point, or left of it where the right side has no room (the
    side with more room otherwise, shortened to fit it); it moves a line down (or up, at the
    frame's bottom) while it would overprint a label already in ``placed``, to which its box
    is added.

    Returns:
        ``(x, y, text-anchor, text)``: ``text`` shortened with ``…`` if it had to be.
    """
    x0, y0, x1, y1 = frame
    right_room, left_room = x1 - (x + gap), (x - gap) - x0
    width = text_width(text, size)
    if width <= right_room:
        tx, anchor = x + gap, "start"
    elif width <= left_room:
        tx, anchor = x - gap, "end"
    elif right_room >= left_room:
        tx, anchor, text = x + gap, "start", fit_text(text, right_room, size)
    else:
        tx, anchor, text = x - gap, "end", fit_text(text, left_room, size)
    line = LINE * size
    ty = min(max(y + 0.3 * size, y0 + 0.8 * size), y1 - 0.25 * size)
    box = text_box(tx, ty, text, anchor, size)
    step = line
    for _ in range(200):
        if not any(_overlaps(box, other) for other in placed):
            break
        candidate = ty + step
        if candidate > y1 - 0.25 * size:  # no room below: look above instead
            step = -line
            candidate = ty + step
        if candidate < y0 + 0.8 * size:
            break
        ty = candidate
        box = text_box(tx, ty, text, anchor, size)
    placed.append(box)
    return tx, ty, anchor, text


def longest(labels: Sequence[str], size: float = FONT_PX) -> float:
    """The estimated width of the widest of ``labels`` (0 when there are none)."""
    return max((text_width(label, size) for label in labels), default=0.0)
