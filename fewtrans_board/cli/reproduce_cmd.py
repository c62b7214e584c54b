"""``reproduce``: one command per table or figure of the three papers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from fewtrans_board.cli.groups import device_option, echo_json, echo_table
from fewtrans_board.reproduce.costs import DEVICES, format_hours
from fewtrans_board.reproduce.plan import PlanOptions, ReproductionPlan, slug
from fewtrans_board.reproduce.target import Target


def _pairs(values: tuple[str, ...], option: str) -> dict[str, str]:
    pairs = {}
    for value in values:
        key, sep, new = value.partition("=")
        if not sep or not key or not new:
            raise click.BadParameter(f"{value!r} is not NAME=VALUE", param_hint=option)
        pairs[key] = new
    return pairs


def _runs(target: Target) -> int:
    from fewtrans_board.reproduce.plan import manifests_of

    return sum(len(manifests_of(target, row)) for row in target.rows)


def _list_targets(as_json: bool) -> None:
    from fewtrans_board.reproduce.target import all_targets

    targets = all_targets()
    if as_json:
        echo_json([{**t.model_dump(), "runs": _runs(t)} for t in targets])
        return
    echo_table(
        ["target", "paper item", "runs", "shows"],
        [[t.name, t.item, _runs(t), t.shows] for t in targets],
    )


def _print_plan(plan: ReproductionPlan, as_json: bool) -> None:
    from fewtrans_board.reproduce.planner import plan_target

    totals = {
        device: plan_target(plan.target, _for_device(plan.options, device)).seconds
        for device in DEVICES
    }
    if as_json:
        echo_json(
            {
                "target": plan.target.name,
                "steps": [_step_json(s) for s in plan.steps],
                "seconds_left": totals,
                "missing": plan.missing,
            }
        )
        return
    click.echo(f"{plan.target.name}: {plan.target.item}. {plan.target.shows}")
    rows = []
    for step in plan.steps:
        state = "done" if step.done else (step.missing or "to run")
        estimate = format_hours(step.estimate.seconds) if step.estimate else "-"
        rows.append([step.kind, step.label, state, estimate])
    echo_table(["step", "what", "state", plan.options.estimate_device], rows)
    click.echo(
        "Device time left: "
        + ", ".join(f"{device} {format_hours(s)}" for device, s in totals.items())
        + ". Only the H200 figures are measured (benchmarks/method_costs.py); the rest, and "
        "every backbone other than ViT-B/16, are estimates ('reproduce --plan --json' gives "
        "each step's source)."
    )
    click.echo("Commands, in order:")
    for step in plan.steps:
        if step.argv and not step.done:
            click.echo("  fewtrans-board " + " ".join(step.argv))


def _for_device(options: PlanOptions, device: str) -> PlanOptions:
    from dataclasses import replace

    return replace(options, estimate_device=device)


def _step_json(step: Any) -> dict[str, Any]:
    return {
        "kind": step.kind,
        "label": step.label,
        "command": ["fewtrans-board", *step.argv] if step.argv else None,
        "out": str(step.out),
        "done": step.done,
        "missing": step.missing,
        "seconds": step.estimate.seconds if step.estimate else None,
        "source": step.estimate.source if step.estimate else None,
    }


@click.command("reproduce")
@click.argument("target", required=False)
@click.option("--list", "list_targets", is_flag=True, help="List every target and exit.")
@click.option(
    "--plan", "show_plan", is_flag=True, help="Print the steps and device time; run nothing."
)
@click.option(
    "--work",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Folder for manifests, centres, runs and the report (default: reproductions/TARGET).",
)
@click.option(
    "--root",
    "roots",
    multiple=True,
    metavar="DATASET=PATH",
    help="Local copy of a dataset (repeatable).",
)
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=None,
    help="Smoke run: the first N episodes of each manifest (never submittable).",
)
@device_option("Torch device of every step, e.g. cuda (spread over GPUs with --workers).")
@click.option(
    "--executor",
    type=click.Choice(["inline", "process", "ray"]),
    default="inline",
    show_default=True,
    help="Where evaluation shards run.",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Parallel shard workers (one per GPU).",
)
@click.option(
    "--smoke",
    is_flag=True,
    help="Every step on tiny random-init backbones of the same families, one episode of the "
    "first dataset, one epoch, default centres (checks a setup in minutes; never submittable).",
)
@click.option(
    "--skip-search",
    is_flag=True,
    help="Use the adapters' default centres instead of searching them (a smoke; never "
    "submittable).",
)
@click.option(
    "--file",
    "files",
    multiple=True,
    metavar="NAME=PATH",
    help="A local file the target names as {file:NAME}, e.g. a checkpoint no hub serves "
    "(repeatable).",
)
@click.option(
    "--row",
    "rows",
    multiple=True,
    metavar="NAME",
    help="Run only this row (its name in the paper or its adapter; repeatable).",
)
@click.option(
    "--dataset",
    "datasets",
    multiple=True,
    metavar="NAME",
    help="Run only on this dataset (repeatable).",
)
@click.option(
    "--swap-model",
    "swaps",
    multiple=True,
    metavar="MODEL=OTHER",
    help="Run OTHER wherever the target names MODEL (a smoke with small backbones; never submittable).",
)
@click.option(
    "--leaderboard",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="Store whose frozen manifests are used and whose reported/ tables the cells are "
    "compared with (default: $FEWTRANS_BOARD_LEADERBOARD, or ./leaderboard if present).",
)
@click.option(
    "--publish",
    is_flag=True,
    help="Also copy the report into the store's reproductions/ (the site shows it beside the "
    "paper's table); refused for smoke runs.",
)
@click.option(
    "--estimate-for",
    type=click.Choice(DEVICES),
    default="nvidia-h200",
    show_default=True,
    help="Device of the per-step estimates in --plan.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
def reproduce_command(
    target: str | None,
    list_targets: bool,
    show_plan: bool,
    work: Path | None,
    roots: tuple[str, ...],
    smoke: bool,
    skip_search: bool,
    files: tuple[str, ...],
    rows: tuple[str, ...],
    datasets: tuple[str, ...],
    swaps: tuple[str, ...],
    leaderboard: Path | None,
    estimate_for: str,
    publish: bool,
    as_json: bool,
    **run_options: Any,
) -> None:
    """Reproduce TARGET (a paper's table or figure, e.g. fewtrans:table-5) in one command.

    Builds the missing manifests from --root copies, runs the centre searches, every
    evaluation (resuming what is done) and the analyses, then writes a report comparing
    each cell with the paper's: WORK/report.json, report.md and report.html.
    """
    from fewtrans_board.cli.store_options import parse_roots
    from fewtrans_board.reproduce.planner import plan_target
    from fewtrans_board.reproduce.target import get_target

    if list_targets:
        _list_targets(as_json)
        return
    if target is None:
        raise click.UsageError("give a TARGET, or --list to see them")
    chosen = get_target(target)
    leaderboard = leaderboard or _default_store()
    swap_models = _pairs(swaps, "--swap-model")
    if smoke:
        from fewtrans_board.cli.app import App
        from fewtrans_board.reproduce.smoke import smallest_dataset, smoke_swaps

        registry = click.get_current_context().ensure_object(App).registry
        swap_models = {**smoke_swaps(chosen, registry), **swap_models}
        run_options["limit"] = run_options["limit"] or 1
        skip_search = True
        run_options["quick"] = True
        datasets = datasets or (smallest_dataset(chosen, registry),)
    options = PlanOptions(
        work=work or Path("reproductions") / slug(chosen.name.replace(":", "-")),
        roots=parse_roots(roots),
        files={k: Path(v) for k, v in _pairs(files, "--file").items()},
        store=leaderboard,
        swap_models=swap_models,
        estimate_device=estimate_for,
        search=not skip_search,
        rows=rows,
        datasets=datasets,
        **run_options,
    )
    plan = plan_target(chosen, options)
    if show_plan:
        _print_plan(plan, as_json)
        return
    if publish and (leaderboard is None or options.smoke):
        raise click.UsageError(
            "--publish needs a leaderboard store (--leaderboard) and a full run: a smoke "
            "(--limit, --smoke, --skip-search, --swap-model) is never published"
        )
    _run_and_report(plan, leaderboard, as_json, publish)


def _default_store() -> Path | None:
    import os

    from fewtrans_board.cli.store_options import LEADERBOARD_ENV

    folder = Path(os.environ.get(LEADERBOARD_ENV, "leaderboard"))
    return folder if folder.is_dir() else None


def _run_and_report(
    plan: ReproductionPlan, leaderboard: Path | None, as_json: bool, publish: bool
) -> None:
    from fewtrans_board.reproduce.execute import click_invoker, execute_plan
    from fewtrans_board.reproduce.planner import plan_target
    from fewtrans_board.reproduce.render import write_report

    root = click.get_current_context().find_root().command
    seconds = execute_plan(plan, click_invoker(root), lambda line: click.echo(line, err=True))
    finished = plan_target(plan.target, plan.options)
    if leaderboard is None and plan.target.reported:
        click.echo(
            "Warning: no leaderboard store found: the report has no paper cells to compare "
            "with (give --leaderboard STORE holding reported/).",
            err=True,
        )
    reported = leaderboard / "reported" if leaderboard is not None else None
    report = write_report(finished, reported, plan.options.work)
    if publish and leaderboard is not None:
        import shutil

        target = leaderboard / "reproductions" / f"{slug(plan.target.name.replace(':', '-'))}.json"
        target.parent.mkdir(exist_ok=True)
        shutil.copyfile(plan.options.work / "report.json", target)
        click.echo(f"published {target}", err=True)
    if as_json:
        click.echo(json.dumps(report, indent=2, sort_keys=True))
        return
    k, n = report["within_combined_ci"]["k"], report["within_combined_ci"]["n"]
    smoke = " (smoke run: not comparable with the paper)" if report["smoke"] else ""
    click.echo(
        f"{plan.target.name}: {len(finished.runs)} runs in {seconds:.0f} s; {k} of {n} cells "
        f"within the combined 95% CI{smoke}. Report: {plan.options.work / 'report.md'}, "
        f"{plan.options.work / 'report.html'}"
    )
