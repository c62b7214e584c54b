"""The inductive vs partially-transductive CLIP comparison page.

A pair of sub-benchmarks differs in the model: CLIP as downloaded (partially
transductive) and CLIP with each target unlearned (inductive). A method is one adapter on
one base model under one HPE protocol (results under different protocols are not
comparable: a method under two protocols is two methods, paired only with itself under the
same protocol); on the datasets both settings share, for every method in both the page
shows its average over shots and datasets in each (per-K reporting: no interval pooled over
shots), the gap, its rank in each among the methods of its protocol and the pairs of
methods (of one protocol) whose order flips, plus the paper's scatter of inductive (x)
against original (y) accuracy. Methods whose averages a
paper reports for both settings (``leaderboard/reported``, column ``average``) get the same
table and scatter apart, badged as reported: they are the paper's Fig. 2 as printed.
"""

from __future__ import annotations

from markupsafe import Markup, escape

from fewtrans_board.figures.axes import (
    nice_axis,
    plot_frame,
    svg_close,
    svg_open,
    ticks_with_text,
    x_axis_title,
    y_axis_title,
)
from fewtrans_board.figures.labels import label_markup, marker_attributes, place_labels
from fewtrans_board.models.unlearned_names import split_name
from fewtrans_board.results.per_shot import average_over_datasets
from fewtrans_board.website.model import (
    BenchmarkView,
    MethodView,
)
from fewtrans_board.website.settings_model import (
    MethodPair,
    ReportedPair,
    Setting,
    SettingsComparison,
)


def method_name(method: MethodView) -> str:
    """``adapter on base model`` (the unlearned suffix removed)."""
    return f"{method.meta.adapter} on {split_name(method.meta.model)[0]}"


def method_key(method: MethodView) -> str:
    """``adapter on base model · protocol``: a method under two protocols is two methods."""
    return f"{method_name(method)} · {method.protocol}"


def _settings(view: BenchmarkView, datasets: list[str]) -> dict[str, Setting]:
    """Each method's headline average over shots and ``datasets`` (those it covers all of).

    Keyed by :func:`method_key`, so one method under two protocols gives two.
    """
    out = {}
    for method in view.methods:
        results = method.per_shot("hpe")
        if all(d in results for d in datasets):
            average = average_over_datasets({d: results[d] for d in datasets})
            out[method_key(method)] = Setting(method, average)
    return out


def _ranks(settings: dict[str, Setting]) -> dict[str, int]:
    """Each method's rank among the methods of its own HPE protocol."""
    ranks = {}
    for protocol in {s.method.protocol for s in settings.values()}:
        group = [k for k in settings if settings[k].method.protocol == protocol]
        order = sorted(group, key=lambda k: (-settings[k].average.average, k))
        ranks.update({k: i + 1 for i, k in enumerate(order)})
    return ranks


def compare(original: BenchmarkView, inductive: BenchmarkView) -> SettingsComparison:
    """Match methods across the two settings on their shared datasets; find rank flips.

    A method is matched with itself under the same HPE protocol only; ranks and flips are
    within a protocol.
    """
    datasets = sorted(set(original.datasets) & set(inductive.datasets))
    first, second = _settings(original, datasets), _settings(inductive, datasets)
    shared = sorted(set(first) & set(second)) if datasets else []
    rank_a = _ranks({k: first[k] for k in shared})
    rank_b = _ranks({k: second[k] for k in shared})
    protocol = {k: first[k].method.protocol for k in shared}
    listing = dict.fromkeys([*inductive.benchmark.hpe_protocols, *sorted(set(protocol.values()))])
    order = {p: i for i, p in enumerate(listing)}
    pairs = [
        MethodPair(
            k, method_name(first[k].method), protocol[k], first[k], second[k], rank_a[k], rank_b[k]
        )
        for k in shared
    ]
    pairs.sort(key=lambda p: (order[p.protocol], p.rank_inductive, p.key))
    # One protocol: the names say it all; several: the keys tell the protocols apart.
    label = {p.key: p.key if len(set(protocol.values())) > 1 else p.name for p in pairs}
    flips = [
        (label[a], label[b])
        for a in shared
        for b in shared
        if protocol[a] == protocol[b] and rank_a[a] < rank_a[b] and rank_b[a] > rank_b[b]
    ]
    points = [
        (label[p.key], p.inductive.average.average, p.original.average.average) for p in pairs
    ]
    reported = reported_pairs(original, inductive)
    reported_points = [(r.method, r.inductive, r.original) for r in reported]
    return SettingsComparison(
        original,
        inductive,
        datasets,
        pairs,
        flips,
        scatter(points),
        reported,
        scatter(reported_points),
    )


def _reported_averages(view: BenchmarkView) -> dict[tuple[str, str], float]:
    """``(paper, method) -> average`` of the reported tables of ``view`` that have one."""
    out = {}
    for table in view.reported:
        paper = str(table.data.get("source", {}).get("short", table.key))
        for row in table.data.get("rows", []):
            cell = row.get("cells", {}).get("average")
            if isinstance(cell, dict) and isinstance(cell.get("mean"), int | float):
                out[(paper, str(row.get("method")))] = float(cell["mean"])
    return out


def reported_pairs(original: BenchmarkView, inductive: BenchmarkView) -> list[ReportedPair]:
    """Methods a paper reports an average for in both settings, by gap (largest first)."""
    first, second = _reported_averages(original), _reported_averages(inductive)
    pairs = [
        ReportedPair(method, first[(paper, method)], second[(paper, method)], paper)
        for paper, method in sorted(set(first) & set(second))
    ]
    return sorted(pairs, key=lambda p: (-p.gap, p.method))


def scatter(points: list[tuple[str, float, float]], size: int = 420) -> Markup:
    """SVG scatter: x = inductive accuracy, y = original accuracy, with the diagonal.

    Each point's label sits by its marker, or is joined to it by a thin leader line where
    it had to move away (:func:`~fewtrans_board.figures.labels.place_labels`).
    """
    if not points:
        return Markup("")
    left, top, span = 50, 20, size - 80
    values = [v for _, x, y in points for v in (x, y)]
    low, high, _ = nice_axis(max(0.0, min(values) - 5), min(100.0, max(values) + 5))
    scale = span / max(high - low, 1e-6)

    def sx(v: float) -> float:
        return left + (v - low) * scale

    def sy(v: float) -> float:
        return top + span - (v - low) * scale

    title = "Inductive (x) vs partially transductive (y) average accuracy"
    parts = [
        svg_open(size, size, title, "plot settings-plot"),
        plot_frame(left, top, left + span, top + span),
        f'<line x1="{sx(low)}" y1="{sy(low)}" x2="{sx(high)}" y2="{sy(high)}" stroke="#ccc" stroke-dasharray="4"/>',
        x_axis_title("inductive (unlearned CLIP), %", left + span / 2, size - 25, span),
        y_axis_title("original CLIP, %", top + span / 2, span),
    ]
    for tick, text in ticks_with_text(low, high):
        if tick > high + 1e-9:
            continue
        parts.append(
            f'<text x="{sx(tick):.1f}" y="{top + span + 14}" text-anchor="middle" class="tick">{text}</text>'
            f'<text x="{left - 4}" y="{sy(tick) + 4:.1f}" text-anchor="end" class="tick">{text}</text>'
        )
    for i, (label, x, y) in enumerate(points):
        parts.append(
            f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="5"{marker_attributes(i)} fill="#3366cc">'
            f"<title>{escape(label)}: inductive {x:.1f}, original {y:.1f}</title></circle>"
        )
    frame = (float(left + 2), float(top + 2), float(left + span - 2), float(top + span - 2))
    centres = [(sx(x), sy(y)) for _, x, y in points]
    placements = place_labels(centres, [label for label, _, _ in points], frame, radius=5.0)
    parts += [label_markup(i, p, full=points[i][0]) for i, p in enumerate(placements)]
    return svg_close(parts)


def comparisons(views: list[BenchmarkView]) -> list[SettingsComparison]:
    """One comparison per (original, inductive) pair of sub-benchmarks present in ``views``."""
    by_name = {v.benchmark.name: v for v in views}
    out = []
    for view in views:
        partner = by_name.get(view.benchmark.paired_with)
        if view.benchmark.model_rule == "unlearned-target" and partner is not None:
            out.append(compare(partner, view))
    return out
