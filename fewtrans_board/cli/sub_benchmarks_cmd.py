"""``sub-benchmarks`` (formerly ``benchmarks``): the sub-benchmarks and what each needs."""

from __future__ import annotations

import dataclasses
import shlex
import textwrap
from pathlib import Path
from typing import Any

import click

from fewtrans_board.cli.groups import echo_json


def _entries(count: int) -> str:
    return f"{count} entr{'y' if count == 1 else 'ies'}"


def sub_benchmark_rows(store: Path | None = None) -> list[dict[str, Any]]:
    """Every sub-benchmark as JSON-friendly data, with how to build each manifest.

    Args:
        store: the leaderboard folder whose entries are counted per HPE protocol
            (``entries``: ``{protocol: count}``; empty without a store).
    """
    from fewtrans_board.cli.protocol_choice import entries_by_protocol
    from fewtrans_board.episodes.frozen import FROZEN
    from fewtrans_board.leaderboard.sub_benchmarks import SUB_BENCHMARKS

    recipes = {m.filename: m for m in FROZEN}
    counts = entries_by_protocol(store)
    rows = []
    for benchmark in SUB_BENCHMARKS.values():
        row = dataclasses.asdict(benchmark)
        row["entries"] = {p: len(ids) for p, ids in counts.get(benchmark.name, {}).items()}
        row["manifests"] = []
        for filename in benchmark.manifests:
            frozen = recipes.get(filename)
            row["manifests"].append(
                {
                    "file": filename,
                    "dataset": frozen.dataset if frozen else None,
                    "protocol": frozen.protocol if frozen else None,
                    "embedded": frozen.embedded if frozen else None,
                    "build": shlex.join(frozen.command()) if frozen else None,
                }
            )
        rows.append(row)
    return rows


@click.command("sub-benchmarks")
@click.option(
    "--leaderboard",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="Store whose entries are counted per HPE protocol (default: "
    "$FEWTRANS_BOARD_LEADERBOARD, or ./leaderboard if present).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
def sub_benchmarks_command(leaderboard: Path | None, as_json: bool) -> None:
    """List the sub-benchmarks: their frozen manifests, HPE protocols, held-out datasets.

    The 'benchmark' of a submission.toml names one of them; a submission covers each of
    its manifests once, with one of its HPE protocols and a centre searched on one of its
    held-out datasets ('fewtrans-board hpe search'). Each ranks its leaderboard under one
    protocol (entries are ranked only with entries of the same protocol), the default of
    every command that takes --hpe on its manifests.
    """
    from fewtrans_board.cli.protocol_choice import default_store

    rows = sub_benchmark_rows(default_store(leaderboard))
    if as_json:
        echo_json(rows)
        return
    for row in rows:
        click.echo(f"{row['name']}: {row['title']}")
        click.echo(
            textwrap.fill(row["description"], 96, initial_indent="  ", subsequent_indent="  ")
        )
        files = [m["file"] for m in row["manifests"]]
        listing = f"manifests ({len(files)}): {', '.join(files)}"
        click.echo(
            textwrap.fill(
                listing, 96, initial_indent="  ", subsequent_indent="    ", break_on_hyphens=False
            )
        )
        counts = row["entries"]
        click.echo(
            f"  leaderboard protocol: {row['leaderboard_protocol']} (the --hpe default; "
            f"{_entries(counts.get(row['leaderboard_protocol'], 0))} ranked under it)"
        )
        others = [
            f"{p} ({_entries(counts.get(p, 0))})"
            for p in row["hpe_protocols"]
            if p != row["leaderboard_protocol"]
        ]
        click.echo(f"  other HPE protocols, ranked apart: {', '.join(others) or 'none'}")
        click.echo(f"  centre search on: {', '.join(row['held_out'])} (fewtrans-search tasks)")
        click.echo(f"  significance against: {row['reference_adapter']}")
    click.echo(
        "Build a manifest with the command in 'fewtrans-board sub-benchmarks --json' (build)."
    )
