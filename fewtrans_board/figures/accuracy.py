"""Plot kinds of accuracy on the site: means as dots with CI lines, a histogram, a configuration heatmap.

Every text element is escaped; plots carry a ``<title>`` for screen readers and tooltips.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from markupsafe import Markup, escape

from fewtrans_board.figures.axes import (
    nice_axis,
    svg_close,
    svg_open,
    tick_text,
    x_axis_title,
    y_axis_title,
)
from fewtrans_board.figures.text import FONT_PX, LINE, fit_text, longest, text_width, wrap_text


def ci_dots(
    rows: Sequence[tuple[str, float, float]], *, width: int = 560, title: str = ""
) -> Markup:
    """A dot at each mean and a horizontal line for its 95% CI, one row per label.

    The axis spans what the intervals need (a dot is a position, not a length: nothing
    here is read from zero) and its title says where it starts. Labels are never cut:
    they wrap onto up to three lines in a column of at most 45% of the width, and a label
    that still does not fit ends in ``…`` with the full name as its tooltip.

    Args:
        rows: ``(label, mean, ci95)`` per row, in the order drawn (top to bottom).
        width: SVG width in pixels.
        title: accessible title.
    """
    if not rows:
        return Markup("")
    rows = [(label, mean, ci if np.isfinite(ci) else 0.0) for label, mean, ci in rows]
    column = min(max(longest([label for label, _, _ in rows]) + 16, 60), 0.45 * width)
    wrapped = [wrap_text(label, column - 12) for label, _, _ in rows]
    line = LINE * FONT_PX
    heights = [max(24.0, len(lines) * line + 8) for lines in wrapped]
    top, axis_room = 8.0, 42.0
    height = round(top + sum(heights) + axis_room)
    left, right = column, width - 20.0
    low, high, ticks = _ci_axis(rows)

    def x(value: float) -> float:
        return left + (value - low) / max(high - low, 1e-6) * (right - left)

    parts = [svg_open(width, height, title, "plot ci-plot")]
    bottom = height - axis_room
    step = ticks[1] - ticks[0] if len(ticks) > 1 else 1.0
    for tick in ticks:
        label = tick_text(tick, step)
        at = min(x(tick), width - 2 - text_width(label) / 2)  # inside the frame's right edge
        parts.append(
            f'<line x1="{x(tick):.1f}" x2="{x(tick):.1f}" y1="{top}" y2="{bottom:.1f}" stroke="#eee"/>'
            f'<text x="{at:.1f}" y="{bottom + 14:.1f}" text-anchor="middle" class="tick">{label}</text>'
        )
    y0 = top
    for (label, mean, ci), lines, row_height in zip(rows, wrapped, heights, strict=True):
        parts.append(_ci_row(label, mean, ci, lines, y0 + row_height / 2, x, left))
        y0 += row_height
    start = "0" if low <= 0 else tick_text(low, step)
    axis = f"mean accuracy, % (95% CI); the axis starts at {start}"
    parts.append(x_axis_title(axis, (left + right) / 2, height - 6, width - 8))
    return svg_close(parts)


def _ci_axis(rows: Sequence[tuple[str, float, float]]) -> tuple[float, float, list[float]]:
    """The x axis of :func:`ci_dots`: every interval plus a margin, within 0-100."""
    lows = [m - c for _, m, c in rows]
    highs = [m + c for _, m, c in rows]
    margin = max(0.05 * (max(highs) - min(lows)), 0.5)
    low, high, ticks = nice_axis(max(0.0, min(lows) - margin), min(100.0, max(highs) + margin))
    return low, high, [t for t in ticks if t <= high + 1e-9]


def _ci_row(
    label: str,
    mean: float,
    ci: float,
    lines: list[str],
    middle: float,
    x: Callable[[float], float],
    left: float,
) -> str:
    """One row of :func:`ci_dots`: the (wrapped) name, the interval and the dot."""
    line = LINE * FONT_PX
    first = middle - (len(lines) - 1) * line / 2 + 0.32 * FONT_PX  # baselines, centred
    names = "".join(
        f'<text x="{left - 8}" y="{first + k * line:.1f}" text-anchor="end" class="label">'
        f"{escape(text)}</text>"
        for k, text in enumerate(lines)
    )
    if " ".join(lines) != " ".join(label.split()):  # shortened: the full name as a tooltip
        names = f"<g><title>{escape(label)}</title>{names}</g>"
    lo, hi = x(mean - ci), x(mean + ci)
    return (
        names
        + f'<line x1="{lo:.1f}" x2="{hi:.1f}" y1="{middle:.1f}" y2="{middle:.1f}" stroke="#222" stroke-width="1.5"/>'
        + "".join(
            f'<line x1="{end:.1f}" x2="{end:.1f}" y1="{middle - 4:.1f}" y2="{middle + 4:.1f}" stroke="#222"/>'
            for end in (lo, hi)
        )
        + f'<circle cx="{x(mean):.1f}" cy="{middle:.1f}" r="4" fill="#3366cc">'
        f"<title>{escape(label)}: {mean:.2f} ± {ci:.2f} (95% CI {mean - ci:.2f} to {mean + ci:.2f})</title></circle>"
    )


def histogram(
    values: Sequence[float] | np.ndarray,
    *,
    bins: int = 20,
    width: int = 320,
    height: int = 110,
    title: str = "",
) -> Markup:
    """Distribution of per-episode accuracies (0-100) as a bar histogram."""
    array = np.asarray(values, dtype=float)
    if array.size == 0:
        return Markup("")
    counts, edges = np.histogram(array, bins=bins, range=(0.0, 100.0))
    top = max(int(counts.max()), 1)
    bar = (width - 20) / bins
    parts = [svg_open(width, height, title)]
    for i, count in enumerate(counts):
        h = (height - 30) * count / top
        parts.append(
            f'<rect x="{10 + i * bar:.1f}" y="{height - 20 - h:.1f}" width="{bar - 1:.1f}" height="{h:.1f}" fill="#3366cc">'
            f"<title>{edges[i]:.0f}-{edges[i + 1]:.0f}%: {count} episodes</title></rect>"
        )
    mean_x = 10 + array.mean() / 100 * (width - 20)
    parts += [
        f'<text x="10" y="{height - 5}" class="tick">0%</text>',
        f'<text x="{width - 10}" y="{height - 5}" text-anchor="end" class="tick">100%</text>',
        f'<line x1="{mean_x:.1f}" x2="{mean_x:.1f}" y1="5" y2="{height - 20}" stroke="#dc3912" stroke-dasharray="3,2"/>',
    ]
    return svg_close(parts)


def heatmap(
    matrix: np.ndarray,
    row_labels: Sequence[str],
    col_labels: Sequence[str],
    *,
    row_title: str,
    col_title: str,
    title: str = "",
) -> Markup:
    """Per-configuration mean accuracy on a grid (rows x columns), cells annotated."""
    rows, cols = matrix.shape
    cell_w, cell_h, top = 64, 28, 40
    # The row title is drawn upright in its own 24 px column, left of the row labels.
    left = max(110, 24 + longest(row_labels) + 12)
    width, height = int(left + cols * cell_w + 10), top + rows * cell_h + 30
    middle = top + rows * cell_h / 2
    finite = matrix[np.isfinite(matrix)]
    low, high = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    span = max(high - low, 1e-6)
    parts = [
        svg_open(width, height, title),
        f'<text x="{left + cols * cell_w / 2:.0f}" y="14" text-anchor="middle" class="label">{escape(col_title)}</text>',
        y_axis_title(row_title, middle, max(rows * cell_h, 40)),
    ]
    for j, label in enumerate(col_labels):
        parts.append(
            f'<text x="{left + j * cell_w + cell_w / 2:.0f}" y="{top - 6}" text-anchor="middle" class="tick">{escape(fit_text(label, cell_w - 4))}</text>'
        )
    for i, label in enumerate(row_labels):
        parts.append(
            f'<text x="{left - 6}" y="{top + i * cell_h + 18}" text-anchor="end" class="tick">{escape(label)}</text>'
        )
        for j in range(cols):
            value = matrix[i, j]
            shade = 0.15 + 0.85 * ((value - low) / span if np.isfinite(value) else 0)
            text = f"{value:.1f}" if np.isfinite(value) else "-"
            parts.append(
                f'<rect x="{left + j * cell_w}" y="{top + i * cell_h}" width="{cell_w - 2}" height="{cell_h - 2}" '
                f'fill="#109618" fill-opacity="{shade:.2f}"><title>{escape(label)} / {escape(col_labels[j])}: {text}</title></rect>'
                f'<text x="{left + j * cell_w + cell_w / 2 - 1:.0f}" y="{top + i * cell_h + 18}" text-anchor="middle" class="cell">{text}</text>'
            )
    return svg_close(parts)
