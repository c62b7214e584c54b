"""Plot kinds of accuracy on the site: means with CIs, a histogram, a configuration heatmap.

Every text element is escaped; plots carry a ``<title>`` for screen readers and tooltips.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from markupsafe import Markup, escape

from fewtrans_board.figures.axes import (
    PALETTE,
    nice_axis,
    svg_close,
    svg_open,
    tick_text,
    y_axis_title,
)
from fewtrans_board.figures.text import fit_text, longest, text_width


def ci_bars(
    rows: Sequence[tuple[str, float, float]], *, width: int = 560, title: str = ""
) -> Markup:
    """Horizontal bars of means with 95% CI whiskers.

    Args:
        rows: ``(label, mean, ci95)`` per bar.
        width: SVG width in pixels.
        title: accessible title.
    """
    if not rows:
        return Markup("")
    height = 26 * len(rows) + 30
    # The label column is as wide as the longest label (at most 45% of the plot; longer
    # labels are shortened to fit it, never cut by the frame).
    left = min(max(longest([label for label, _, _ in rows]) + 16, 60), 0.45 * width)
    right = width - 20
    low, high, ticks = nice_axis(
        max(0.0, min(m - c for _, m, c in rows) - 2), min(100.0, max(m + c for _, m, c in rows) + 2)
    )
    span = max(high - low, 1e-6)

    def x(value: float) -> float:
        return left + (value - low) / span * (right - left)

    parts = [svg_open(width, height, title)]
    for i, (label, mean, ci) in enumerate(rows):
        y = 15 + i * 26
        short = fit_text(label, left - 12)
        parts += [
            f'<text x="{left - 8}" y="{y + 13}" text-anchor="end" class="label">{escape(short)}</text>',
            f'<rect x="{left}" y="{y + 3}" width="{max(x(mean) - left, 0):.1f}" height="14" fill="{PALETTE[i % len(PALETTE)]}" opacity="0.35"/>',
            f'<line x1="{x(mean - ci):.1f}" x2="{x(mean + ci):.1f}" y1="{y + 10}" y2="{y + 10}" stroke="#222" stroke-width="1.5"/>',
            f'<circle cx="{x(mean):.1f}" cy="{y + 10}" r="3.5" fill="#222"><title>{escape(label)}: {mean:.2f} ± {ci:.2f}</title></circle>',
        ]
    axis_y = height - 12
    step = ticks[1] - ticks[0] if len(ticks) > 1 else 1.0
    for tick in ticks:
        label = tick_text(tick, step)
        # The last tick's label may not pass the frame's right edge.
        at = min(x(tick), width - 2 - text_width(label) / 2)
        parts.insert(  # grid lines under the bars
            1,
            f'<line x1="{x(tick):.1f}" x2="{x(tick):.1f}" y1="10" y2="{axis_y - 12}" stroke="#eee"/>',
        )
        parts.append(
            f'<text x="{at:.1f}" y="{axis_y}" text-anchor="middle" class="tick">{label}</text>'
        )
    return svg_close(parts)


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
