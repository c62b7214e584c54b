"""Options shared by the commands that read a leaderboard store and verify submissions."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from fewtrans_board.cli.groups import SEED

if TYPE_CHECKING:
    from fewtrans_board.leaderboard.intake import Verification

F = TypeVar("F", bound=Callable[..., Any])

LEADERBOARD_ENV = "FEWTRANS_BOARD_LEADERBOARD"

leaderboard_option = click.option(
    "--leaderboard",
    "leaderboard",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=lambda: os.environ.get(LEADERBOARD_ENV, "leaderboard"),
    show_default="leaderboard (or $FEWTRANS_BOARD_LEADERBOARD)",
    help="The leaderboard store folder.",
)


def _executable(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is not None and not os.access(value, os.X_OK):
        raise click.BadParameter(f"{value} is not an executable Python interpreter")
    return value


worker_python_option = click.option(
    "--worker-python",
    type=click.Path(exists=True, dir_okay=False),
    callback=_executable,
    default=None,
    metavar="PYTHON",
    help="Interpreter of the plugin worker, e.g. a virtualenv holding the submission's pinned "
    "plugins (default: this one).",
)


def parse_roots(values: tuple[str, ...]) -> dict[str, Path]:
    """``--root DATASET=PATH`` values: built-in datasets (verification reads no plugin) and folders."""
    from fewtrans_board.errors import UnknownNameError
    from fewtrans_board.plugins import get_plugin_manager
    from fewtrans_board.registry import Registry

    roots: dict[str, Path] = {}
    if not values:
        return roots
    datasets = Registry.from_plugin_manager(get_plugin_manager(entry_points=False)).datasets
    for value in values:
        dataset, sep, path = value.partition("=")
        if not sep or not dataset or not path:
            raise click.BadParameter(f"{value!r} is not DATASET=PATH", param_hint="--root")
        try:
            datasets.get(dataset)
        except UnknownNameError as exc:
            raise click.BadParameter(str(exc), param_hint="--root") from exc
        if not Path(path).is_dir():
            raise click.BadParameter(f"{path} is not a folder", param_hint="--root")
        roots[dataset] = Path(path)
    return roots


def verification_from(
    sample: int, seed: int, roots: tuple[str, ...], worker_python: str | None
) -> Verification:
    """The verification options of ``leaderboard add``, ``check`` and ``check-pr``."""
    from fewtrans_board.leaderboard.intake import Verification

    return Verification(sample, seed, parse_roots(roots), worker_python)


def verification_options(verify_help: str, root_help: str) -> Callable[[F], F]:
    """``--verify``, ``--seed``, ``--root``, ``--worker-python`` and ``--json`` options.

    Args:
        verify_help: help text of ``--verify``.
        root_help: help text of ``--root``.

    Returns:
        A decorator adding the options, in that order.
    """
    options = [
        click.option(
            "--verify",
            "verify_sample",
            type=click.IntRange(0),
            default=0,
            show_default=True,
            help=verify_help,
        ),
        click.option(
            "--seed",
            type=SEED,
            default=0,
            show_default=True,
            help="Seed choosing the verified episodes.",
        ),
        click.option("--root", "roots", multiple=True, metavar="DATASET=PATH", help=root_help),
        worker_python_option,
        click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts."),
    ]

    def decorate(command: F) -> F:
        for option in reversed(options):
            command = option(command)
        return command

    return decorate
