"""``sweep``: every configuration of an explicit grid on every episode (FewTrans Table I, Fig. 2)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from fewtrans_board.cli.app import App, pass_app
from fewtrans_board.cli.groups import (
    OutputPath,
    adapter_option,
    config_option,
    device_option,
    echo_json,
    echo_table,
    isolation_option,
    limit_option,
    manifest_option,
    model_option,
    root_option,
    run_spec,
    shards_option,
    show_progress,
    threads_option,
    weights_option,
)
from fewtrans_board.cli.summaries import cell

SHOWN_EPISODES = 20
"""Rows of the per-episode table printed on the terminal (all are in ``sweep.json``)."""


def parse_grid_options(values: tuple[str, ...]) -> dict[str, list[Any]]:
    """Parse ``--grid FIELD=V1,V2,...`` options into ``{field: values}`` in the given order.

    Values are read as JSON where possible (``2e-6``, ``40``, ``true``), else as text.

    Raises:
        click.BadParameter: no ``=``, no field, an empty value, or a field given twice.
    """
    axes: dict[str, list[Any]] = {}
    for item in values:
        name, sep, raw = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise click.BadParameter(f"{item!r} is not FIELD=V1,V2,...", param_hint="--grid")
        if name in axes:
            raise click.BadParameter(f"axis {name!r} is given twice", param_hint="--grid")
        parts = [part.strip() for part in raw.split(",")]
        if not raw.strip() or any(not part for part in parts):
            raise click.BadParameter(f"{item!r} has an empty value", param_hint="--grid")
        axis = []
        for part in parts:
            try:
                value = json.loads(part)
            except json.JSONDecodeError:
                value = part
            if not isinstance(value, str | int | float | bool):
                raise click.BadParameter(
                    f"{item!r}: {part!r} is not a number, text or a bool", param_hint="--grid"
                )
            axis.append(value)
        axes[name] = axis
    return axes


@click.command("sweep")
@model_option("Model name, e.g. demo-cnn.digits or timm:ARCH.")
@weights_option("Local checkpoint for the model (safetensors preferred).")
@adapter_option("Adapter name, e.g. linear-probe.")
@manifest_option("Frozen episode manifest (Parquet).", required=True)
@root_option("Local dataset copy (omit for embedded datasets).")
@click.option(
    "--grid",
    "grid",
    multiple=True,
    required=True,
    metavar="FIELD=V1,V2,...",
    help="An axis of the sweep: any adapter field and its values (repeatable; the grid is "
    "their Cartesian product, in the order given).",
)
@config_option("Set a field that is not swept (repeatable).")
@click.option(
    "--out",
    type=OutputPath(file_okay=False),
    required=True,
    help="Results folder (created; reused to resume); sweep.json and sweep.svg go there too.",
)
@limit_option("Sweep only the first N episodes.")
@shards_option
@device_option()
@threads_option("Torch CPU threads (default 1, as evaluate). Part of the run identity.")
@isolation_option()
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@pass_app
def sweep_command(
    app: App, /, grid: tuple[str, ...], out: Path, as_json: bool, quiet: bool, **options: Any
) -> None:
    """Evaluate every configuration of an explicit grid on every episode of a manifest.

    The hyperparameter study of FewTrans §IV: per episode the best configuration (Table I:
    the optimum varies from task to task) and per configuration the mean accuracy with its
    95% CI (Fig. 2), plus the average-optimal configuration. Results are sharded and
    resumable like 'evaluate' (run the same command again); a sweep runs under the 'sweep'
    protocol, which no leaderboard accepts.
    """
    from fewtrans_board.analysis.report import json_safe, write_report
    from fewtrans_board.analysis.sweep import sweep_report
    from fewtrans_board.results.load import load_run
    from fewtrans_board.runner.run import run_evaluation

    axes = parse_grid_options(grid)
    spec = run_spec(
        options,
        manifest=str(options["manifest"]),
        hpe="sweep",
        limit=options["limit"],
        shards=options["shards"],
        threads=options["threads"],
        isolation=options["isolation"],
        sweep=axes,
    )
    report = run_evaluation(spec, app.registry, out, progress=show_progress(not (quiet or as_json)))
    results = load_run(out)
    if not results.complete:
        message = (
            f"{out}: {len(results.shards_present)}/{results.shards_total} shards finished; "
            "run the same command again to finish the sweep"
        )
        if as_json:
            echo_json({"complete": False, "message": message})
        else:
            click.echo(message)
        return
    data, svg = sweep_report(results)
    json_path, svg_path = write_report(out, "sweep", data, svg)
    if as_json:
        echo_json(json_safe(data))
        return
    click.echo(
        f"{out}: {len(report.shards_run)} shard(s) run, {len(report.shards_skipped)} already "
        f"done; {report.configurations} configurations x {data['episodes']} episodes of "
        f"{data['dataset']} (sweep protocol: never a leaderboard entry)"
    )
    print_sweep(data)
    click.echo(f"wrote {json_path} and {svg_path}")


def print_sweep(data: dict[str, Any]) -> None:
    """Fig. 2 (per configuration) and Table I (per episode) on the terminal."""
    fields = data["fields"]
    optimal = data["average_optimal"]["index"]
    click.echo("\nper configuration (FewTrans Fig. 2):")
    echo_table(
        ["#", *fields, "accuracy % (95% CI)", "episodes", "note"],
        [
            [
                row["index"],
                *(row["config"][f] for f in fields),
                cell(row),
                row["n"],
                "average-optimal" if row["index"] == optimal else "",
            ]
            for row in data["per_config"]
        ],
    )
    episodes = data["per_episode"]
    click.echo("\nbest configuration per episode (FewTrans Table I):")
    echo_table(
        ["episode", *fields, "accuracy %", "worst %", "tied"],
        [
            [
                row["episode"],
                *(row["best"][f] for f in fields),
                f"{row['accuracy']:.2f}",
                f"{row['worst_accuracy']:.2f}",
                len(row["tied"]),
            ]
            for row in episodes[:SHOWN_EPISODES]
        ],
    )
    if len(episodes) > SHOWN_EPISODES:
        click.echo(f"... {len(episodes) - SHOWN_EPISODES} more episodes in sweep.json")
    click.echo(
        f"\n{data['distinct_optima']} distinct best configurations over {len(episodes)} "
        f"episodes; average-optimal: #{optimal} ({data['average_optimal']['label']}), "
        f"{cell(data['average_optimal'])}"
    )
