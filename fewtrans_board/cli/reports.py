"""How the submission and leaderboard commands print reports and refusals."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NoReturn

import click

from fewtrans_board.cli.groups import cell, echo_json, echo_table

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
                d["dataset"],
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
