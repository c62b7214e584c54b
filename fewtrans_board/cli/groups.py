"""Click helpers shared by command modules."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import click


class DefaultGroup(click.Group):
    """A group that runs a default subcommand when the first argument is not a command.

    ``fewtrans-board datasets 'cifar*' --json`` runs ``datasets list 'cifar*' --json``
    while ``fewtrans-board datasets check ...`` still reaches ``check``.
    """

    def __init__(self, *args: Any, default_command: str = "list", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.default_command = default_command

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        """Insert the default subcommand when no known subcommand is given."""
        help_flags = set(ctx.help_option_names)
        if not args or (args[0] not in self.commands and args[0] not in help_flags):
            args = [self.default_command, *args]
        return super().parse_args(ctx, args)


def echo_json(data: Any) -> None:
    """Print ``data`` as indented, key-sorted JSON for scripts."""
    click.echo(json.dumps(data, indent=2, sort_keys=True, default=str))


def echo_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Print a plain-text table with left-aligned columns."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for i, row in enumerate(cells):
        click.echo("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
        if i == 0:
            click.echo("  ".join("-" * w for w in widths))
