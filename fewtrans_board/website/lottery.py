"""The sampling lottery: how often a few episodes rank the entries differently than all.

FewTrans's argument (:data:`ARGUMENT`), shown by each protocol section with at least two
ranked entries on its own stored results:

- for n in :data:`SIZES` (those at most the stored episode count), :data:`RESAMPLES` times,
  draw n episodes per column (dataset) with replacement, the same draw for every entry
  (paired, as every entry ran the same frozen episodes), seeded (:data:`SEED` and n);
- an entry's score on a draw is the average over columns of its mean headline accuracy
  (HPE aggregation) over the drawn episodes, the statistic the tables rank by
  (base-to-novel: the harmonic mean of that average on base and on novel classes, the same
  episodes drawn for both; per-shot benchmarks: the mean over the drawn episodes, which is
  their average over shots when the draw holds as many episodes of every K);
- the entries are ranked by score, ties (scores within :data:`TIE_TOLERANCE`, so that
  rounding never decides an exact tie) broken at random (seeded), and compared with the
  ranking on every stored episode (ties there broken by the section's order):
  **P(top-1 differs)** is the share of draws whose first entry is not the full set's first;
  **Kendall's tau of the top k** is, over the full set's first k entries
  (k = min(:data:`TOP_K`, entries)), (concordant - discordant pairs) / (k(k-1)/2) of their
  order in the draw against their full-set order, averaged over the draws (1: the same
  order every time).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from markupsafe import Markup, escape

from fewtrans_board.figures.axes import (
    plot_frame,
    svg_close,
    svg_open,
    ticks_with_text,
    x_axis_title,
    y_grid,
)
from fewtrans_board.figures.text import fit_text
from fewtrans_board.stats.bootstrap import resample_counts, resampled_means
from fewtrans_board.website.downloads import Tables
from fewtrans_board.website.model import BenchmarkView, Download, ProtocolSection

SIZES = (5, 10, 20, 50, 100, 300, 600)
RESAMPLES = 1000
SEED = 20240527
TOP_K = 5
ARGUMENT = (
    "FewTrans (§IV-A, Fig. 1) calls it the sampling lottery: per-task accuracy varies so much "
    "that results on a few sampled tasks can rank methods by the luck of the draw, so "
    "rankings need hundreds of tasks."
)


@dataclass(frozen=True)
class LotteryPoint:
    """The lottery's statistics at one number of drawn episodes."""

    episodes: int
    p_top1_differs: float
    kendall_tau: float
    """Mean over draws of Kendall's tau of the full set's top k."""
    p_order_differs: float
    """Share of draws in which the order of the full set's top k is not the same."""


TIE_TOLERANCE = 1e-9
"""Scores this close (relative to the larger, at least absolute) tie: a draw's mean is a
sum whose rounding depends on how it was computed, and a tie in exact arithmetic must
go to the random keys, not to the last bits."""


def _ranks(scores: np.ndarray, ties: np.ndarray) -> np.ndarray:
    """Rank (0 = first) of each entry per draw: by score descending, ties by ``ties``.

    Args:
        scores: ``[R, E]``.
        ties: ``[R, E]`` random keys; the lower wins a tie (scores within
            :data:`TIE_TOLERANCE` of the next better one tie with it).
    """
    by_score = np.argsort(-scores, axis=-1, kind="stable")
    ordered = np.take_along_axis(scores, by_score, axis=-1)  # descending
    scale = np.maximum(1.0, np.abs(ordered[:, :-1]))
    gaps = (ordered[:, :-1] - ordered[:, 1:]) > TIE_TOLERANCE * scale
    levels = np.concatenate(
        [np.zeros((len(scores), 1), dtype=np.int64), np.cumsum(gaps, axis=-1)], axis=-1
    )
    level = np.empty_like(levels)
    np.put_along_axis(level, by_score, levels, axis=-1)
    order = np.lexsort((ties, level), axis=-1)  # last key sorts first
    ranks = np.empty_like(order)
    np.put_along_axis(ranks, order, np.arange(scores.shape[1])[None, :], axis=-1)
    return ranks


def _combined(base: np.ndarray, novel: np.ndarray | None) -> np.ndarray:
    """The score: ``base``, or the harmonic mean of ``base`` and ``novel`` (0 where both are)."""
    if novel is None:
        return base
    total = base + novel
    out: np.ndarray = np.divide(2 * base * novel, total, out=np.zeros_like(total), where=total > 0)
    return out


def full_order(
    columns: Sequence[np.ndarray], novel: Sequence[np.ndarray] | None = None
) -> list[int]:
    """Entries (row indices) by score on every episode, descending; ties by index."""
    base = np.mean([c.mean(axis=1) for c in columns], axis=0)
    other = np.mean([c.mean(axis=1) for c in novel], axis=0) if novel else None
    scores = _combined(base, other)
    return sorted(range(len(scores)), key=lambda e: (-scores[e], e))


def lottery(
    columns: Sequence[np.ndarray],
    sizes: Sequence[int] = SIZES,
    *,
    resamples: int = RESAMPLES,
    seed: int = SEED,
    top_k: int = TOP_K,
    novel: Sequence[np.ndarray] | None = None,
) -> list[LotteryPoint]:
    """The lottery's statistics of paired per-episode results (see the module).

    Args:
        columns: per column (dataset), accuracies ``[entries, episodes]``; episodes aligned
            across entries; every column has the same entries in the same order.
        sizes: numbers of episodes to draw per column; those above the smallest column's
            episode count are left out.
        resamples: draws per size.
        seed: the generator's seed (with the size: each size is reproducible on its own).
        top_k: the Kendall tau's k (at most the number of entries).
        novel: base-to-novel: per column, the novel-class accuracies of the same entries
            and episodes; the score is then the harmonic mean (see the module).

    Returns:
        One :class:`LotteryPoint` per size kept, in the order of ``sizes``.
    """
    arrays = [np.asarray(c, dtype=float) for c in columns]
    novels = [np.asarray(c, dtype=float) for c in novel] if novel else None
    entries = arrays[0].shape[0]
    stored = min(a.shape[1] for a in arrays)
    reference = full_order(arrays, novels)
    top = reference[: max(2, min(top_k, entries))]
    out = []
    for n in sizes:
        if n > stored or n < 1:
            continue
        rng = np.random.default_rng([seed, n])
        base = np.zeros((resamples, entries))
        other = np.zeros((resamples, entries)) if novels else None
        for c, a in enumerate(arrays):
            # Counts of each episode per draw ([R, episodes]) times the entries' values:
            # memory is R x (episodes + entries), never R x n x entries.
            counts = resample_counts(rng, a.shape[1], resamples, n)
            base += resampled_means(counts, a, n)  # [R, E]
            if other is not None and novels is not None:
                other += resampled_means(counts, novels[c], n)
        scores = _combined(base / len(arrays), None if other is None else other / len(arrays))
        ranks = _ranks(scores, rng.random((resamples, entries)))
        first = np.argmin(ranks, axis=1)
        k = len(top)
        concordant = np.zeros(resamples)
        for i in range(k):
            for j in range(i + 1, k):
                concordant += np.where(ranks[:, top[i]] < ranks[:, top[j]], 1.0, -1.0)
        tau = concordant / (k * (k - 1) / 2)
        out.append(
            LotteryPoint(
                episodes=n,
                p_top1_differs=float(np.mean(first != reference[0])),
                kendall_tau=float(tau.mean()),
                p_order_differs=float(np.mean(tau < 1.0)),
            )
        )
    return out


@dataclass(frozen=True)
class SectionLottery:
    """A protocol section's lottery: statistics, figure and table id."""

    points: list[LotteryPoint]
    entries: list[str]
    """The entries' names in the full-set ranking."""
    stored: int
    """Episodes per column the draws come from (the smallest column's)."""
    top_k: int
    plot: Markup
    table_id: str


def _columns(
    view: BenchmarkView, section: ProtocolSection, split: str = "base"
) -> list[np.ndarray]:
    """Per column, the ranked entries' HPE accuracies on the episodes all of them have."""
    columns = []
    for d in view.datasets:
        runs = [m.runs.get(d) for m in section.methods]
        if any(r is None for r in runs):
            continue
        episodes = [r.run.episodes for r in runs if r is not None]
        shared = sorted(set.intersection(*(set(e.tolist()) for e in episodes)))
        if not shared:
            continue
        rows = []
        for run, ids in zip(runs, episodes, strict=True):
            assert run is not None
            position = {e: i for i, e in enumerate(ids.tolist())}
            values = run.novel["hpe"] if split == "novel" else run.aggregations["hpe"]
            rows.append(values[[position[e] for e in shared]])
        columns.append(np.stack(rows))
    return columns


def section_lottery(view: BenchmarkView, section: ProtocolSection) -> SectionLottery | None:
    """The lottery of a section with at least two ranked entries (``None`` otherwise)."""
    if len(section.methods) < 2:
        return None
    columns = _columns(view, section)
    if not columns:
        return None
    novel = _columns(view, section, "novel") if section.base_novel else None
    if novel is not None and [c.shape for c in novel] != [c.shape for c in columns]:
        novel = None  # not aligned with the base episodes: rank by base accuracy
    points = lottery(columns, novel=novel)
    if not points:
        return None
    order = full_order(columns, novel)
    names = [section.methods[e].name for e in order]
    k = max(2, min(TOP_K, len(names)))
    plot = lottery_plot(
        points, k, title=f"{view.benchmark.title}: the sampling lottery ({section.protocol})"
    )
    stored = min(c.shape[1] for c in columns)
    return SectionLottery(points, names, stored, k, plot, f"lottery{section.anchor}")


def lottery_sections(view: BenchmarkView) -> dict[str, SectionLottery]:
    """:func:`section_lottery` of every section that has one, by protocol."""
    out = {}
    for section in view.sections:
        result = section_lottery(view, section)
        if result is not None:
            out[section.protocol] = result
    return out


def lottery_plot(
    points: Sequence[LotteryPoint], k: int, *, title: str, width: int = 560, height: int = 300
) -> Markup:
    """P(top-1 differs) and mean Kendall tau of the top k against the episodes drawn (log x)."""
    if not points:
        return Markup("")
    left, right, top, bottom = 48.0, width - 16.0, 28.0, height - 44.0
    low = min(0.0, min(p.kendall_tau for p in points))
    ticks = [(t, s) for t, s in ticks_with_text(low, 1.0) if t <= 1.0 + 1e-9]
    low = min(low, ticks[0][0])
    sizes = [p.episodes for p in points]
    x_low, x_high = np.log10(min(sizes)) - 0.15, np.log10(max(sizes)) + 0.15

    def px(n: float) -> float:
        return float(left + (np.log10(n) - x_low) / (x_high - x_low) * (right - left))

    def py(value: float) -> float:
        return bottom - (value - low) / (1.0 - low) * (bottom - top)

    parts = [
        svg_open(width, height, title, "plot lottery-plot"),
        plot_frame(left, top, right, bottom),
    ]
    parts += y_grid(ticks, left, right, py)
    for n in sizes:
        parts.append(
            f'<text x="{px(n):.1f}" y="{bottom + 14}" text-anchor="middle" class="tick">{n}</text>'
        )
    x_text = "episodes drawn per dataset (log scale; paired bootstrap)"
    parts.append(x_axis_title(x_text, (left + right) / 2, height - 8, width - 8))
    series = [
        ("P(top-1 differs)", "#dc3912", [p.p_top1_differs for p in points]),
        (f"Kendall tau of the top {k}", "#3366cc", [p.kendall_tau for p in points]),
    ]
    for s, (name, colour, values) in enumerate(series):
        path = " ".join(f"{px(n):.1f},{py(v):.1f}" for n, v in zip(sizes, values, strict=True))
        parts.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for n, v in zip(sizes, values, strict=True):
            parts.append(
                f'<circle cx="{px(n):.1f}" cy="{py(v):.1f}" r="3.5" fill="{colour}">'
                f"<title>{escape(name)} with {n} episodes: {v:.3f}</title></circle>"
            )
        # The legend: one entry per half of the space above the frame.
        label = fit_text(name, (right - left) / 2 - 24)
        x = left + s * (right - left) / 2
        parts.append(
            f'<line x1="{x:.1f}" x2="{x + 16:.1f}" y1="{top - 12}" y2="{top - 12}" '
            f'stroke="{colour}" stroke-width="2"/>'
            f'<text x="{x + 20:.1f}" y="{top - 8}" class="tick" fill="{colour}">{escape(label)}</text>'
        )
    return svg_close(parts)


LOTTERY_COLUMNS = ("episodes", "p_top1_differs", "kendall_tau_top_k", "p_top_k_order_differs")


def lottery_downloads(
    view: BenchmarkView, sections: dict[str, SectionLottery]
) -> dict[str, Download]:
    """Each section's lottery table as CSV and JSON (``benchmark-<name>--lottery<anchor>``)."""
    out = Tables(f"benchmark-{view.benchmark.name}")
    for section in view.sections:
        result = sections.get(section.protocol)
        if result is None:
            continue
        rows = tuple(
            (p.episodes, p.p_top1_differs, p.kendall_tau, p.p_order_differs) for p in result.points
        )
        about: dict[str, Any] = {
            "benchmark": view.benchmark.name,
            "hpe_protocol": section.protocol,
            "resamples": RESAMPLES,
            "seed": SEED,
            "top_k": result.top_k,
            "stored_episodes": result.stored,
            "full_ranking": result.entries,
        }
        what = f"{view.benchmark.title}: the sampling lottery ({section.protocol})"
        out.add(result.table_id, what, LOTTERY_COLUMNS, rows, **about)
    return out
