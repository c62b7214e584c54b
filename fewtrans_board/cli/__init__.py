"""The ``fewtrans-board`` command line.

``make_cli(pm)`` builds a fresh click group from a plugin manager: every command,
built-in or third-party, arrives through the ``register_commands`` hook. ``main()`` is the
console-script entry point.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import click

from fewtrans_board import __version__
from fewtrans_board.cli.app import App
from fewtrans_board.errors import DuplicateNameError, FewtransError
from fewtrans_board.plugins import PluginManager, get_plugin_manager


class RootGroup(click.Group):
    """Root group that turns :class:`FewtransError` into a clean message and exit 1."""

    def invoke(self, ctx: click.Context) -> object:
        """Invoke the selected command, reporting user errors without a traceback."""
        try:
            return super().invoke(ctx)
        except FewtransError as exc:
            raise click.ClickException(str(exc)) from exc


def make_cli(pm: PluginManager) -> click.Group:
    """Build the command line for a plugin manager.

    Args:
        pm: a manager from :func:`fewtrans_board.plugins.get_plugin_manager`.

    Returns:
        The root click group with built-in and plugin commands attached.

    Raises:
        DuplicateNameError: two plugins added a command with the same name.
    """

    @click.group(cls=RootGroup, context_settings={"help_option_names": ["-h", "--help"]})
    @click.version_option(__version__, "--version", prog_name="fewtrans-board")
    @click.pass_context
    def cli(ctx: click.Context) -> None:
        """Rigorous few-shot transfer benchmarks: frozen episodes, HPE, CIs, leaderboard.

        Datasets, models, adapters and extra commands come from plugins; run
        'fewtrans-board plugins' to see which are installed.
        """
        ctx.obj = App(pm)

    owners: dict[str, str] = {}
    for impl in pm.hook.register_commands.get_hookimpls():
        source = pm.source_of(impl.plugin_name)
        before = dict(cli.commands)
        others = [p for p in pm.get_plugins() if p is not impl.plugin]
        pm.subset_hook_caller("register_commands", remove_plugins=others)(cli=cli)
        for name, command in cli.commands.items():
            if name in before and before[name] is not command:
                raise DuplicateNameError(
                    f"command {name!r} is registered twice: by plugin {owners[name]} and by "
                    f"plugin {source.describe()}. Rename one of them or uninstall one "
                    "distribution."
                )
            owners.setdefault(name, source.describe())
    return cli


def main(argv: Sequence[str] | None = None) -> None:
    """Console-script entry point: build the plugin manager and run the CLI."""
    try:
        cli = make_cli(get_plugin_manager())
    except FewtransError as exc:
        click.echo(f"Error: {exc}", err=True)
        sys.exit(1)
    cli.main(args=list(argv) if argv is not None else None, prog_name="fewtrans-board")
