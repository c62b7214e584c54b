"""Plot kinds of the analyses: a labelled scatter, per-layer line charts, grouped bars.

Text is escaped; every figure has a ``<title>`` and every point a tooltip.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
from markupsafe import Markup, escape

from fewtrans_board.figures.axes import (
    PALETTE,
    nice_axis,
    svg_close,
    svg_open,
    ticks_with_text,
    x_axis_title,
    y_axis_title,
)
from fewtrans_board.figures.labels import label_markup, marker_attributes, place_labels
from fewtrans_board.figures.text import fit_text, text_width

WIDTH, HEIGHT = 520, 320
LEFT, RIGHT, TOP, BOTTOM = 60, 20, 30, 45


def _scale(
    values: np.ndarray, start: float, end: float
) -> tuple[float, float, Callable[[float], float]]:
    """Padded axis range of ``values`` and its map to pixels.

    ``[0, 1]`` when empty; extended down to a round tick
    (:func:`~fewtrans_board.figures.axes.nice_axis`).
    """
    low = float(values.min()) if values.size else 0.0
    high = float(values.max()) if values.size else 1.0
    if not np.isfinite(low) or not np.isfinite(high):
        low, high = 0.0, 1.0
    if high - low < 1e-12:
        low, high = low - 0.5, high + 0.5
    pad = 0.05 * (high - low)
    low, high, _ = nice_axis(low - pad, high + pad)

    def to_px(value: float) -> float:
        return start + (value - low) / (high - low) * (end - start)

    return low, high, to_px


def _frame(title: str, x_text: str, y_text: str) -> list[str]:
    return [
        svg_open(WIDTH, HEIGHT, title),
        f'<text x="{WIDTH / 2:.0f}" y="16" text-anchor="middle" class="label">{escape(fit_text(title, WIDTH - 16))}</text>',
        f'<line x1="{LEFT}" y1="{HEIGHT - BOTTOM}" x2="{WIDTH - RIGHT}" y2="{HEIGHT - BOTTOM}" stroke="#444"/>',
        f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{HEIGHT - BOTTOM}" stroke="#444"/>',
        x_axis_title(x_text, (LEFT + WIDTH - RIGHT) / 2, HEIGHT - 8, WIDTH - LEFT - RIGHT),
        y_axis_title(y_text, (TOP + HEIGHT - BOTTOM) / 2, HEIGHT - TOP - BOTTOM),
    ]


def _in_range(low: float, high: float) -> list[tuple[float, str]]:
    """The round ticks (1-2-5 steps) that lie on an axis from ``low`` to ``high``."""
    span = high - low
    return [
        (t, text)
        for t, text in ticks_with_text(low, high)
        if low - 1e-9 * span <= t <= high + 1e-9 * span
    ]


def _x_label(x: float, label: str) -> str:
    """An x axis label centred at ``x``, moved so that it stays inside the figure."""
    half = text_width(label) / 2
    x = min(max(x, half + 2), WIDTH - half - 2)
    return f'<text x="{x:.1f}" y="{HEIGHT - BOTTOM + 14}" text-anchor="middle" class="tick">{escape(label)}</text>'


def _legend(k: int, name: str, colour: str) -> str:
    """Series ``k``'s name in its colour, right-aligned in the top right corner."""
    return f'<text x="{WIDTH - RIGHT - 4}" y="{TOP + 14 * (k + 1)}" text-anchor="end" class="tick" fill="{colour}">{escape(fit_text(name, WIDTH - LEFT - RIGHT))}</text>'


def _y_ticks(parts: list[str], low: float, high: float, to_px: Callable[[float], float]) -> None:
    for tick, text in _in_range(low, high):
        y = to_px(tick)
        parts.append(
            f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end" class="tick">{text}</text>'
        )


def scatter(
    points: Sequence[tuple[str, float, float]],
    *,
    x_title: str,
    y_title: str,
    title: str,
    fit_line: bool = True,
) -> Markup:
    """Labelled points ``(label, x, y)`` with an optional least-squares line.

    Args:
        points: one ``(label, x, y)`` per point; non-finite points are skipped.
        x_title: x axis title.
        y_title: y axis title.
        title: figure title (also the accessible title).
        fit_line: draw the least-squares line when there are two distinct x values.
    """
    finite = [(lab, x, y) for lab, x, y in points if np.isfinite(x) and np.isfinite(y)]
    xs = np.array([x for _, x, _ in finite], dtype=float)
    ys = np.array([y for _, _, y in finite], dtype=float)
    parts = _frame(title, x_title, y_title)
    x_low, x_high, px = _scale(xs, LEFT, WIDTH - RIGHT)
    y_low, y_high, py = _scale(ys, HEIGHT - BOTTOM, TOP)
    _y_ticks(parts, y_low, y_high, py)
    for tick, text in _in_range(x_low, x_high):
        parts.append(
            f'<text x="{px(tick):.1f}" y="{HEIGHT - BOTTOM + 14}" text-anchor="middle" class="tick">{text}</text>'
        )
    if fit_line and xs.size >= 2 and np.ptp(xs) > 0:
        slope, intercept = np.polyfit(xs, ys, 1)
        x0, x1 = float(xs.min()), float(xs.max())
        parts.append(
            f'<line x1="{px(x0):.1f}" y1="{py(slope * x0 + intercept):.1f}" x2="{px(x1):.1f}" '
            f'y2="{py(slope * x1 + intercept):.1f}" stroke="#dc3912" stroke-dasharray="4,3"/>'
        )
    for i, (label, x, y) in enumerate(finite):
        parts.append(
            f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="4"{marker_attributes(i)} '
            f'fill="{PALETTE[i % len(PALETTE)]}">'
            f"<title>{escape(label)}: ({x:.4g}, {y:.4g})</title></circle>"
        )
    if len(finite) <= 12:
        # Inside the plot area, each label by its own point (see figures/labels.py).
        frame = (float(LEFT + 2), float(TOP), float(WIDTH - RIGHT), float(HEIGHT - BOTTOM - 2))
        centres = [(px(x), py(y)) for _, x, y in finite]
        labels = [fit_text(label, 200) for label, _, _ in finite]
        for i, placement in enumerate(place_labels(centres, labels, frame)):
            parts.append(label_markup(i, placement, full=finite[i][0]))
    return svg_close(parts)


def layer_lines(
    series: Mapping[str, Sequence[float]],
    *,
    x_labels: Sequence[str],
    x_title: str,
    y_title: str,
    title: str,
) -> Markup:
    """One polyline per series over layers (e.g. ΔW norm or CKA per block).

    Args:
        series: ``name -> value per layer`` (all the same length as ``x_labels``).
        x_labels: the layer names.
        x_title: x axis title.
        y_title: y axis title.
        title: figure title (also the accessible title).
    """
    values = np.array([v for vs in series.values() for v in vs], dtype=float)
    values = values[np.isfinite(values)]
    parts = _frame(title, x_title, y_title)
    count = max(len(x_labels), 1)

    def px(i: int) -> float:
        return LEFT + (i + 0.5) / count * (WIDTH - RIGHT - LEFT)

    y_low, y_high, py = _scale(values, HEIGHT - BOTTOM, TOP)
    _y_ticks(parts, y_low, y_high, py)
    parts += [_x_label(px(i), label) for i, label in enumerate(x_labels)]
    for k, (name, ys) in enumerate(series.items()):
        colour = PALETTE[k % len(PALETTE)]
        coords = [(px(i), py(y)) for i, y in enumerate(ys) if np.isfinite(y)]
        if len(coords) > 1:
            path = " ".join(f"{x:.1f},{y:.1f}" for x, y in coords)
            parts.append(
                f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>'
            )
        for i, y in enumerate(ys):
            if np.isfinite(y):
                parts.append(
                    f'<circle cx="{px(i):.1f}" cy="{py(y):.1f}" r="3" fill="{colour}">'
                    f"<title>{escape(name)}, {escape(x_labels[i])}: {y:.4g}</title></circle>"
                )
        parts.append(_legend(k, name, colour))
    return svg_close(parts)


def grouped_bars(
    series: Mapping[str, Sequence[float | None]],
    *,
    categories: Sequence[str],
    x_title: str,
    y_title: str,
    title: str,
    tick_labels: Sequence[str] | None = None,
    max_ticks: int = 16,
) -> Markup:
    """One group of bars per category, one bar (colour) per series, from zero.

    Args:
        series: ``name -> value per category`` (missing or non-finite values draw no bar;
            a shorter list leaves the last categories empty).
        categories: the category names (tooltips, and the axis when ``tick_labels`` is None).
        x_title: x axis title.
        y_title: y axis title.
        title: figure title (also the accessible title).
        tick_labels: shorter axis labels, one per category (e.g. layer numbers).
        max_ticks: at most this many axis labels (every k-th is shown when there are more).
    """
    values = np.array(
        [v for vs in series.values() for v in vs if v is not None], dtype=float
    ).reshape(-1)
    values = values[np.isfinite(values)]
    parts = _frame(title, x_title, y_title)
    count = max(len(categories), 1)
    slot = (WIDTH - RIGHT - LEFT) / count
    width = 0.8 * slot / max(len(series), 1)
    high = float(values.max()) if values.size else 1.0
    low = min(0.0, float(values.min())) if values.size else 0.0
    if high - low < 1e-12:
        high = low + 1.0
    high += 0.05 * (high - low)

    def py(value: float) -> float:
        return HEIGHT - BOTTOM + (value - low) / (high - low) * (TOP - (HEIGHT - BOTTOM))

    _y_ticks(parts, low, high, py)
    labels = list(tick_labels) if tick_labels is not None else list(categories)
    step = max(1, -(-len(labels) // max_ticks))
    for i, label in enumerate(labels):
        if i % step == 0:
            parts.append(_x_label(LEFT + (i + 0.5) * slot, label))
    for k, (name, ys) in enumerate(series.items()):
        colour = PALETTE[k % len(PALETTE)]
        for i, y in enumerate(ys[: len(categories)]):
            if y is None or not np.isfinite(y):
                continue
            x = LEFT + i * slot + 0.1 * slot + k * width
            top, bottom = py(max(float(y), 0.0)), py(min(float(y), 0.0))
            parts.append(
                f'<rect x="{x:.1f}" y="{top:.1f}" width="{width:.1f}" '
                f'height="{max(bottom - top, 0.0):.1f}" fill="{colour}">'
                f"<title>{escape(name)}, {escape(categories[i])}: {float(y):.4g}</title></rect>"
            )
        parts.append(_legend(k, name, colour))
    return svg_close(parts)
