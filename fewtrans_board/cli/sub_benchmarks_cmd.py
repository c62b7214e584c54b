"""``sub-benchmarks`` (formerly ``benchmarks``): the sub-benchmarks and what each needs."""

from __future__ import annotations

import dataclasses
import shlex
import textwrap
from typing import Any

import click

from fewtrans_board.cli.groups import echo_json


def sub_benchmark_rows() -> list[dict[str, Any]]:
    """Every sub-benchmark as JSON-friendly data, with how to build each manifest."""
    from fewtrans_board.episodes.frozen import FROZEN
    from fewtrans_board.leaderboard.sub_benchmarks import SUB_BENCHMARKS

    recipes = {m.filename: m for m in FROZEN}
    rows = []
    for benchmark in SUB_BENCHMARKS.values():
        row = dataclasses.asdict(benchmark)
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
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
def sub_benchmarks_command(as_json: bool) -> None:
    """List the sub-benchmarks: their frozen manifests, HPE protocols, held-out datasets.

    The 'benchmark' of a submission.toml names one of them; a submission covers each of
    its manifests once, with one of its HPE protocols and a centre searched on one of its
    held-out datasets ('fewtrans-board hpe search').
    """
    rows = sub_benchmark_rows()
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
        click.echo(f"  HPE protocols: {', '.join(row['hpe_protocols'])}")
        click.echo(f"  centre search on: {', '.join(row['held_out'])} (fewtrans-search tasks)")
        click.echo(f"  significance against: {row['reference_adapter']}")
    click.echo(
        "Build a manifest with the command in 'fewtrans-board sub-benchmarks --json' (build)."
    )
