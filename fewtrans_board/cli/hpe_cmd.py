"""``hpe grid`` and ``hpe search`` commands."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from fewtrans_board.cli.app import App, pass_app
from fewtrans_board.cli.groups import (
    THREADS_HELP,
    OutputPath,
    adapter_option,
    centre_option,
    config_option,
    device_option,
    echo_json,
    echo_table,
    hpe_option,
    limit_option,
    manifest_option,
    model_option,
    parse_config_options,
    root_option,
    run_spec,
    threads_option,
    weights_option,
)
from fewtrans_board.hpe.search import MAX_ROUNDS


@click.group("hpe")
def hpe_group() -> None:
    """Hyperparameter Ensemble: show grids, search centres on a held-out dataset."""


@hpe_group.command("grid")
@adapter_option("Adapter name.")
@hpe_option("HPE protocol.")
@click.option(
    "--benchmark",
    default=None,
    metavar="NAME",
    help="The sub-benchmark the run is for: --hpe defaults to its leaderboard protocol.",
)
@config_option("Centre override (repeatable).")
@centre_option("Centre from 'hpe search'.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@pass_app
def hpe_grid(
    app: App,
    adapter: str,
    hpe: str | None,
    benchmark: str | None,
    config: tuple[str, ...],
    centre_file: Path | None,
    as_json: bool,
) -> None:
    """List the configurations an HPE protocol evaluates for ADAPTER."""
    from fewtrans_board.cli.protocol_choice import announce, default_store, protocol_for_benchmark
    from fewtrans_board.hpe.protocols import get_hpe_protocol
    from fewtrans_board.runner.centres import resolve_centre
    from fewtrans_board.runner.spec import load_centre_file

    choice = protocol_for_benchmark(hpe, benchmark, default_store())
    adapter_cls = app.registry.adapters.get(adapter).obj
    protocol = get_hpe_protocol(choice.protocol)
    record = load_centre_file(centre_file) if centre_file is not None else None
    centre = resolve_centre(adapter, adapter_cls, parse_config_options(config), record, centre_file)
    grid = protocol.grid(adapter_cls, centre)
    axes = protocol.axes(adapter_cls, centre)
    if as_json:
        echo_json(
            {
                "protocol": protocol.describe(),
                "centre": centre.to_dict(),
                "axes": axes,
                "hash": protocol.digest(adapter_cls, centre),
                "grid": [c.to_dict() for c in grid],
            }
        )
        return
    announce(choice)
    click.echo(
        f"{protocol.name} v{protocol.version} for {adapter}: {len(grid)} configurations "
        f"({' x '.join(str(len(v)) for v in axes.values()) or 'centre only'}), "
        f"fused by {protocol.aggregation}"
    )
    names = list(axes) or list(centre.to_dict())
    echo_table(["#", *names], [[i, *(c.to_dict()[n] for n in names)] for i, c in enumerate(grid)])


@hpe_group.command("search")
@model_option("Model name.")
@weights_option("Local checkpoint.")
@adapter_option("Adapter name.")
@click.option(
    "--dataset",
    "dataset",
    default=None,
    help="Held-out dataset; its fewtrans-search episodes are built from --root (default cub).",
)
@root_option("Local dataset copy.")
@manifest_option("An existing search manifest instead of --dataset.")
@click.option(
    "--out",
    type=OutputPath(dir_okay=False),
    required=True,
    help="Where to write the centre and the search log (JSON).",
)
@config_option("Start point override (repeatable).")
@click.option(
    "--grid",
    "grid",
    multiple=True,
    metavar="NAME=V1,V2,...",
    help="Also search an option off the HPE axes over these values (repeatable): each "
    "round scores its grid with every value (a cross product); the centre keeps the best.",
)
@limit_option("Use only the first N search episodes.")
@click.option(
    "--max-rounds",
    type=click.IntRange(min=1),
    default=MAX_ROUNDS,
    show_default=True,
    help="Stop after this many rounds even if the search has not settled (smoke runs).",
)
@device_option()
@threads_option(THREADS_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print the record as JSON.")
@pass_app
def hpe_search(
    app: App,
    /,
    dataset: str | None,
    manifest: Path | None,
    out: Path,
    threads: int | None,
    max_rounds: int,
    grid: tuple[str, ...],
    as_json: bool,
    **options: Any,
) -> None:
    """Find an adapter's HPE centre on the 50 held-out search tasks (FewTrans's local search).

    Evaluate later with 'fewtrans-board evaluate --centre OUT': the centre and this log
    travel with the results. --grid pull=0.1,0.5,1 searches an option off the HPE axes
    too: every round of the local search scores its grid once per value (so the search
    costs that many times more) and the centre holds the value with the best held-out
    accuracy ('grid_options' in OUT records the values tried).
    """
    from fewtrans_board.core.threads import torch_threads
    from fewtrans_board.episodes.build import build_manifest, manifest_recipe
    from fewtrans_board.episodes.protocols import get_protocol
    from fewtrans_board.runner.centre_search import run_centre_search

    searched = parse_grid_options(grid, options["config"])
    root = options["root"]
    if manifest is None:
        name = dataset or "cub"
        spec = app.registry.datasets.get(name).obj
        manifest = out.with_name(f"fewtrans-search--{name}.parquet")
        recipe = manifest_recipe("fewtrans-search", name, with_root=root is not None, overrides={})
        build_manifest(spec, root, get_protocol("fewtrans-search"), command=recipe).write(manifest)
    elif dataset is not None:
        raise click.UsageError("give either --dataset or --manifest, not both")
    run = run_spec(options, manifest=str(manifest), hpe="single", limit=options["limit"])
    with torch_threads(threads):
        record = run_centre_search(
            run,
            app.registry,
            out,
            progress=not as_json,  # a bar on a terminal, lines in a log
            max_rounds=max_rounds,
            options=searched,
        )
    if as_json:
        echo_json(record)
        return
    rounds = len(record["log"])
    click.echo(
        f"centre of {run.adapter} on {record['dataset']} ({record['episodes']} tasks, "
        f"{rounds} round{'' if rounds == 1 else 's'}, {record['evaluations']} "
        f"configurations): {record['centre']}"
    )
    for name, values in record.get("grid_options", {}).items():
        click.echo(
            f"{name}: {record['centre'][name]!r} chosen of {', '.join(map(repr, values))} "
            "(held-out accuracy, searched with the HPE axes)"
        )
    click.echo(f"wrote {out}")


def parse_grid_options(values: tuple[str, ...], config: tuple[str, ...]) -> dict[str, list[Any]]:
    """``--grid NAME=V1,V2`` values as ``{name: [values]}`` (each read like ``--config``).

    Raises:
        click.BadParameter: no ``=``, no value, a name given twice, or also in ``--config``.
    """
    fixed = parse_config_options(config)
    out: dict[str, list[Any]] = {}
    for item in values:
        name, sep, raw = item.partition("=")
        listed = [v.strip() for v in raw.split(",") if v.strip()]
        if not sep or not name or not listed:
            raise click.BadParameter(f"{item!r} is not NAME=V1,V2,...", param_hint="--grid")
        if name in out or name in fixed:
            where = "--config" if name in fixed else "--grid"
            raise click.BadParameter(
                f"{name} is given by {where} already; search it with one --grid",
                param_hint="--grid",
            )
        out[name] = [parse_config_options((f"{name}={v}",))[name] for v in listed]
    return out
