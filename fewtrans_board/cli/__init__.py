"""The ``fewtrans-board`` command line.

``make_cli(pm)`` builds a fresh click group from a plugin manager: every command,
built-in or third-party, arrives through the ``register_commands`` hook. Third-party
plugins add commands to a staging group of their own, so they can add new commands but
never reach, replace, wrap or remove a built-in one. ``main()`` is the console-script
entry point; the commands that score or publish results (:data:`CORE_ONLY_COMMANDS`) run
without loading third-party plugins at all.
"""

from __future__ import annotations

import inspect
import os
import sys
import traceback
from collections.abc import Iterator, Sequence
from pathlib import Path

import click

from fewtrans_board.cli.app import App
from fewtrans_board.core.errors import DuplicateNameError, FewtransError, PluginError
from fewtrans_board.core.plugin_calls import PluginCallError
from fewtrans_board.core.version import __version__
from fewtrans_board.registry.manager import PluginManager, get_plugin_manager

CORE_ONLY_COMMANDS = frozenset(
    {"submission", "leaderboard", "site", "compare", "results", "sub-benchmarks", "benchmarks"}
)
"""Command groups that run with built-in plugins only.

They validate, verify, store, summarise or publish results: the process that scores a
submission must never import the code it scores (verification runs plugins in a separate
worker process), so an import-time monkeypatch of a plugin cannot change a verdict.
"""

PACKAGE_DIR = Path(__file__).resolve().parents[1]


DEBUG_HINT = "run 'fewtrans-board --debug ...' for the full traceback"


class RootGroup(click.Group):
    """Root group that answers every failure with a short ``Error:`` message and exit 1.

    A :class:`FewtransError` is a message for users and is printed as it is. Any other
    exception is a bug (in fewtrans-board or a plugin): it is reported in one line naming
    the command and the cause. ``--debug`` adds the full traceback to both.
    """

    def invoke(self, ctx: click.Context) -> object:
        """Invoke the selected command, reporting failures without a traceback."""
        debug = bool(ctx.params.get("debug"))
        try:
            return super().invoke(ctx)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except BrokenPipeError:
            raise  # output piped into e.g. 'head': click exits quietly
        except FewtransError as exc:
            if debug:
                traceback.print_exception(exc, file=sys.stderr)
            message = str(exc)
            if isinstance(exc, PluginCallError) and not debug:
                message += f"\n({DEBUG_HINT})"
            raise click.ClickException(message) from exc
        except Exception as exc:
            if debug:
                raise
            command = _failing_command(exc) or ctx.command_path
            raise click.ClickException(
                f"'{command}' failed unexpectedly: {type(exc).__name__}: "
                f"{_one_line(exc)} ({DEBUG_HINT}, and please report it)"
            ) from exc


def _one_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else "(no message)"


def _failing_command(exc: BaseException) -> str | None:
    """Command path of the innermost click context on the traceback (the failing command)."""
    found = None
    for frame, _ in traceback.walk_tb(exc.__traceback__):
        candidate = frame.f_locals.get("ctx")
        if isinstance(candidate, click.Context):
            found = candidate.command_path
    return found


def _walk(command: click.Command, path: str = "") -> Iterator[tuple[str, click.Command]]:
    name = f"{path} {command.name}".strip()
    yield name, command
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            yield from _walk(sub, name)


def _check_builtin_callbacks(commands: dict[str, click.Command]) -> None:
    """Refuse built-in commands whose callbacks were replaced (e.g. monkeypatched on import)."""
    for command in commands.values():
        for path, sub in _walk(command):
            callback = sub.callback
            if callback is None:
                continue
            target = inspect.unwrap(callback)
            try:
                source = Path(inspect.getfile(target)).resolve()
            except TypeError:
                source = None
            if source is None or not source.is_relative_to(PACKAGE_DIR):
                raise PluginError(
                    f"the built-in command '{path}' runs {getattr(target, '__qualname__', target)} "
                    f"from {source}, not fewtrans-board's own code: a plugin replaced or wrapped "
                    f"it. Uninstall the plugin, or exclude it with FEWTRANS_BOARD_LOAD_PLUGINS."
                )


def make_cli(pm: PluginManager) -> click.Group:
    """Build the command line for a plugin manager.

    Args:
        pm: a manager from :func:`fewtrans_board.registry.manager.get_plugin_manager`.

    Returns:
        The root click group with built-in and plugin commands attached.

    Raises:
        DuplicateNameError: two plugins added a command with the same name, or a plugin
            tried to take a built-in command's name.
        PluginError: a built-in command's code was replaced by a plugin.
    """

    @click.group(cls=RootGroup, context_settings={"help_option_names": ["-h", "--help"]})
    @click.version_option(__version__, "--version", prog_name="fewtrans-board")
    @click.option(
        "--debug", is_flag=True, help="Print full tracebacks of errors (for bug reports)."
    )
    @click.pass_context
    def cli(ctx: click.Context, debug: bool) -> None:
        """Rigorous few-shot transfer benchmarks: frozen episodes, HPE, CIs, leaderboard.

        Datasets, models, adapters and extra commands come from plugins; run
        'fewtrans-board plugins' to see which are installed.
        """
        ctx.obj = App(pm, debug=debug)
        for warning in pm.warnings:
            click.echo(f"Warning: {warning}", err=True)

    owners: dict[str, str] = {}
    builtin_commands: dict[str, click.Command] = {}
    impls = pm.hook.register_commands.get_hookimpls()
    builtin = [i for i in impls if pm.source_of(i.plugin_name).builtin]
    for impl in [*builtin, *(i for i in impls if i not in builtin)]:
        source = pm.source_of(impl.plugin_name)
        # Each plugin fills a staging group of its own; only new names are copied over.
        staging = cli if source.builtin else click.Group(name="staging")
        before = dict(cli.commands)
        others = [p for p in pm.get_plugins() if p is not impl.plugin]
        try:
            pm.subset_hook_caller("register_commands", remove_plugins=others)(cli=staging)
        except FewtransError:
            raise
        except Exception as exc:
            raise PluginError(
                f"plugin {source.describe()} failed to register its commands: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        added = {n: c for n, c in staging.commands.items() if before.get(n) is not c}
        for name, command in added.items():
            if name in before:
                raise DuplicateNameError(
                    f"command {name!r} is registered twice: by plugin {owners[name]} and by "
                    f"plugin {source.describe()}. Rename one of them or uninstall one "
                    "distribution."
                )
            cli.add_command(command, name)
            owners[name] = source.describe()
        if source.builtin:
            builtin_commands = dict(cli.commands)
    _check_builtin_callbacks({n: c for n, c in cli.commands.items() if n in builtin_commands})
    return cli


def needs_plugins(argv: Sequence[str]) -> bool:
    """Whether the command line names a command that may load third-party plugins."""
    return _command(argv) not in CORE_ONLY_COMMANDS


ISOLATED_ENV = "FEWTRANS_BOARD_JUDGE_ISOLATED"


def run_isolated(args: Sequence[str]) -> None:
    """Re-run a judging command as ``python -I -m fewtrans_board``, unless it already is.

    Isolated mode ignores the working folder, ``PYTHONPATH`` and the user site, so no
    module a plugin worker (or a pull request) could place there is ever imported by the
    process that judges. Only the console script's own entry does this; a call of
    :func:`main` from Python runs in place.
    """
    if sys.flags.isolated or os.environ.get(ISOLATED_ENV) == "0":
        return
    os.execv(sys.executable, [sys.executable, "-I", "-m", "fewtrans_board", *args])


def main(argv: Sequence[str] | None = None) -> None:
    """Console-script entry point: build the plugin manager and run the CLI."""
    args = list(argv) if argv is not None else sys.argv[1:]
    command = _command(args)
    if argv is None and command in CORE_ONLY_COMMANDS:
        run_isolated(args)
    debug = "--debug" in (args[: args.index(command)] if command else args)
    try:
        cli = make_cli(get_plugin_manager(entry_points=needs_plugins(args)))
    except FewtransError as exc:
        if debug:
            traceback.print_exception(exc, file=sys.stderr)
        click.echo(f"Error: {exc}", err=True)
        sys.exit(1)
    cli.main(args=args, prog_name="fewtrans-board")


def _command(args: Sequence[str]) -> str | None:
    return next((arg for arg in args if not arg.startswith("-")), None)
