"""``demo``: the main job on the embedded default data."""

from __future__ import annotations

from pathlib import Path

import click

from fewtrans_board.cli.app import App, pass_app
from fewtrans_board.cli.groups import OutputPath, echo_json, echo_table, print_summaries


@click.command("demo")
@click.option(
    "--out",
    type=OutputPath(file_okay=False),
    default=Path("demo-output"),
    show_default=True,
    help="Folder for the manifest, results (and site).",
)
@click.option(
    "--episodes",
    type=click.IntRange(1, 600),
    default=200,
    show_default=True,
    help="Episodes of the frozen digits manifest to evaluate (600 = all).",
)
@click.option(
    "--adapters",
    default="mean-centroid,linear-probe,cosine-classifier",
    show_default=True,
    help="Comma-separated adapters.",
)
@click.option("--json", "as_json", is_flag=True, help="Print summaries as JSON.")
@click.option("--quiet", is_flag=True, help="No progress bars.")
@pass_app
def demo_command(
    app: App, out: Path, episodes: int, adapters: str, as_json: bool, quiet: bool
) -> None:
    """Run HPE on the embedded digits: pretrained demo CNN vs its random-init twin.

    Builds (and hash-checks) the frozen digits manifest, evaluates each adapter with the
    fewtrans-paper HPE protocol on both backbones, and prints mean ± 95% CI per run and the
    paired gain from pretraining. Runs resume if interrupted.
    """
    from fewtrans_board.demo import run_demo

    names = [a.strip() for a in adapters.split(",") if a.strip()]
    if not names:
        raise click.BadParameter("names no adapter", param_hint="--adapters")
    for name in names:
        app.registry.adapters.get(name)  # an unknown name fails here, before anything is written
    result = run_demo(
        app.registry, out, episodes=episodes, adapters=names, progress=not (quiet or as_json)
    )
    if as_json:
        echo_json(
            {
                "out": str(out),
                "summaries": result.summaries,
                "gains": result.gains,
                "site": str(result.site_index) if result.site_index else None,
            }
        )
        return
    print_summaries(result.summaries)
    click.echo("\nPretraining gain (paired over shared episodes, HPE accuracy, 95% CI):")
    echo_table(
        ["adapter", "pretrained - random (points)", "episodes"],
        [[g["adapter"], f"{g['mean']:+.2f} ± {g['ci95']:.2f}", g["n"]] for g in result.gains],
    )
    click.echo(f"\nresults: {out / 'results'}")
    if result.site_index is not None:
        click.echo(f"site: {result.site_index.resolve()}")
