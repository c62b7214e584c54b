"""``validate``: the checks a plugin author runs before submitting."""

from __future__ import annotations

from pathlib import Path

import click

from fewtrans_board.cli.app import App, pass_app
from fewtrans_board.cli.evaluate_cmd import default_device, parse_config_options
from fewtrans_board.cli.groups import echo_json


@click.command("validate")
@click.option("--model", "model", required=True, help="Model name.")
@click.option(
    "--weights",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Local checkpoint.",
)
@click.option("--adapter", "adapter", required=True, help="Adapter name.")
@click.option(
    "--manifest",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Manifest to run on (default: the frozen digits fewtrans-varied manifest).",
)
@click.option(
    "--root",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Dataset copy for --manifest.",
)
@click.option(
    "--protocol", "hpe", default="fewtrans-paper", show_default=True, help="HPE protocol."
)
@click.option(
    "--config", "config", multiple=True, metavar="KEY=VALUE", help="Centre override (repeatable)."
)
@click.option(
    "--episodes", type=click.IntRange(1, 50), default=3, show_default=True, help="Episodes to run."
)
@click.option("--device", default=None, help="Torch device (default: cuda if available, else cpu).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@pass_app
def validate_command(
    app: App,
    model: str,
    weights: Path | None,
    adapter: str,
    manifest: Path | None,
    root: Path | None,
    hpe: str,
    config: tuple[str, ...],
    episodes: int,
    device: str | None,
    as_json: bool,
) -> None:
    """Check a model + adapter before submitting: contract, HPE run, re-runnability, no label use.

    Runs the plugin contract checks, then every HPE configuration on a few episodes twice
    (results must be identical), and once more with the query labels permuted (predictions
    must not change). Exits 1 with the reason on the first failure.
    """
    from fewtrans_board.runner.spec import RunSpec
    from fewtrans_board.validation import validate_submission

    run = RunSpec(
        model=model,
        adapter=adapter,
        manifest=str(manifest) if manifest else "",
        hpe=hpe,
        weights=str(weights) if weights else None,
        root=str(root) if root else None,
        config=parse_config_options(config),
        limit=episodes,
        device=device or default_device(),
    )
    report = validate_submission(run, app.registry)
    if as_json:
        echo_json(report)
    else:
        for check in report["checks"]:
            click.echo(f"  ok  {check}")
        click.echo(
            f"validated {adapter} on {model}: {report['configurations']} configurations x "
            f"{report['episodes']} episodes, mean HPE accuracy {report['hpe_accuracy']:.2f}%"
        )
