"""The one text-width model of every hand-written SVG, and label placement built on it.

Plots (:mod:`~fewtrans_board.figures.charts`, :mod:`~fewtrans_board.figures.accuracy`, the
site's cost, lottery and CLIP-settings figures) and badges size their text with it, so that
every label stays inside its SVG. Pure Python: importable anywhere, nothing heavy.

Text width is estimated, not measured (no font is available when the site is built): a
character is :data:`EM` of the font size wide, narrow characters less, wide and capital
ones more; the estimate is generous for the sans-serif fonts browsers pick for
``system-ui``, so a label estimated inside the frame is drawn inside it.
"""

from __future__ import annotations

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


def longest(labels: Sequence[str], size: float = FONT_PX) -> float:
    """The estimated width of the widest of ``labels`` (0 when there are none)."""
    return max((text_width(label, size) for label in labels), default=0.0)


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
