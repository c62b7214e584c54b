"""``preflight`` (formerly ``validate``): the checks a plugin author runs before evaluating."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from fewtrans_board.cli.app import App, pass_app
from fewtrans_board.cli.groups import (
    THREADS_HELP,
    adapter_option,
    centre_option,
    config_option,
    device_option,
    echo_json,
    hpe_option,
    isolation_option,
    manifest_option,
    model_option,
    root_option,
    run_spec,
    show_progress,
    threads_option,
    weights_option,
)


@click.command("preflight")
@model_option("Model name.")
@weights_option("Local checkpoint.")
@adapter_option("Adapter name.")
@manifest_option("Manifest to run on (default: the frozen digits fewtrans-varied manifest).")
@root_option("Dataset copy for --manifest.")
@hpe_option("HPE protocol.")
@centre_option(
    "Check the grid around the centre found by 'fewtrans-board hpe search' (as evaluate "
    "--centre does)."
)
@config_option("Centre override (repeatable).")
@click.option(
    "--episodes", type=click.IntRange(1, 50), default=3, show_default=True, help="Episodes to run."
)
@device_option()
@threads_option(THREADS_HELP)
@isolation_option()
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--quiet", is_flag=True, help="No progress bars.")
@pass_app
def preflight_command(
    app: App, /, manifest: Path | None, episodes: int, as_json: bool, quiet: bool, **options: Any
) -> None:
    """Check a model + adapter before submitting: contract, HPE run, re-runnability, no label use.

    Runs the plugin contract checks, then every HPE configuration on a few episodes in the
    same plugin worker evaluate uses: twice in separate workers (results must be
    identical), once more with the queries in another order (predictions must not change),
    query subsets in a separate episode process (each query is predicted on its own), and
    fit() against fit_many() in accuracy (an adapter that inherits the default fit_many,
    one fit() per configuration, gets a line saying there is nothing to compare); and that
    importing the plugin does not import torch. Exits 1 with the reason on the first
    failure. A progress bar per check goes to stderr (none with --json or --quiet).
    """
    from fewtrans_board.cli.protocol_choice import announce, default_store, protocol_for_manifest
    from fewtrans_board.runner.preflight import DEFAULT_MANIFEST, run_preflight

    choice = protocol_for_manifest(options["hpe"], manifest or DEFAULT_MANIFEST, default_store())
    options["hpe"] = choice.protocol
    run = run_spec(
        options,
        manifest=str(manifest) if manifest else "",
        hpe=options["hpe"],
        limit=episodes,
        threads=options["threads"],
        isolation=options["isolation"],
    )
    report = run_preflight(run, app.registry, progress=show_progress(not (quiet or as_json)))
    if as_json:
        echo_json(report)
    else:
        announce(choice)
        for check in report["checks"]:
            click.echo(f"  ok  {check}")
        if not any("fit_many" in check for check in report["checks"]):
            click.echo(
                f"  --  fit() against fit_many(): nothing to compare, {run.adapter} inherits "
                "the default fit_many (fit() once per configuration)"
            )
        centre = options["centre_file"]
        around = f" around the centre of {centre}" if centre else ""
        click.echo(
            f"validated {run.adapter} on {run.model}: {report['configurations']} configurations"
            f"{around} x {report['episodes']} episodes, mean HPE accuracy "
            f"{report['hpe_accuracy']:.2f}%"
        )
