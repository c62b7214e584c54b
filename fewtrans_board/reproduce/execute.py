"""Run a reproduction plan step by step, in this process, with resume and progress lines.

Each step is a ``fewtrans-board`` command line invoked on the same click group the user
called (so plugin loading, error messages and resume are exactly the commands' own); a step
whose output is complete is skipped. Progress goes to stderr one line per step, so it
reaches a log file or a CI job as well as a terminal.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import click

from fewtrans_board.core.errors import FewtransError
from fewtrans_board.reproduce.costs import format_hours
from fewtrans_board.reproduce.plan import PlannedStep, ReproductionPlan

Invoke = Callable[[list[str]], None]


def click_invoker(root: click.Command) -> Invoke:
    """Run ``fewtrans-board ARGS`` on ``root`` in this process; failures raise."""

    def invoke(args: list[str]) -> None:
        try:
            root.main(args=args, prog_name="fewtrans-board", standalone_mode=False)
        except click.ClickException as exc:
            raise FewtransError(exc.format_message()) from exc
        except click.exceptions.Exit as exc:
            if exc.exit_code:
                raise FewtransError(f"exited with status {exc.exit_code}") from exc

    return invoke


def execute_plan(plan: ReproductionPlan, invoke: Invoke, echo: Callable[[str], None]) -> float:
    """Run every step of ``plan`` that is not done; return the seconds spent.

    Raises:
        FewtransError: a step needs a ``--root`` that was not given (before anything
            runs), or a step failed (names the step and its command; the finished steps
            stay, so the same command resumes).
    """
    if plan.missing:
        raise FewtransError(
            f"{plan.target.name} cannot run yet: "
            + "; ".join(plan.missing)
            + " ('reproduce TARGET --plan' lists every step)"
        )
    link_data_dir(plan)
    pending = [s for s in plan.steps if not s.done and s.argv]
    started = time.monotonic()
    for number, step in enumerate(pending, start=1):
        estimate = f", estimated {format_hours(step.estimate.seconds)}" if step.estimate else ""
        echo(f"[{number}/{len(pending)}] {step.kind}: {step.label}{estimate}")
        began = time.monotonic()
        _run_step(step, invoke)
        echo(f"[{number}/{len(pending)}] done in {time.monotonic() - began:.1f} s")
    return time.monotonic() - started


def link_data_dir(plan: ReproductionPlan) -> None:
    """``WORK/data/DATASET`` -> each ``--root``: the ``--data-dir`` of unlearn and tkl."""
    folder = plan.options.work / "data"
    folder.mkdir(parents=True, exist_ok=True)
    for name, root in plan.options.roots.items():
        link = folder / name
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(root.resolve(), target_is_directory=True)


def _run_step(step: PlannedStep, invoke: Invoke) -> None:
    step.out.parent.mkdir(parents=True, exist_ok=True)
    if step.kind == "analysis":
        step.out.mkdir(parents=True, exist_ok=True)
    try:
        invoke(list(step.argv))
    except FewtransError as exc:
        raise FewtransError(
            f"step '{step.label}' failed: {exc}\n  command: fewtrans-board {' '.join(step.argv)}"
        ) from exc
    if step.kind == "analysis":
        (step.out / "done").write_text("", encoding="utf-8")
