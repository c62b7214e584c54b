"""Run summaries as the command line prints them.

The table, the per-shot and split lines, and the collapsed-prediction and peak-memory notes.
"""

from __future__ import annotations

from typing import Any

import click

from fewtrans_board.cli.groups import echo_table


def print_summaries(summaries: list[dict[str, Any]]) -> None:
    """Print one row per run: headline HPE accuracy, vote, oracle, mean single config.

    Base-to-novel runs add a line with base, novel and their harmonic mean; k-shot (CLIP)
    runs a line per K (mean over seeds ± their std) and the average over shots, their
    headline, since a mean ± CI pooled over shots mixes different tasks. A run whose headline
    predictions collapse to one class on most episodes gets a line saying so.
    """
    inductive = [s for s in summaries if not s.get("transductive")]
    apart = [s for s in summaries if s.get("transductive")]
    if inductive:
        _print_summary_table(inductive)
    if apart:
        click.echo("\ntransductive (a query's logits depend on the other queries; ranked apart):")
        _print_summary_table(apart)
    for s in summaries:
        if s.get("configuration"):
            values = ", ".join(f"{k}={v}" for k, v in sorted(s["configuration"].items()))
            click.echo(f"{s['model']} / {s['adapter']}: non-default configuration {values}")
    _print_split_lines(summaries)
    _print_collapsed(summaries)
    _print_peak_memory(summaries)


def _print_collapsed(summaries: list[dict[str, Any]]) -> None:
    """One line per run whose headline predictions collapse to one class on most episodes."""
    for s in summaries:
        check = s.get("collapse") or {}
        if check.get("marked"):
            click.echo(
                f"{s['model']} / {s['adapter']} on {s['dataset']}: {check['line']}: at least "
                f"{check['threshold']:.0%} of the {check['aggregation']} predictions fall on one "
                "class, so its accuracy is that class's share of the queries"
            )


def _print_peak_memory(summaries: list[dict[str, Any]]) -> None:
    """One line per run that recorded its peak memory (FewTrans Table IX)."""
    for s in summaries:
        peak = s.get("peak_memory")
        if not peak:
            continue
        growth = peak.get("growth_bytes")
        added = "" if growth is None else f", {growth / 2**20:.1f} MiB above the shard's start"
        click.echo(
            f"{s['model']} / {s['adapter']} on {s['dataset']}: peak memory "
            f"{peak['mib']:.1f} MiB ({peak['measure']} on {peak.get('device') or '?'}{added}; "
            f"largest of {peak['shards_measured']}/{peak['shards']} shard(s))"
        )


def cell(stats: dict[str, Any]) -> str:
    """``mean ± ci95`` of a ``{mean, ci95}`` record."""
    return f"{stats['mean']:.2f} ± {stats['ci95']:.2f}"


def _print_summary_table(summaries: list[dict[str, Any]]) -> None:
    rows = []
    for s in summaries:
        a = s["aggregations"]
        rows.append(
            [
                *(s["model"], s["adapter"], shots_label(s["dataset"], s.get("shots"))),
                *(s["hpe_protocol"], s["configurations"]),
                f"{cell(a['hpe'])} ({s['headline']})",
                *(cell(a[k]) for k in ("vote", "oracle", "mean-single")),
                f"{s['hpe_penalty']:.2f}",
                s["episodes"],
            ]
        )
    headers = [
        *("model", "adapter", "dataset", "HPE protocol", "configs", "HPE % (95% CI)"),
        *("vote", "oracle", "mean single", "penalty", "episodes"),
    ]
    echo_table(headers, rows)


def shots_label(dataset: str, shots: int | None) -> str:
    """A dataset named with its shots per class where every episode has the same (BSCD)."""
    return dataset if shots is None else f"{dataset} ({shots}-shot)"


def _print_split_lines(summaries: list[dict[str, Any]]) -> None:
    for s in summaries:
        label = f"{s['model']} / {s['adapter']} on {s['dataset']} (HPE):"
        if "harmonic_mean" in s:
            click.echo(
                f"{label} base {cell(s['aggregations']['hpe'])}, novel {cell(s['novel']['hpe'])}, "
                f"harmonic mean {cell(s['harmonic_mean']['hpe'])}"
            )
        if "per_shot" in s:
            shots = s["per_shot"]["hpe"]
            per_k = ", ".join(
                f"K={k['shots']} {k['mean']:.2f} ± {k['std']:.2f}" for k in shots["shots"]
            )
            click.echo(
                f"{label} {per_k}; average over shots {shots['average']:.2f} "
                f"± {shots['average_std']:.2f} (± = std over seeds; the pooled CI above mixes "
                "shots)"
            )
