"""``evaluate`` and ``results summary`` commands."""

from __future__ import annotations

from pathlib import Path

import click

from fewtrans_board.cli.app import App, pass_app
from fewtrans_board.cli.groups import (
    adapter_option,
    centre_option,
    config_option,
    device_option,
    echo_json,
    manifest_option,
    model_option,
    optional_str,
    parse_config_options,
    print_summaries,
    protocol_option,
    resolve_device,
    root_option,
    weights_option,
)


def parse_shard(value: str | None) -> tuple[int, int] | None:
    """Parse ``--shard i/n``."""
    if value is None:
        return None
    index, sep, count = value.partition("/")
    if not sep or not index.isdigit() or not count.isdigit() or int(count) < 1:
        raise click.BadParameter(f"{value!r} is not i/n (e.g. 3/12)", param_hint="--shard")
    if int(index) >= int(count):
        raise click.BadParameter(f"shard index {index} must be below {count}", param_hint="--shard")
    return int(index), int(count)


def check_max_memory(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Validate ``--max-memory`` (a size such as 40GiB, or a percentage)."""
    from fewtrans_board.adapters.lockstep.memory import parse_memory
    from fewtrans_board.errors import ConfigError

    try:
        parse_memory(value)
    except ConfigError as exc:
        raise click.BadParameter(str(exc)) from exc
    return value


@click.command("evaluate")
@model_option("Model name, e.g. demo-cnn.digits or timm:ARCH.")
@weights_option("Local checkpoint for the model (safetensors preferred).")
@adapter_option("Adapter name, e.g. linear-probe.")
@manifest_option("Frozen episode manifest (Parquet).", required=True)
@protocol_option("HPE protocol: fewtrans-paper, fewtrans-reference or single.")
@root_option("Local dataset copy (omit for embedded datasets).")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Results folder (created; reused to resume).",
)
@config_option("Override a centre hyperparameter (repeatable).")
@centre_option(
    "Use the centre found by 'fewtrans-board hpe search' (its log travels with the results)."
)
@click.option("--shard", "shard", default=None, metavar="I/N", help="Run only shard I of N.")
@click.option(
    "--shards", type=int, default=None, help="Number of shards (default: one per 50 episodes)."
)
@click.option("--limit", type=int, default=None, help="Evaluate only the first N episodes.")
@device_option()
@click.option(
    "--executor",
    type=click.Choice(["inline", "process", "ray"]),
    default="inline",
    show_default=True,
    help="Where shards run.",
)
@click.option("--workers", type=int, default=1, show_default=True, help="Parallel shard workers.")
@click.option(
    "--threads",
    type=int,
    default=None,
    help="Torch CPU threads per worker; CPU results are bit-identical only for equal values.",
)
@click.option(
    "--no-feature-cache",
    is_flag=True,
    help="Recompute frozen features every time (slow; for checks).",
)
@click.option(
    "--max-memory",
    default=None,
    metavar="SIZE|PCT",
    callback=check_max_memory,
    help="Memory for the configurations trained together, e.g. 40GiB or 60% "
    "(default: 80% of the device's free memory). Results do not depend on it.",
)
@click.option(
    "--batching",
    type=click.Choice(["auto", "on", "off"]),
    default="auto",
    show_default=True,
    help="Train the configurations of an episode in lockstep: auto = on CUDA devices "
    "(frozen heads also on CPU). Results equal the one-by-one loop up to rounding.",
)
@click.option(
    "--image-cache",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Folder of decoded-image files shared across runs (default: OUT/decoded).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the run report and summary as JSON.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@pass_app
def evaluate_command(
    app: App,
    model: str,
    weights: Path | None,
    adapter: str,
    manifest: Path,
    hpe: str,
    root: Path | None,
    out: Path,
    config: tuple[str, ...],
    centre_file: Path | None,
    shard: str | None,
    shards: int | None,
    limit: int | None,
    device: str | None,
    executor: str,
    workers: int,
    threads: int | None,
    no_feature_cache: bool,
    max_memory: str | None,
    batching: str,
    image_cache: Path | None,
    as_json: bool,
    quiet: bool,
) -> None:
    """Evaluate ADAPTER on MODEL over a manifest with every configuration of the HPE grid.

    Results are written shard by shard (atomically) into OUT; running the same command
    again resumes, skipping finished shards.
    """
    from fewtrans_board.results.load import load_run
    from fewtrans_board.results.summary import summarize
    from fewtrans_board.runner.run import run_evaluation
    from fewtrans_board.runner.spec import RunSpec

    shard_choice = parse_shard(shard)
    if shard_choice is not None:
        if shards is not None and shards != shard_choice[1]:
            raise click.BadParameter("--shards disagrees with --shard i/n", param_hint="--shards")
        shards = shard_choice[1]
    if limit is not None and limit < 1:
        raise click.BadParameter("must be positive", param_hint="--limit")
    spec = RunSpec(
        model=model,
        adapter=adapter,
        manifest=str(manifest),
        hpe=hpe,
        weights=optional_str(weights),
        root=optional_str(root),
        config=parse_config_options(config),
        centre_file=optional_str(centre_file),
        limit=limit,
        shards=shards,
        device=resolve_device(device),
        feature_cache=not no_feature_cache,
        threads=threads,
        batching=batching,
        max_memory=max_memory,
        image_cache=optional_str(image_cache),
    )
    report = run_evaluation(
        spec,
        app.registry,
        out,
        shard=shard_choice[0] if shard_choice else None,
        executor=executor,
        workers=workers,
        progress=not (quiet or as_json),
    )
    results = load_run(out)
    summary = summarize(results) if results.complete else None
    if as_json:
        echo_json({"report": {**report.__dict__, "out": str(report.out)}, "summary": summary})
        return
    click.echo(
        f"{out}: {len(report.shards_run)} shard(s) run, {len(report.shards_skipped)} already done, "
        f"{report.configurations} configurations per episode, {report.seconds:.1f} s"
    )
    if summary is not None:
        print_summaries([summary])
    else:
        click.echo(f"{len(results.shards_present)}/{results.shards_total} shards finished so far.")


@click.group("results")
def results_group() -> None:
    """Inspect evaluation results."""


@results_group.command("summary")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option(
    "--ddof",
    type=click.IntRange(0, 1),
    default=1,
    show_default=True,
    help="1 = sample std (FewTrans), 0 = population std (BSCD-FSL).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
def results_summary(paths: tuple[Path, ...], ddof: int, as_json: bool) -> None:
    """Mean ± 95% CI per dataset and aggregation for the runs under PATHS."""
    from fewtrans_board.results.load import find_runs, load_run
    from fewtrans_board.results.summary import summarize

    summaries = [summarize(load_run(p), ddof=ddof) for p in find_runs(list(paths))]
    if as_json:
        echo_json(summaries)
        return
    print_summaries(summaries)
    incomplete = [s["path"] for s in summaries if not s["complete"]]
    if incomplete:
        click.echo(
            "incomplete runs (summaries cover finished shards only): " + ", ".join(incomplete)
        )
