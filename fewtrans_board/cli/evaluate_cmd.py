"""``evaluate`` and ``results summary`` commands."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from fewtrans_board.cli.app import App, pass_app
from fewtrans_board.cli.groups import (
    OutputPath,
    adapter_option,
    centre_option,
    config_option,
    device_option,
    echo_json,
    hpe_option,
    isolation_option,
    limit_option,
    manifest_option,
    model_option,
    optional_str,
    root_option,
    run_spec,
    shards_option,
    threads_option,
    weights_option,
)
from fewtrans_board.cli.store_options import LEADERBOARD_ENV
from fewtrans_board.cli.summaries import print_summaries

if TYPE_CHECKING:
    from fewtrans_board.runner.plan import RunPlan
    from fewtrans_board.runner.run import RunReport
    from fewtrans_board.runner.spec import RunSpec

EVALUATE_THREADS_HELP = (
    "Torch CPU threads per worker, any executor (default 1, so every executor and machine "
    "computes the same bits). Part of the run identity."
)


def parse_shard(value: str | None) -> tuple[int, int] | None:
    """Parse ``--shard i/n``."""
    if value is None:
        return None
    index, sep, count = value.partition("/")
    if not sep or not index.isdigit() or not count.isdigit() or int(count) < 1:
        raise click.BadParameter(f"{value!r} is not i/n (e.g. 3/12)", param_hint="--shard")
    if int(index) >= int(count):
        raise click.BadParameter(
            f"shard {index}/{count} does not exist: shards are numbered from 0, so the "
            f"shards of {count} are 0/{count} to {int(count) - 1}/{count}",
            param_hint="--shard",
        )
    return int(index), int(count)


def check_max_memory(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Validate ``--max-memory`` (a size such as 40GiB, or a percentage)."""
    from fewtrans_board.blocks.lockstep.memory import parse_memory
    from fewtrans_board.core.errors import ConfigError

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
@hpe_option(
    "HPE protocol: fewtrans-paper, fewtrans-reference, published or single. Entries are "
    "ranked only with entries of the same protocol."
)
@root_option("Local dataset copy (omit for embedded datasets).")
@click.option(
    "--out",
    type=OutputPath(file_okay=False),
    required=True,
    help="Results folder (created; reused to resume).",
)
@config_option("Override a centre hyperparameter (repeatable).")
@centre_option(
    "Use the centre found by 'fewtrans-board hpe search' (its log travels with the results)."
)
@click.option(
    "--recipe",
    default=None,
    metavar="NAME",
    help="Under --hpe published: the adapter's published recipe to run (default: its only "
    "one; 'fewtrans-board adapters list ADAPTER --options' lists them).",
)
@click.option(
    "--shard",
    "shard",
    default=None,
    metavar="I/N",
    help="Run only shard I of N, numbered from 0 (0/N to N-1/N; N/N is refused).",
)
@shards_option
@limit_option("Evaluate only the first N episodes (such a run cannot be submitted).")
@device_option()
@click.option(
    "--executor",
    type=click.Choice(["inline", "process", "ray"]),
    default="inline",
    show_default=True,
    help="Where shards run.",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Parallel shard workers.",
)
@threads_option(EVALUATE_THREADS_HELP)
@click.option(
    "--no-feature-cache",
    is_flag=True,
    help="Recompute frozen features every time (slow; for checks).",
)
@click.option(
    "--leaderboard",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="Leaderboard store whose frozen manifests the run is checked against before it "
    "starts (default: $FEWTRANS_BOARD_LEADERBOARD, or ./leaderboard if present).",
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
    help="Folder of decoded-image files shared across runs and manifests of a dataset copy "
    "(default: OUT/decoded).",
)
@click.option(
    "--feature-cache-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Folder of frozen features shared across runs of a dataset copy and backbone, e.g. "
    "several adapters and manifests (default: OUT/features).",
)
@isolation_option()
@click.option("--json", "as_json", is_flag=True, help="Print the run report and summary as JSON.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@pass_app
def evaluate_command(
    app: App,
    /,
    out: Path,
    shard: str | None,
    executor: str,
    workers: int,
    leaderboard: Path | None,
    as_json: bool,
    quiet: bool,
    **run_options: Any,
) -> None:
    """Evaluate ADAPTER on MODEL over a manifest with every configuration of the HPE grid.

    Results are written shard by shard (atomically) into OUT; running the same command
    again resumes, skipping finished shards. It warns first when the results could not be
    submitted to any sub-benchmark (limited run, manifest or protocol a sub-benchmark does
    not accept, no held-out centre search).
    """
    from fewtrans_board.cli.protocol_choice import announce, default_store, protocol_for_manifest
    from fewtrans_board.runner.plan import plan_run
    from fewtrans_board.runner.run import run_plan

    choice = protocol_for_manifest(
        run_options["hpe"], run_options["manifest"], default_store(leaderboard)
    )
    run_options["hpe"] = choice.protocol
    spec, shard_index = run_spec_of_options(run_options, shard)
    plan = plan_run(spec, app.registry)  # bad input fails here, in one line
    warnings = submission_warnings(plan, leaderboard)
    if not as_json:
        announce(choice)
        for warning in warnings:
            click.echo(f"Warning: not submittable: {warning}", err=True)
    report = run_plan(
        plan,
        out,
        shard=shard_index,
        executor=executor,
        workers=workers,
        progress=not (quiet or as_json),  # a bar on a terminal, lines with ETA in a log
    )
    print_run_outcome(report, warnings, as_json)


def run_spec_of_options(options: dict[str, Any], shard: str | None) -> tuple[RunSpec, int | None]:
    """The run an ``evaluate`` command line describes, and the one shard it asks for (if any).

    Raises:
        click.BadParameter: ``--shards`` disagrees with ``--shard i/n``.
    """
    shards = options["shards"]
    shard_choice = parse_shard(shard)
    if shard_choice is not None:
        if shards is not None and shards != shard_choice[1]:
            raise click.BadParameter("--shards disagrees with --shard i/n", param_hint="--shards")
        shards = shard_choice[1]
    spec = run_spec(
        options,
        manifest=str(options["manifest"]),
        hpe=options["hpe"],
        limit=options["limit"],
        shards=shards,
        feature_cache=not options["no_feature_cache"],
        threads=options["threads"],
        batching=options["batching"],
        max_memory=options["max_memory"],
        image_cache=optional_str(options["image_cache"]),
        feature_cache_dir=optional_str(options.get("feature_cache_dir")),
        isolation=options.get("isolation") or "auto",
        recipe=options.get("recipe"),
    )
    return spec, shard_choice[0] if shard_choice else None


def print_run_outcome(report: RunReport, warnings: list[str], as_json: bool) -> None:
    """Print what a run did and, once complete, its summary (or all of it as JSON)."""
    from fewtrans_board.leaderboard.sub_benchmarks import statistic_ddof_of_run
    from fewtrans_board.results.load import load_run
    from fewtrans_board.results.summary import summarize

    results = load_run(report.out)
    summary = (
        summarize(results, ddof=statistic_ddof_of_run(results.provenance.manifest.to_json()))
        if results.complete
        else None
    )
    if as_json:
        run = {**report.__dict__, "out": str(report.out)}
        echo_json({"report": run, "summary": summary, "warnings": warnings})
        return
    click.echo(
        f"{report.out}: {len(report.shards_run)} shard(s) run, {len(report.shards_skipped)} "
        f"already done, {report.configurations} configurations per episode, "
        f"{report.seconds:.1f} s"
    )
    if summary is not None:
        print_summaries([summary])
    else:
        click.echo(f"{len(results.shards_present)}/{results.shards_total} shards finished so far.")


def submission_warnings(plan: RunPlan, leaderboard: Path | None) -> list[str]:
    """Why the run's results could not be submitted to any sub-benchmark (see eligibility)."""
    from fewtrans_board.hpe.protocols import hpe_roles
    from fewtrans_board.leaderboard.eligibility import submission_problems
    from fewtrans_board.leaderboard.store import LeaderboardStore

    spec = plan.spec
    folder = leaderboard or Path(os.environ.get(LEADERBOARD_ENV, "leaderboard"))
    store = LeaderboardStore(folder) if (folder / "manifests").is_dir() else None
    return submission_problems(
        Path(spec.manifest),
        plan.manifest,
        spec.hpe,
        roles=hpe_roles(plan.adapter_cls),
        centre=plan.centre.config.to_dict(),
        centre_record=plan.centre.record,
        limit=spec.limit,
        store=store,
    )


@click.group("results")
def results_group() -> None:
    """Inspect evaluation results."""


@results_group.command("summary")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option(
    "--ddof",
    type=click.IntRange(0, 1),
    default=None,
    help="Override the CI's std: 1 = sample (FewTrans), 0 = population (BSCD-FSL). "
    "Default: the ddof of the sub-benchmark the run's manifest belongs to.",
)
@click.option(
    "--spread",
    is_flag=True,
    help="Also the single-task accuracy per shot count: mean ± 1.96 std over tasks, "
    "percentiles, range (FewTrans Fig. 1).",
)
@click.option(
    "--grid",
    is_flag=True,
    help="Also each configuration by its learning-rate position (i,j), their average and "
    "the lr ensemble, per epoch count (FewTrans Table III; the lr ensemble needs the "
    "run's manifest: --manifest, or the store's manifests/ folder).",
)
@click.option(
    "--cost",
    is_flag=True,
    help="Also the total time per 600 tasks (scaled when the run has another number) and "
    "the peak memory (FewTrans Table IX).",
)
@click.option(
    "--manifest",
    "manifests",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A manifest the runs used, for --grid's lr ensemble (repeatable; matched by "
    "content hash).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
def results_summary(
    paths: tuple[Path, ...],
    ddof: int | None,
    spread: bool,
    grid: bool,
    cost: bool,
    manifests: tuple[Path, ...],
    as_json: bool,
) -> None:
    """Mean ± 95% CI per dataset and aggregation for the runs under PATHS.

    --spread, --grid and --cost add the forms FewTrans prints beyond a mean and its CI
    (Fig. 1, Table III, Table IX); with --json they are keys of each run's summary.
    Unfinished runs (shards still missing) are not summarised: each is listed in one line
    with its shards present / total (on stderr with --json, whose list holds the finished
    runs' summaries).
    """
    from fewtrans_board.cli.reports import print_cost, print_grid, print_spread
    from fewtrans_board.leaderboard.sub_benchmarks import statistic_ddof_of_run
    from fewtrans_board.results.grid_table import labels_for, manifest_labels
    from fewtrans_board.results.load import find_runs, load_run, run_progress
    from fewtrans_board.results.spread import fixed_shots
    from fewtrans_board.results.summary import paper_forms, summarize

    if manifests and not grid:
        raise click.BadParameter(
            "a manifest gives --grid's lr ensemble its query labels: add --grid",
            param_hint="--manifest",
        )
    store = Path(os.environ.get(LEADERBOARD_ENV, "leaderboard")) / "manifests"
    summaries, unfinished = [], []
    shots: dict[int, int | None] = {}
    read = {path: manifest_labels(path) for path in manifests}  # each read once, checked now
    for path in find_runs(list(paths)):
        progress = run_progress(path)
        if not progress.finished:
            unfinished.append(progress.unfinished())
            continue
        run = load_run(path)
        run_ddof = (
            statistic_ddof_of_run(run.provenance.manifest.to_json()) if ddof is None else ddof
        )
        summary = summarize(run, ddof=run_ddof)
        if spread or grid or cost:
            labels = None
            if grid:
                own = store / run.provenance.manifest.file
                labels = labels_for(run, [*manifests, own], read)
            forms = paper_forms(run, ddof=run_ddof, query_labels=labels)
            wanted = {"single_task": spread, "grid": grid, "cost": cost}
            summary.update({k: v for k, v in forms.items() if wanted[k]})
        summaries.append(summary)
        shots[id(summary)] = fixed_shots(run)
    if as_json:
        echo_json(summaries)
    elif summaries:
        # The table names each fixed-shot run's shots (BSCD: 5, 20, 50 on one dataset).
        print_summaries([{**s, "shots": shots[id(s)]} for s in summaries])
        if spread:
            print_spread(summaries)
        if grid:
            print_grid(summaries)
        if cost:
            print_cost(summaries)
    for line in unfinished:
        click.echo(f"Warning: {line}" if as_json else line, err=as_json)
