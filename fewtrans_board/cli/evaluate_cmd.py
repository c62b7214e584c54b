"""``evaluate`` and ``results summary`` commands."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from fewtrans_board.cli.app import App, pass_app
from fewtrans_board.cli.groups import echo_json, echo_table


def parse_config_options(values: tuple[str, ...]) -> dict[str, Any]:
    """Parse ``key=value`` pairs; values are read as JSON when possible (``1e-3``, ``true``)."""
    config: dict[str, Any] = {}
    for item in values:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{item!r} is not key=value", param_hint="--config")
        try:
            config[key] = json.loads(raw)
        except json.JSONDecodeError:
            config[key] = raw
    return config


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


def default_device() -> str:
    """``cuda`` when a GPU is visible, else ``cpu``."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def print_summaries(summaries: list[dict[str, Any]]) -> None:
    """Print one row per run: headline HPE accuracy, vote, oracle, mean single config."""

    def cell(stats: dict[str, Any]) -> str:
        return f"{stats['mean']:.2f} ± {stats['ci95']:.2f}"

    rows = []
    for s in summaries:
        a = s["aggregations"]
        rows.append(
            [
                s["model"],
                s["adapter"],
                s["dataset"],
                s["configurations"],
                f"{cell(a['hpe'])} ({s['headline']})",
                cell(a["vote"]),
                cell(a["oracle"]),
                cell(a["mean-single"]),
                f"{s['hpe_penalty']:.2f}",
                s["episodes"],
            ]
        )
    echo_table(
        [
            "model",
            "adapter",
            "dataset",
            "configs",
            "HPE % (95% CI)",
            "vote",
            "oracle",
            "mean single",
            "penalty",
            "episodes",
        ],
        rows,
    )


@click.command("evaluate")
@click.option(
    "--model", "model", required=True, help="Model name, e.g. demo-cnn.digits or timm:ARCH."
)
@click.option(
    "--weights",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Local checkpoint for the model (safetensors preferred).",
)
@click.option("--adapter", "adapter", required=True, help="Adapter name, e.g. linear-probe.")
@click.option(
    "--manifest",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="Frozen episode manifest (Parquet).",
)
@click.option(
    "--protocol",
    "hpe",
    default="fewtrans-paper",
    show_default=True,
    help="HPE protocol: fewtrans-paper, fewtrans-reference or single.",
)
@click.option(
    "--root",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Local dataset copy (omit for embedded datasets).",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Results folder (created; reused to resume).",
)
@click.option(
    "--config",
    "config",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override a centre hyperparameter (repeatable).",
)
@click.option(
    "--centre",
    "centre_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Use the centre found by 'fewtrans-board hpe search' (its log travels with the results).",
)
@click.option("--shard", "shard", default=None, metavar="I/N", help="Run only shard I of N.")
@click.option(
    "--shards", type=int, default=None, help="Number of shards (default: one per 50 episodes)."
)
@click.option("--limit", type=int, default=None, help="Evaluate only the first N episodes.")
@click.option("--device", default=None, help="Torch device (default: cuda if available, else cpu).")
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
        weights=str(weights) if weights else None,
        root=str(root) if root else None,
        config=parse_config_options(config),
        centre_file=str(centre_file) if centre_file else None,
        limit=limit,
        shards=shards,
        device=device or default_device(),
        feature_cache=not no_feature_cache,
        threads=threads,
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
