"""Options shared by the commands that read a pull request's checkout or a blob location."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import click

from fewtrans_board.cli.groups import F

store_folder_option = click.option(
    "--store",
    "store_folder",
    default="leaderboard",
    show_default=True,
    help="The leaderboard folder, relative to --repo.",
)


def pull_request_options(command: F) -> F:
    """``--repo``, ``--base``, ``--head`` and ``--store`` of the pull-request commands."""
    options = [
        click.option(
            "--repo",
            type=click.Path(exists=True, file_okay=False, path_type=Path),
            default=Path("."),
            show_default=True,
            help="Checkout of the pull request (its data is read, its code never run).",
        ),
        click.option("--base", required=True, help="Git ref of the base branch, e.g. origin/main."),
        click.option(
            "--head", default="HEAD", show_default=True, help="Git ref of the pull request."
        ),
        store_folder_option,
    ]
    for option in reversed(options):
        command = option(command)
    return command


def check_store_folder(repo: Path, store_folder: str) -> None:
    """``--store`` names a folder inside ``--repo``.

    Raises:
        click.BadParameter: it does not.
    """
    folder = (repo / store_folder).resolve()
    if not folder.is_relative_to(repo.resolve()) or not folder.is_dir():
        raise click.BadParameter(
            f"{store_folder!r} is not a folder inside {repo}", param_hint="--store"
        )


class BlobLocation(click.types.StringParamType):
    """A blob location: a folder, or a URL of a scheme fsspec knows (``file://``, ``s3://`` ...).

    Args:
        exists: a folder must exist (a location to read from).
    """

    name = "FOLDER-OR-URL"

    def __init__(self, exists: bool) -> None:
        self.exists = exists

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        """The location as given (a folder made absolute), checked."""
        text = str(value).strip()
        if not text:
            self.fail("the location is empty", param, ctx)
        if "://" in text:
            import fsspec

            scheme = text.split("://", 1)[0]
            if not re.fullmatch(r"[a-z][a-z0-9+.-]*", scheme):
                self.fail(f"{text}: {scheme!r} is not a URL scheme", param, ctx)
            try:
                fsspec.get_filesystem_class(scheme)
            except ValueError:
                self.fail(f"{text}: no file system handles {scheme}://", param, ctx)
            except ImportError as exc:
                self.fail(
                    f"{text}: {scheme}:// needs a package that is missing ({exc})", param, ctx
                )
            return text
        path = Path(text).absolute()
        if path.exists() and not path.is_dir():
            self.fail(f"{text} is a file, not a folder", param, ctx)
        if self.exists and not path.is_dir():
            self.fail(f"{text} is not a folder", param, ctx)
        return str(path)
