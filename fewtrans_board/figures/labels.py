"""Point labels of scatter plots: each label next to its own point, or joined to it by a line.

:func:`place_labels` first gives every label that can have one a position touching its
marker (right, the diagonals, left, above, below); the others then take the nearest
position further out (16 directions, ring by ring). A position is free when its (estimated)
text box stays inside the frame and clears every marker, every label already placed and
every leader line already drawn, and its own leader line crosses no marker or label. A label
that did not get a touching position is *moved*, and only a moved label gets a leader line,
from the edge of its marker to the nearest point of its box. When nothing is free (a crowded
plot), the position that clashes least is taken (a line crossing rather than text over
text) and the placement says so. Greedy placement depends on the order, so a few fixed
orders are tried and the layout with the fewest clashes, then moves, wins: deterministic.

:func:`label_markup` writes a placement as SVG: the label carries ``class="point-label"``
and ``data-point``, as its marker should (see :func:`marker_attributes`), so that a browser
test can measure each label's distance to its own point. Pure Python.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from markupsafe import escape

from fewtrans_board.figures.text import FONT_PX, LINE, Box, fit_text, text_width

RINGS = 6
"""Rings of positions tried beyond the touching ones."""
DIRECTIONS = 16
"""Directions tried on each outer ring."""
TOUCHING = 8
"""The first candidates of every label touch its marker (:func:`_candidates`)."""
TOUCH_SLACK = 0.5
"""A label whose box is farther than marker radius + gap + this from its point is moved."""


@dataclass(frozen=True)
class Placement:
    """Where one point's label goes.

    Attributes:
        x: the text's ``x`` (see ``anchor``).
        y: the text's baseline.
        anchor: ``start``, ``middle`` or ``end`` (the side of the box ``x`` is on).
        text: the label, shortened with ``…`` when it was wider than the frame.
        box: the estimated text box ``(x0, y0, x1, y1)``.
        distance: from the point to the nearest point of ``box``.
        leader: ``(x1, y1, x2, y2)`` from the marker's edge to the box, or ``None`` when the
            label touches its marker (exactly when it was not moved).
        overlaps: whether no free position existed and the label overprints something.
    """

    x: float
    y: float
    anchor: str
    text: str
    box: Box
    distance: float
    leader: tuple[float, float, float, float] | None
    overlaps: bool = False

    @property
    def moved(self) -> bool:
        """Whether the label sits away from its marker (and so has a leader line)."""
        return self.leader is not None


def box_distance(x: float, y: float, box: Box) -> float:
    """Euclidean distance from ``(x, y)`` to the nearest point of ``box`` (0 inside it)."""
    dx = max(box[0] - x, 0.0, x - box[2])
    dy = max(box[1] - y, 0.0, y - box[3])
    return math.hypot(dx, dy)


def boxes_overlap(a: Box, b: Box, pad: float = 0.0) -> bool:
    """Whether two boxes overlap once each is grown by ``pad`` on every side."""
    return (
        a[0] - pad < b[2] + pad
        and b[0] - pad < a[2] + pad
        and a[1] - pad < b[3] + pad
        and b[1] - pad < a[3] + pad
    )


def segment_hits_box(segment: tuple[float, float, float, float], box: Box) -> bool:
    """Whether the segment ``(x1, y1, x2, y2)`` passes through ``box`` (Liang-Barsky clip)."""
    x1, y1, x2, y2 = segment
    dx, dy = x2 - x1, y2 - y1
    low, high = 0.0, 1.0
    for p, q in ((-dx, x1 - box[0]), (dx, box[2] - x1), (-dy, y1 - box[1]), (dy, box[3] - y1)):
        if abs(p) < 1e-12:
            if q < 0:
                return False
            continue
        t = q / p
        if p < 0:
            low = max(low, t)
        else:
            high = min(high, t)
        if low > high:
            return False
    return True


def _inside(box: Box, frame: Box) -> bool:
    return (
        box[0] >= frame[0] - 1e-9
        and box[1] >= frame[1] - 1e-9
        and box[2] <= frame[2] + 1e-9
        and box[3] <= frame[3] + 1e-9
    )


def _overlap_area(a: Box, b: Box) -> float:
    return max(0.0, min(a[2], b[2]) - max(a[0], b[0])) * max(0.0, min(a[3], b[3]) - max(a[1], b[1]))


def _candidates(
    px: float, py: float, width: float, height: float, reach: float, step: float
) -> list[tuple[float, float]]:
    """Top-left corners of the boxes to try, touching ones first, then ring by ring."""
    half = reach / math.sqrt(2.0)
    touching = [
        (px + reach, py - height / 2),  # right
        (px + half, py - half - height),  # upper right
        (px + half, py + half),  # lower right
        (px - reach - width, py - height / 2),  # left
        (px - half - width, py - half - height),  # upper left
        (px - half - width, py + half),  # lower left
        (px - width / 2, py - reach - height),  # above
        (px - width / 2, py + reach),  # below
    ]
    out = list(touching)
    for ring in range(1, RINGS + 1):
        distance = reach + ring * step
        for k in range(DIRECTIONS):
            angle = 2 * math.pi * k / DIRECTIONS
            ux, uy = math.cos(angle), math.sin(angle)
            # Push the box's centre out until its near side is ``distance`` from the point.
            extent = width / 2 * abs(ux) + height / 2 * abs(uy)
            cx, cy = px + (distance + extent) * ux, py + (distance + extent) * uy
            out.append((cx - width / 2, cy - height / 2))
    return out


def _leader(px: float, py: float, radius: float, box: Box) -> tuple[float, float, float, float]:
    """The line from the marker's edge toward the nearest point of ``box``, ending on it."""
    nx, ny = min(max(px, box[0]), box[2]), min(max(py, box[1]), box[3])
    length = math.hypot(nx - px, ny - py)
    ux, uy = (nx - px) / length, (ny - py) / length
    return (px + radius * ux, py + radius * uy, nx, ny)


@dataclass
class _Layout:
    """What the labels placed so far occupy, and how much a candidate box would clash."""

    frame: Box
    markers: list[Box]
    radius: float
    reach: float
    taken: list[Box]
    leaders: list[tuple[float, float, float, float]]

    def clash(self, i: int, point: tuple[float, float], box: Box) -> float:
        """0 for a free box; else the area it overprints plus one per line crossing."""
        blocked = [m for j, m in enumerate(self.markers) if j != i] + self.taken
        clash = sum(_overlap_area(box, b) for b in blocked if boxes_overlap(box, b, 1.0))
        clash += sum(1.0 for seg in self.leaders if segment_hits_box(seg, box))
        if box_distance(*point, box) > self.reach + TOUCH_SLACK:  # moved: its leader too
            line = _leader(*point, self.radius, box)
            clash += sum(1.0 for b in blocked if segment_hits_box(line, b))
        return clash

    def search(
        self, i: int, point: tuple[float, float], boxes: Sequence[Box]
    ) -> tuple[Box | None, Box | None]:
        """``(the first free box, the least clashing one)`` of ``boxes`` inside the frame."""
        best: tuple[float, Box] | None = None
        for box in boxes:
            if not _inside(box, self.frame):
                continue
            clash = self.clash(i, point, box)
            if clash == 0:
                return box, box
            if best is None or clash < best[0]:
                best = (clash, box)
        return None, best[1] if best is not None else None

    def take(self, point: tuple[float, float], box: Box) -> None:
        self.taken.append(box)
        if box_distance(*point, box) > self.reach + TOUCH_SLACK:
            self.leaders.append(_leader(*point, self.radius, box))


def place_labels(
    points: Sequence[tuple[float, float]],
    texts: Sequence[str],
    frame: Box,
    *,
    size: float = FONT_PX,
    radius: float = 4.0,
    gap: float = 3.0,
    obstacles: Sequence[Box] = (),
    max_share: float = 0.45,
) -> list[Placement]:
    """Place one label per point, next to it where there is room (see the module).

    Every label that can touch its marker does (first pass, in order); the others then take
    the nearest free position further out (second pass), or overprint least.

    Args:
        points: marker centres in SVG units (y grows downwards).
        texts: one label per point.
        frame: the box every label must stay inside.
        size: font size in px.
        radius: marker radius; markers are avoided by every label.
        gap: space between a touching label and its marker's edge.
        obstacles: other boxes labels must not cover (a legend).
        max_share: a label wider than this share of the frame is shortened with ``…``
            (its full text is the ``<title>``), so two long labels near each other fit.

    Returns:
        One :class:`Placement` per point, in order.

    Raises:
        ValueError: ``points`` and ``texts`` differ in length.
    """
    if len(points) != len(texts):
        raise ValueError(f"place_labels: {len(points)} points but {len(texts)} labels")
    reach = radius + gap
    markers = [(x - radius - 1, y - radius - 1, x + radius + 1, y + radius + 1) for x, y in points]
    widest = max(max_share * (frame[2] - frame[0]) - 2, 8.0)
    shown = [fit_text(label, widest, size) for label in texts]
    boxes = []
    for (px, py), text in zip(points, shown, strict=True):
        width, height = text_width(text, size), 1.25 * size
        corners = _candidates(px, py, width, height, reach, LINE * size)
        boxes.append([(x0, y0, x0 + width, y0 + height) for x0, y0 in corners])

    def attempt(order: Sequence[int]) -> list[tuple[Box, bool]]:
        layout = _Layout(frame, markers, radius, reach, list(obstacles), [])
        return _two_passes(layout, points, boxes, order)

    def score(result: list[tuple[Box, bool]]) -> tuple[int, int, float]:
        distances = [
            box_distance(*point, box) for point, (box, _) in zip(points, result, strict=True)
        ]
        moved = sum(d > reach + TOUCH_SLACK for d in distances)
        return sum(overlaps for _, overlaps in result), moved, sum(distances)

    # Greedy placement depends on the order; a few fixed orders, the best layout wins.
    best = min((attempt(order) for order in _orders(points)), key=score)
    return [
        _placement(*point, shown[i], box, radius, reach, size, overlaps)
        for i, (point, (box, overlaps)) in enumerate(zip(points, best, strict=True))
    ]


def _orders(points: Sequence[tuple[float, float]]) -> list[list[int]]:
    """The orders tried: as given, reversed, most crowded first, and along each axis."""
    index = list(range(len(points)))

    def crowd(i: int) -> float:
        return -sum(1.0 / (1.0 + math.dist(points[i], q)) for q in points)

    return [
        index,
        index[::-1],
        sorted(index, key=crowd),
        sorted(index, key=lambda i: points[i][0]),
        sorted(index, key=lambda i: -points[i][0]),
        sorted(index, key=lambda i: points[i][1]),
        sorted(index, key=lambda i: -points[i][1]),
    ]


def _two_passes(
    layout: _Layout,
    points: Sequence[tuple[float, float]],
    boxes: list[list[Box]],
    order: Sequence[int],
) -> list[tuple[Box, bool]]:
    """Touching positions first (in ``order``), then the rest further out or overprinting."""
    chosen: dict[int, tuple[Box, bool]] = {}
    for i in order:
        free, _ = layout.search(i, points[i], boxes[i][:TOUCHING])
        if free is not None:
            chosen[i] = (free, False)
            layout.take(points[i], free)
    for i in order:
        if i not in chosen:
            free, least = layout.search(i, points[i], boxes[i])
            box = (
                free
                or least
                or _clamped(*points[i], *_size(boxes[i][0]), layout.reach, layout.frame)
            )
            chosen[i] = (box, free is None)
            layout.take(points[i], box)
    return [chosen[i] for i in range(len(points))]


def _size(box: Box) -> tuple[float, float]:
    return box[2] - box[0], box[3] - box[1]


def _clamped(px: float, py: float, width: float, height: float, reach: float, frame: Box) -> Box:
    """The right-hand box moved inside ``frame`` (a frame too small for any candidate)."""
    x0 = min(max(px + reach, frame[0]), frame[2] - width)
    y0 = min(max(py - height / 2, frame[1]), frame[3] - height)
    return (x0, y0, x0 + width, y0 + height)


def _placement(
    px: float,
    py: float,
    text: str,
    box: Box,
    radius: float,
    reach: float,
    size: float,
    overlaps: bool,
) -> Placement:
    """The text position of ``box``: the anchor on the side facing the point."""
    distance = box_distance(px, py, box)
    if box[0] >= px:
        x, anchor = box[0], "start"
    elif box[2] <= px:
        x, anchor = box[2], "end"
    else:
        x, anchor = (box[0] + box[2]) / 2, "middle"
    # The text box's top is 0.95 font sizes above the baseline (figures.text.text_box).
    baseline = box[1] + 0.95 * size
    leader = _leader(px, py, radius, box) if distance > reach + TOUCH_SLACK else None
    return Placement(x, baseline, anchor, text, box, distance, leader, overlaps)


def marker_attributes(index: int) -> str:
    """The attributes tying a marker to its label: `` class="point" data-point="i"``."""
    return f' class="point" data-point="{index}"'


def label_markup(index: int, placement: Placement, *, full: str = "", size: float = 0) -> str:
    """SVG of one placed label: its leader line (when moved) and its text.

    Args:
        index: the point's index (``data-point``, as on its marker).
        placement: from :func:`place_labels`.
        full: the label's full text, given as a ``<title>`` when it was shortened.
        size: an explicit ``font-size`` (0: the stylesheet's).
    """
    parts = []
    if placement.leader is not None:
        x1, y1, x2, y2 = placement.leader
        parts.append(
            f'<line class="leader" data-point="{index}" x1="{x1:.1f}" y1="{y1:.1f}" '
            f'x2="{x2:.1f}" y2="{y2:.1f}" stroke="#888" stroke-width="0.75"/>'
        )
    font = f' font-size="{size:g}"' if size else ""
    text = (
        f'<text class="tick point-label" data-point="{index}" x="{placement.x:.1f}" '
        f'y="{placement.y:.1f}" text-anchor="{placement.anchor}"{font}>'
        f"{escape(placement.text)}</text>"
    )
    if full and full != placement.text:
        text = f"<g><title>{escape(full)}</title>{text}</g>"
    parts.append(text)
    return "".join(parts)
