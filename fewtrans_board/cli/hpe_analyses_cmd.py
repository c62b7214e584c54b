"""``analyze cross-validation`` and ``analyze grid-spacing``: FewTrans Fig. 3 and Fig. 4 (right)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from fewtrans_board.cli.analyze_cmd import AS_JSON, OUT, RUN_MANIFESTS, _finish, _load
from fewtrans_board.cli.app import App, pass_app
from fewtrans_board.cli.groups import (
    OutputPath,
    centre_option,
    config_option,
    device_option,
    echo_table,
    limit_option,
    resolve_device,
    root_option,
    run_spec,
    show_progress,
    threads_option,
    weights_option,
)
from fewtrans_board.cli.summaries import cell

if TYPE_CHECKING:
    from fewtrans_board.results.load import RunResults
    from fewtrans_board.runner.plan import RunPlan

MANIFESTS = click.option(
    "--manifest",
    "manifests",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="The manifest of each run (repeatable; matched by content hash).",
)


def _cell(stats: dict[str, Any] | None) -> str:
    return "n/a" if stats is None or stats["n"] == 0 else cell(stats)


@click.command("cross-validation")
@click.argument("runs", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@RUN_MANIFESTS
@root_option("Local dataset copy (omit for embedded datasets).")
@weights_option("The model checkpoint the runs used, if any.")
@click.option(
    "--folds",
    type=click.IntRange(min=2),
    default=5,
    show_default=True,
    help="l of l-fold cross-validation (an episode whose smallest class has fewer shots uses "
    "one fold per shot: leave-one-out).",
)
@limit_option("Cross-validate only the first N episodes of each run.")
@device_option()
@OUT
@AS_JSON
@pass_app
def analyze_cross_validation(
    app: App,
    runs: tuple[Path, ...],
    manifests: tuple[Path, ...],
    root: Path | None,
    weights: Path | None,
    folds: int,
    limit: int | None,
    device: str | None,
    out: Path,
    as_json: bool,
) -> None:
    """The validation set illusion: cross-validation on the support set vs the average optimum.

    For each episode of the sweep runs under RUNS (or any run with several configurations),
    l-fold cross-validation on the support set over the run's grid chooses a configuration;
    its query accuracy is compared with the average-optimal configuration's (best mean over
    the run's episodes), per shot count with paired 95% CIs (FewTrans Fig. 3). 1-shot
    episodes cannot be cross-validated and are reported as such. The re-fits run in this
    process.
    """
    from fewtrans_board.analysis.cross_validation import (
        cross_validation_report,
        cross_validation_run,
    )

    plans = _cross_validation_plans(
        app, _load(runs), manifests, root=root, weights=weights, device=resolve_device(device)
    )
    results = [cross_validation_run(run, plan, folds, limit) for run, plan in plans]
    data, svg = cross_validation_report(results, folds)
    if not as_json:
        _echo_cross_validation(data["per_shot"])
    lines = [
        f"{r['adapter']} on {r['dataset']}: average-optimal configuration "
        f"#{r['average_optimal']['index']} ({r['average_optimal']['label']})"
        for r in results
    ]
    _finish("cross-validation", data, svg, out, as_json, "\n".join(lines))


def _cross_validation_plans(
    app: App, loaded: list[RunResults], manifests: tuple[Path, ...], **where: Any
) -> list[tuple[RunResults, RunPlan]]:
    """Each run with the plan that re-creates it; every input checked before any fitting.

    Raises:
        FewtransError: a run's manifest was not passed, it has a single configuration, or
            the installed plugins cannot re-create it (names, grid, dataset copy).
    """
    from fewtrans_board.analysis.cross_validation import analysis_plan
    from fewtrans_board.core.errors import FewtransError
    from fewtrans_board.episodes.manifest import Manifest

    by_sha = {Manifest.load(m).sha256: m for m in manifests}
    for run in loaded:
        if run.provenance.manifest.sha256 not in by_sha:
            raise FewtransError(
                f"run {run.path} used manifest {run.provenance.manifest.file}; pass it with "
                "--manifest"
            )
        if run.config_matrix()[1].shape[1] < 2:
            raise FewtransError(
                f"run {run.path} has a single configuration: nothing to choose by "
                "cross-validation (run 'fewtrans-board sweep --grid ...' first)"
            )
    return [
        (run, analysis_plan(run, app.registry, by_sha[run.provenance.manifest.sha256], **where))
        for run in loaded
    ]


def _echo_cross_validation(per_shot: list[dict[str, Any]]) -> None:
    """The per-shot table: both choices' accuracies and their paired difference."""
    headers = [
        *("dataset", "K", "episodes", "scheme"),
        *("cross-validation %", "average-optimal %", "avg-opt - CV (paired)"),
    ]
    echo_table(
        headers,
        [
            [
                row["dataset"],
                row["shots"],
                row["episodes"],
                ", ".join(row["schemes"]),
                _cell(row["cross_validation"])
                if row["cv_possible"]
                else f"impossible ({row['cv_impossible']} episodes)",
                _cell(row["average_optimal"]),
                _cell(row["paired_difference"]),
            ]
            for row in per_shot
        ],
    )


@click.command("grid-spacing")
@click.argument("runs", nargs=-1, type=click.Path(exists=True, path_type=Path))
@click.option(
    "--model",
    default=None,
    help="Evaluate this model at every spacing first (with --adapter and --manifest).",
)
@click.option("--adapter", "adapter", default=None, help="The adapter to evaluate.")
@MANIFESTS
@click.option(
    "--hpe",
    default="fewtrans-paper",
    show_default=True,
    help="The HPE protocol whose learning-rate spacing varies (fewtrans-paper or "
    "fewtrans-reference).",
)
@click.option(
    "--spacing",
    "spacings",
    multiple=True,
    type=click.IntRange(min=2),
    default=(3, 5, 10),
    show_default=True,
    help="Learning-rate grid spacing to evaluate (repeatable): x{1/S, 1, S} per axis.",
)
@config_option("Override a centre hyperparameter (repeatable).")
@centre_option("Use the centre found by 'fewtrans-board hpe search'.")
@weights_option("Local checkpoint for the model (safetensors preferred).")
@root_option("Local dataset copy (omit for embedded datasets).")
@limit_option("Evaluate only the first N episodes of each manifest.")
@device_option()
@threads_option("Torch CPU threads per run (default 1, as evaluate).")
@click.option(
    "--runs-out",
    type=OutputPath(file_okay=False),
    default=Path("runs/grid-spacing"),
    show_default=True,
    help="Where evaluated runs go: RUNS_OUT/<manifest>/x<S> (reused to resume).",
)
@OUT
@AS_JSON
@pass_app
def analyze_grid_spacing(
    app: App, /, runs: tuple[Path, ...], out: Path, as_json: bool, **options: Any
) -> None:
    """HPE accuracy under learning-rate grid spacings 3x, 5x, 10x (FewTrans Fig. 4, right).

    Reads the runs under RUNS (evaluated with --hpe PROTOCOL or PROTOCOL@xS), or first
    evaluates --model/--adapter on each --manifest at every --spacing into --runs-out
    (resumable; spaced protocols are analysis protocols, never leaderboard entries). Reports
    per method and dataset the HPE accuracy at each spacing with its 95% CI and the paired
    difference to the protocol's own spacing.
    """
    from fewtrans_board.analysis.grid_spacing import grid_spacing_report, spacing_of

    loaded = _load(runs) if runs else []
    for run in loaded:  # refused before anything is evaluated
        spacing_of(run)
    if options["model"] is not None or options["adapter"] is not None or options["manifests"]:
        loaded += _load(tuple(_evaluate_spacings(app, as_json, options)))
    elif not loaded:
        raise click.UsageError(
            "give RUNS to read, or --model, --adapter and --manifest to evaluate"
        )
    data, svg = grid_spacing_report(loaded)
    if not as_json:
        spacings = data["spacings"]
        echo_table(
            ["model", "adapter", "dataset", "protocol", *(f"x{s} HPE %" for s in spacings)],
            [
                [
                    g["model"],
                    g["adapter"],
                    g["dataset"],
                    g["protocol"],
                    *(_spacing_cell(g, s) for s in spacings),
                ]
                for g in data["groups"]
            ],
        )
    _finish(
        "grid-spacing",
        data,
        svg,
        out,
        as_json,
        f"{len(data['groups'])} method x dataset group(s); in brackets: paired difference to "
        "the protocol's own spacing",
    )


def _spacing_cell(group: dict[str, Any], spacing: int) -> str:
    row = next((r for r in group["spacings"] if r["spacing"] == spacing), None)
    if row is None:
        return "-"
    difference = row["difference_to_reference"]
    return cell(row["hpe"]) + ("" if difference is None else f" [{cell(difference)}]")


def _evaluate_spacings(app: App, as_json: bool, options: dict[str, Any]) -> list[Path]:
    """Evaluate every (manifest, spacing) into ``--runs-out``; the run folders.

    Every run is resolved (names, protocol, grid, dataset copy) before the first starts.
    """
    from fewtrans_board.hpe.protocols import get_hpe_protocol
    from fewtrans_board.runner.plan import plan_run
    from fewtrans_board.runner.run import run_plan

    missing = [
        flag
        for flag, key in (
            ("--model", "model"),
            ("--adapter", "adapter"),
            ("--manifest", "manifests"),
        )
        if not options[key]
    ]
    if missing:
        raise click.UsageError(f"evaluating needs {', '.join(missing)} as well")
    base = get_hpe_protocol(options["hpe"])
    protocols = [base.spaced(s) for s in dict.fromkeys(options["spacings"])]
    jobs = []
    for manifest in dict.fromkeys(options["manifests"]):
        for protocol in protocols:
            spec = run_spec(
                options,
                manifest=str(manifest),
                hpe=protocol.name,
                limit=options["limit"],
                threads=options["threads"],
            )
            plan = plan_run(spec, app.registry)  # refuses bad names, grids, copies up front
            folder = options["runs_out"] / Path(manifest).stem / f"x{protocol.spacing}"
            jobs.append((plan, folder))
    for plan, folder in jobs:
        run_plan(plan, folder, progress=show_progress(not as_json))
        if not as_json:
            click.echo(f"{folder}: {plan.spec.hpe} evaluated")
    return [folder for _, folder in jobs]
