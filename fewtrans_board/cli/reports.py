"""How commands print reports and refusals.

The submission and leaderboard commands' reports and refusals, and the paper forms
``results summary`` adds (``--spread``, ``--grid``, ``--cost``: FewTrans Fig. 1, Tables
III and IX).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NoReturn

import click

from fewtrans_board.cli.groups import echo_json, echo_table
from fewtrans_board.cli.summaries import cell, shots_label

if TYPE_CHECKING:
    from fewtrans_board.core.errors import SubmissionError


def fail(error: SubmissionError, as_json: bool) -> NoReturn:
    """Refuse with ``error``: its JSON and exit status 1, or raise it.

    The JSON is ``{"ok": false, "code", "error", "report"}``; raised, the root group prints
    it as ``Error: <message>``.
    """
    if as_json:
        echo_json(
            {
                "ok": False,
                "code": error.code,
                "error": str(error),
                "report": getattr(error, "report", None),
            }
        )
        sys.exit(1)
    # The root group reports it as "Error: <message>" with exit status 1.
    raise error


@contextmanager
def refusals(as_json: bool) -> Iterator[None]:
    """Answer a ``SubmissionError`` raised inside the block with :func:`fail`."""
    from fewtrans_board.core.errors import SubmissionError

    try:
        yield
    except SubmissionError as exc:
        fail(exc, as_json)


def print_validation(report: dict[str, Any], as_json: bool) -> None:
    """Print a validation report (the checks passed, a table of runs), or its JSON."""
    if as_json:
        echo_json({"ok": True, **report})
        return
    sub = report["submission"]
    click.echo(
        f"valid: {sub['id']} ({sub['adapter']} on {sub['model']}, benchmark {sub['benchmark']})"
    )
    for check in report["checks"]:
        click.echo(f"  ok  {check}")
    echo_table(
        ["dataset", "episodes", "configs", "HPE % (95% CI)"],
        [
            [r["dataset"], r["episodes"], r["configurations"], cell(r["hpe"])]
            for r in report["runs"]
        ],
    )


def print_verification(report: dict[str, Any], as_json: bool) -> None:
    """Print a verification report (per dataset: re-run against claimed), or its JSON."""
    if as_json:
        echo_json({"ok": True, **report})
        return
    click.echo(
        f"verified {report['submission']} (seed {report['seed'][:16]}..., "
        f"{report['seed_source']}; {report['isolation']} worker)"
    )
    headers = [
        *("dataset", "mode", "re-run", "claimed", "re-run acc"),
        *("claimed - re-run (95% bound)", "catches 5% forgery"),
    ]
    echo_table(
        headers,
        [
            [
                shots_label(d["dataset"], d.get("shots")),
                d["mode"],
                f"{d['rerun_episodes']} of {d['episodes']}",
                f"{d['claimed_on_rerun_episodes']:.2f}",
                f"{d['rerun_accuracy']:.2f}",
                "identical"
                if d["mode"] == "exact"
                else f"{d['difference']:+.2f} (<= {d['difference_bound']:+.2f})"
                if d["difference_bound"] is not None
                else f"{d['difference']:+.2f}",
                f"{d['catch_probability']:.3f}",
            ]
            for d in report["datasets"]
        ],
    )
    click.echo(f"reproduce with: {report['reproduce']}")


def _run_label(s: dict[str, Any]) -> str:
    return f"{s['model']} / {s['adapter']} on {s['dataset']}"


def _number(value: float | None, spec: str = ".2f") -> str:
    return "n/a" if value is None or value != value else format(value, spec)


def print_spread(summaries: list[dict[str, Any]]) -> None:
    """The single-task spread per shot count of each run (FewTrans Fig. 1).

    One row per run and shot count: tasks, mean, the single-task 95% interval
    (mean ± 1.96 std over tasks), the empirical 2.5-97.5 percentiles, the range, and the
    CI of the mean for contrast.
    """
    rows = []
    for s in summaries:
        for g in s.get("single_task") or []:
            rows.append(
                [
                    *(s["model"], s["adapter"], s["dataset"]),
                    "varied" if g["shots"] is None else g["shots"],
                    g["tasks"],
                    _number(g["mean"]),
                    _number(g["std"]),
                    f"[{_number(g['low'])}, {_number(g['high'])}]",
                    f"[{_number(g['p2_5'])}, {_number(g['p97_5'])}]",
                    f"[{_number(g['min'])}, {_number(g['max'])}]",
                    f"± {_number(g['ci95'])}",
                ]
            )
    click.echo("\nsingle-task accuracy per shot count (FewTrans Fig. 1; HPE headline, %):")
    echo_table(
        [
            *("model", "adapter", "dataset", "shots/class", "tasks", "mean", "std"),
            *("one task: mean ± 1.96 std", "2.5-97.5 percentile", "min-max", "CI of the mean"),
        ],
        rows,
    )


def print_grid(summaries: list[dict[str, Any]]) -> None:
    """Each configuration, their average and the lr ensemble per run (FewTrans Table III)."""
    for s in summaries:
        grid = s.get("grid")
        if not grid:
            click.echo(f"\n{_run_label(s)}: one configuration, no grid (FewTrans Table III)")
            continue
        axes = " x ".join(
            f"{a['field']} {[float(v) if isinstance(v, int | float) else v for v in a['values']]}"
            for a in grid["lr_axes"]
        )
        letters = ",".join("ijklmn"[: len(grid["lr_axes"])])
        click.echo(
            f"\n{_run_label(s)} ({s['hpe_protocol']}, {grid['aggregation']}; FewTrans Table III): "
            + (f"({letters}) = position on {axes}" if axes else "no learning-rate axis varies")
        )
        labels = [c["label"] for c in grid["groups"][0]["cells"]]
        rows = []
        for group in grid["groups"]:
            values = ", ".join(f"{k}={v}" for k, v in group["values"].items()) or "all"
            rows.append(
                [
                    values,
                    *(_number(c["mean"]) for c in group["cells"]),
                    _number(group["average"]),
                    _number(group["lr_ensemble"]),
                    _number(grid["hpe"]),
                ]
            )
        echo_table(["configurations", *labels, "avg", "lr ensemble", "lr+epoch ensemble"], rows)
        if grid.get("note"):
            click.echo(f"lr ensemble: {grid['note']}")


def print_cost(summaries: list[dict[str, Any]]) -> None:
    """Total time per 600 tasks and peak memory of each run (FewTrans Table IX)."""
    from fewtrans_board.results.cost import duration

    rows = []
    for s in summaries:
        cost, peak = s["cost"], s.get("peak_memory")
        reported = duration(cost["seconds_reported"])
        if cost["scaled"]:
            reported += f" (scaled from {cost['tasks']} tasks)"
        memory = (
            f"{peak['mib']:.1f} MiB ({peak['measure']} on {peak.get('device') or '?'})"
            if peak
            else "not recorded"
        )
        rows.append(
            [
                *(s["model"], s["adapter"], s["dataset"], s["configurations"], cost["tasks"]),
                duration(cost["seconds"]),
                duration(cost["seconds_per_task"]),
                reported,
                memory,
            ]
        )
    click.echo(
        "\ntime and peak memory (FewTrans Table IX; fit and predict seconds, all configurations):"
    )
    echo_table(
        [
            *("model", "adapter", "dataset", "configs", "tasks", "total time", "per task"),
            *("total time (600 tasks)", "peak memory"),
        ],
        rows,
    )
