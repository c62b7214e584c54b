"""A plugin adding a ``hello`` command."""

import click

from fewtrans_board import hookimpl


@hookimpl
def register_commands(cli: click.Group) -> None:
    """Add ``hello``."""

    @cli.command()
    @click.option("--name", default="world")
    def hello(name: str) -> None:
        """Say hello."""
        click.echo(f"hello {name}")
