"""The one text-width model of every hand-written SVG (point labels: :mod:`.labels`).

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


def wrap_text(text: str, width: float, max_lines: int = 3, size: float = FONT_PX) -> list[str]:
    """``text`` broken at spaces into at most ``max_lines`` lines, each at most ``width`` px.

    A word wider than a line is shortened with ``…``, and so is the last line when the rest
    does not fit it: ``" ".join(lines)`` differs from the text exactly when something was
    left out, and then the caller should give the full text as a tooltip.
    """
    words, i = text.split(), 0
    lines: list[str] = []
    while i < len(words) and len(lines) < max_lines:
        if len(lines) == max_lines - 1:  # the last line takes the rest, shortened if need be
            lines.append(fit_text(" ".join(words[i:]), width, size))
            break
        line, i = words[i], i + 1
        if text_width(line, size) > width:
            line = fit_text(line, width, size)
        else:
            while i < len(words) and text_width(f"{line} {words[i]}", size) <= width:
                line, i = f"{line} {words[i]}", i + 1
        lines.append(line)
    return lines or [""]
