"""What an entry cost to evaluate, and accuracy against cost per protocol section.

README.md ("Leaderboard, submissions and the site", **Cost**) says what is shown: seconds per
episode and per configuration, trainable parameters per fit, peak memory, device and
batching mode (FewTrans Table IX's columns), display-only; a field a run did not record
shows "not recorded". Here: an episode's seconds are the ``seconds`` its rows record,
summed over the configurations (a batched ``fit_many`` shares its time equally among them),
averaged over the episodes of each column, then over the columns (datasets weigh equally,
as in the headline); trainable parameters are ``evaluate``'s counts
(:mod:`fewtrans_board.runner.worker.trainable`), the mean over configurations, episodes and
columns with the largest single fit beside it; the peak is the largest any shard recorded
(:mod:`fewtrans_board.runner.worker.memory`).

The accuracy-vs-cost figure draws x the seconds per episode (log scale), y the headline
with its interval (the bootstrap interval of the average over datasets; per-shot: the
average over shots ± its spread over seeds; base-to-novel: the harmonic mean's interval),
and marks the Pareto front: the entries no other entry of the section beats on both at once
(at most as slow and at least as accurate, one of them strictly).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from markupsafe import Markup, escape

from fewtrans_board.figures.axes import (
    log_ticks,
    nice_axis,
    plot_frame,
    svg_close,
    svg_open,
    ticks_with_text,
    x_axis_title,
    y_axis_title,
    y_grid,
)
from fewtrans_board.figures.labels import label_markup, marker_attributes, place_labels
from fewtrans_board.figures.text import fit_text, text_width
from fewtrans_board.website.downloads import Tables
from fewtrans_board.website.model import (
    BenchmarkView,
    Download,
    MethodRun,
    MethodView,
    ProtocolSection,
)

NOT_RECORDED = "not recorded"
SECONDS_FLOOR = 1e-3
"""Seconds per episode below this are drawn at it (a log axis has no 0)."""


@dataclass(frozen=True)
class EntryCost:
    """What one entry's runs cost (see the module's definitions); ``None``: not recorded."""

    method: MethodView
    seconds_per_episode: float
    seconds_per_configuration: float
    configurations: int
    episodes: int
    trainable: float | None
    trainable_largest: int | None
    peak_bytes: int | None
    peak_measure: str | None
    devices: tuple[str, ...]
    batching: tuple[str, ...]

    @property
    def peak_mib(self) -> float | None:
        """The peak in MiB (``None``: not recorded)."""
        return None if self.peak_bytes is None else self.peak_bytes / 2**20

    @property
    def trainable_text(self) -> str:
        """``1,234`` (``1,234 per fit, up to 2,000``), or "not recorded"."""
        if self.trainable is None or self.trainable_largest is None:
            return NOT_RECORDED
        mean = f"{self.trainable:,.0f}"
        if self.trainable_largest != round(self.trainable):
            return f"{mean} (up to {self.trainable_largest:,})"
        return mean

    @property
    def peak_text(self) -> str:
        """``882.9 MiB`` with its measure, or "not recorded"."""
        if self.peak_mib is None:
            return NOT_RECORDED
        return f"{self.peak_mib:,.1f} MiB ({self.peak_measure})"


def _batching(run: MethodRun) -> str:
    """The run's batching mode in words (``auto: heads batched, plans one by one``)."""
    provenance = run.run.provenance
    record = provenance.batching
    mode = provenance.identity.batching or record.get("mode")
    if mode is None:
        return NOT_RECORDED
    parts = []
    if "heads" in record:
        parts.append("heads " + ("batched" if record["heads"] else "one by one"))
    if "plans" in record:
        parts.append("plans " + ("in lockstep" if record["plans"] else "one by one"))
    return f"{mode}: {', '.join(parts)}" if parts else str(mode)


def entry_cost(method: MethodView) -> EntryCost:
    """The cost of an entry's runs (see the module's definitions)."""
    per_episode, per_configuration, episodes, grids = [], [], 0, set()
    trainable, largest, peaks = [], [], []
    devices, batching = [], []
    for run in method.runs.values():
        # Per episode, the recorded seconds summed over its configurations; the grid's size.
        sums, configurations = run.run.episode_seconds, run.run.configurations
        grids.add(configurations)
        if sums.size:
            per_episode.append(float(sums.mean()))
            per_configuration.append(float(sums.mean()) / configurations)
            episodes += int(sums.size)
        counted = run.summary.get("trainable_parameters")
        if isinstance(counted, dict):
            trainable.append(float(counted["per_fit"]))
            largest.append(int(counted["largest"]))
        peak = run.summary.get("peak_memory")
        if isinstance(peak, dict):
            peaks.append((int(peak["bytes"]), str(peak.get("measure"))))
        environment = run.run.provenance.environment
        devices.append(f"{environment.device} ({environment.device_name})")
        batching.append(_batching(run))
    runs = len(method.runs)
    top = max(peaks) if peaks else None
    return EntryCost(
        method=method,
        seconds_per_episode=float(np.mean(per_episode)) if per_episode else math.nan,
        seconds_per_configuration=float(np.mean(per_configuration))
        if per_configuration
        else math.nan,
        configurations=max(grids) if grids else 0,
        episodes=episodes,
        # Counts of some runs only would understate the entry: all or nothing.
        trainable=float(np.mean(trainable)) if trainable and len(trainable) == runs else None,
        trainable_largest=max(largest) if largest and len(largest) == runs else None,
        peak_bytes=top[0] if top else None,
        peak_measure=top[1] if top else None,
        devices=tuple(dict.fromkeys(devices)),
        batching=tuple(dict.fromkeys(batching)),
    )


@dataclass(frozen=True)
class Headline:
    """An entry's headline accuracy with the interval drawn around it."""

    estimate: float
    low: float
    high: float
    what: str


def headlines(section: ProtocolSection) -> dict[str, Headline]:
    """Each ranked entry's headline in the section, by entry id (see the module)."""
    out: dict[str, Headline] = {}
    if section.shots.get("hpe"):
        for shot_row in section.shots["hpe"]:
            average = shot_row.average
            mean, std = average.average, average.average_std
            what = "average over shots ± spread over seeds"
            out[shot_row.method.id] = Headline(mean, mean - std, mean + std, what)
    elif section.base_novel.get("hpe"):
        for bn_row in section.base_novel["hpe"]:
            h = bn_row.harmonic
            what = "harmonic mean of base and novel, 95% bootstrap interval"
            out[bn_row.method.id] = Headline(h.estimate, h.low, h.high, what)
    else:
        for row in section.tables.get("hpe", []):
            a = row.average
            what = "average over datasets, 95% bootstrap interval"
            out[row.method.id] = Headline(a.estimate, a.low, a.high, what)
    return out


def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the points ``(cost, accuracy)`` that no other point dominates.

    ``q`` dominates ``p`` when it costs at most as much and is at least as accurate, one of
    the two strictly (equal points do not dominate each other). One sweep in ascending cost:
    a point is on the front when it is the most accurate at its cost and more accurate than
    every cheaper point. Indices come in ascending cost (then index).
    """
    order = sorted(range(len(points)), key=lambda i: (points[i][0], -points[i][1], i))
    front: list[int] = []
    best_cheaper = -math.inf  # the best accuracy of the points cheaper than the current cost
    k = 0
    while k < len(order):
        cost = points[order[k]][0]
        same = [i for i in order[k:] if points[i][0] == cost]
        top = points[same[0]][1]
        if top > best_cheaper:
            front += [i for i in same if points[i][1] == top]
        best_cheaper = max(best_cheaper, top)
        k += len(same)
    return front


@dataclass(frozen=True)
class CostRow:
    """One ranked entry of a section: its cost, headline and place on the front."""

    cost: EntryCost
    headline: Headline | None
    on_front: bool


@dataclass(frozen=True)
class SectionCost:
    """A protocol section's cost table and accuracy-vs-cost figure."""

    rows: list[CostRow]
    plot: Markup
    table_id: str


def cost_plot(
    points: Sequence[tuple[str, float, Headline]],
    front: Sequence[int],
    *,
    title: str,
    width: int = 560,
    height: int = 340,
) -> Markup:
    """Headline accuracy (y, with its interval) against seconds per episode (x, log scale).

    Args:
        points: ``(label, seconds per episode, headline)`` per entry.
        front: indices of the Pareto front (:func:`pareto_front`), drawn joined and ringed.
        title: the accessible title.
        width: SVG width in pixels.
        height: SVG height in pixels.
    """
    if not points:
        return Markup("")
    left, right, top, bottom = 56.0, width - 16.0, 28.0, height - 44.0
    xs = [max(s, SECONDS_FLOOR) for _, s, _ in points]
    x_low, x_high = min(xs) / 1.6, max(xs) * 1.6
    y_low, y_high, _ = nice_axis(
        max(0.0, min(h.low for _, _, h in points) - 2),
        min(100.0, max(h.high for _, _, h in points) + 2),
    )

    log_low, log_span = math.log10(x_low), math.log10(x_high) - math.log10(x_low)

    def px(value: float) -> float:
        return left + (math.log10(max(value, SECONDS_FLOOR)) - log_low) / log_span * (right - left)

    def py(value: float) -> float:
        return bottom - (value - y_low) / max(y_high - y_low, 1e-9) * (bottom - top)

    parts = [svg_open(width, height, title, "plot cost-plot"), plot_frame(left, top, right, bottom)]
    y_ticks = [(t, text) for t, text in ticks_with_text(y_low, y_high) if t <= y_high + 1e-9]
    parts += y_grid(y_ticks, left, right, py)
    for tick, text in log_ticks(x_low, x_high):
        at = min(max(px(tick), text_width(text) / 2 + 2), width - text_width(text) / 2 - 2)
        parts.append(
            f'<line x1="{px(tick):.1f}" x2="{px(tick):.1f}" y1="{top}" y2="{bottom}" stroke="#eee"/>'
            f'<text x="{at:.1f}" y="{bottom + 14}" text-anchor="middle" class="tick">{text}</text>'
        )
    x_text = "seconds per episode (fit + predict, all configurations; log scale)"
    parts.append(x_axis_title(x_text, (left + right) / 2, height - 8, width - 8))
    parts.append(y_axis_title("headline accuracy, %", (top + bottom) / 2, bottom - top))
    if len(front) > 1:
        path = " ".join(f"{px(xs[i]):.1f},{py(points[i][2].estimate):.1f}" for i in front)
        parts.append(
            f'<polyline points="{path}" fill="none" stroke="#dc3912" stroke-width="1.5" '
            f'stroke-dasharray="5,3"><title>Pareto front</title></polyline>'
        )
    on_front = set(front)
    for i, (label, seconds, h) in enumerate(points):
        x, y = px(xs[i]), py(h.estimate)
        parts.append(
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{py(h.low):.1f}" y2="{py(h.high):.1f}" stroke="#222"/>'
        )
        ring = ' stroke="#dc3912" stroke-width="2.5"' if i in on_front else ""
        note = " (Pareto front)" if i in on_front else ""
        parts.append(
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4.5"{marker_attributes(i)} fill="#3366cc"{ring}>'
            f"<title>{escape(label)}: {h.estimate:.2f} [{h.low:.2f}, {h.high:.2f}], "
            f"{seconds:.3g} s per episode{note}</title></circle>"
        )
    # Each label by its own point, or joined to it by a thin line (figures/labels.py).
    centres = [(px(xs[i]), py(h.estimate)) for i, (_, _, h) in enumerate(points)]
    frame = (left + 2, top + 2, right - 2, bottom - 2)
    placements = place_labels(centres, [label for label, _, _ in points], frame, radius=5.5)
    for i, placement in enumerate(placements):
        parts.append(label_markup(i, placement, full=points[i][0]))
    legend = fit_text("Pareto front: ringed, joined by the dashed line", right - left)
    parts.append(  # above the frame, where no point or label goes
        f'<text x="{right}" y="{top - 8}" text-anchor="end" class="tick" '
        f'fill="#dc3912">{escape(legend)}</text>'
    )
    return svg_close(parts)


def section_cost(view: BenchmarkView, section: ProtocolSection) -> SectionCost:
    """The cost rows (ranked entries, by headline) and the figure of one protocol section."""
    heads = headlines(section)
    costs = [entry_cost(m) for m in section.methods]
    drawn = [
        (c, heads[c.method.id])
        for c in costs
        if c.method.id in heads and math.isfinite(c.seconds_per_episode)
    ]
    front_of = pareto_front(
        [(max(c.seconds_per_episode, SECONDS_FLOOR), h.estimate) for c, h in drawn]
    )
    front = {drawn[i][0].method.id for i in front_of}
    rows = [CostRow(c, heads.get(c.method.id), c.method.id in front) for c in costs]
    rows.sort(key=lambda r: (-(r.headline.estimate if r.headline else -math.inf), r.cost.method.id))
    plot = cost_plot(
        [(c.method.name, c.seconds_per_episode, h) for c, h in drawn],
        front_of,
        title=f"{view.benchmark.title}: accuracy vs cost ({section.protocol})",
    )
    return SectionCost(rows, plot, f"cost{section.anchor}")


def cost_sections(view: BenchmarkView) -> dict[str, SectionCost]:
    """:func:`section_cost` of every section with ranked entries, by protocol."""
    return {s.protocol: section_cost(view, s) for s in view.sections if s.methods}


COST_COLUMNS = (
    *("entry_id", "method", "model"),
    *("headline", "headline_low", "headline_high", "headline_statistic"),
    *("seconds_per_episode", "seconds_per_configuration", "configurations", "episodes"),
    *("trainable_parameters_per_fit", "trainable_parameters_largest"),
    *("peak_memory_bytes", "peak_memory_measure", "device", "batching", "pareto_front"),
)


def cost_downloads(view: BenchmarkView, sections: dict[str, SectionCost]) -> dict[str, Download]:
    """The cost table of each section as CSV and JSON (``benchmark-<name>--cost<anchor>``)."""
    out = Tables(f"benchmark-{view.benchmark.name}")
    for section in view.sections:
        cost = sections.get(section.protocol)
        if cost is None:
            continue
        rows = []
        for row in cost.rows:
            c, h = row.cost, row.headline
            rows.append(
                (
                    c.method.id,
                    c.method.meta.method,
                    c.method.meta.model,
                    *((h.estimate, h.low, h.high, h.what) if h else (None,) * 4),
                    _number(c.seconds_per_episode),
                    _number(c.seconds_per_configuration),
                    c.configurations,
                    c.episodes,
                    c.trainable,
                    c.trainable_largest,
                    c.peak_bytes,
                    c.peak_measure,
                    "; ".join(c.devices),
                    "; ".join(c.batching),
                    row.on_front,
                )
            )
        about: dict[str, Any] = {
            "benchmark": view.benchmark.name,
            "hpe_protocol": section.protocol,
            "cost": "seconds: recorded per result row (fit + predict); trainable parameters: "
            "optimised-tensors per fit; display-only provenance (website/cost.py)",
        }
        what = f"{view.benchmark.title}: cost ({section.protocol})"
        out.add(cost.table_id, what, COST_COLUMNS, rows, **about)
    return out


def _number(value: float) -> float | None:
    return value if math.isfinite(value) else None


def cost_and_stability(view: BenchmarkView, tables: dict[str, Download]) -> dict[str, Any]:
    """A benchmark page's cost and sampling-lottery context; adds their downloads to ``tables``.

    ``site/templates/_cost_stability.html`` renders it in each protocol section.
    """
    from fewtrans_board.website import lottery

    costs = cost_sections(view)
    lotteries = lottery.lottery_sections(view)
    tables.update(cost_downloads(view, costs))
    tables.update(lottery.lottery_downloads(view, lotteries))
    return {
        "cost_sections": costs,
        "lottery_sections": lotteries,
        "lottery_argument": lottery.ARGUMENT,
        "lottery_resamples": lottery.RESAMPLES,
        "lottery_seed": lottery.SEED,
    }
