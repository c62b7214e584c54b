"""Click helpers shared by command modules."""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    from fewtrans_board.runner.spec import RunSpec

F = TypeVar("F", bound=Callable[..., Any])

DEVICE_HELP = "Torch device (default: cuda if available, else cpu)."
THREADS_HELP = (
    "Torch CPU threads (default: the cores this process may use, CPU quota counted, shared "
    "among workers; 1 on a machine busy with other jobs). CPU results are bit-identical only "
    "for equal values."
)


class DefaultGroup(click.Group):
    """A group that runs a default subcommand when the first argument is not a command.

    ``fewtrans-board datasets 'cifar*' --json`` runs ``datasets list 'cifar*' --json``
    while ``fewtrans-board datasets scan ...`` still reaches ``scan``.
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


def show_progress(wanted: bool) -> bool:
    """Whether to draw progress bars: when wanted and stderr is a terminal.

    Redrawn bars written into a CI log or a redirected file are noise, not progress.
    """
    return wanted and sys.stderr.isatty()


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


def parse_config_options(values: tuple[str, ...]) -> dict[str, Any]:
    """Parse ``key=value`` pairs; values are read as JSON when possible (``1e-3``, ``true``).

    Args:
        values: the ``--config`` values.

    Raises:
        click.BadParameter: a value without ``=`` or without a key.
    """
    config: dict[str, Any] = {}
    for item in values:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{item!r} is not key=value", param_hint="--config")
        try:
            config[key] = json.loads(raw)
        except json.JSONDecodeError:
            config[key] = raw
    return config


def default_device() -> str:
    """``cuda`` when a GPU is visible, else ``cpu``."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def resolve_device(device: str | None) -> str:
    """The ``--device`` value, or :func:`default_device` when none was given."""
    return device or default_device()


def device_problem(device: str) -> str | None:
    """Why torch cannot run on ``device`` here, or ``None`` when it can.

    Args:
        device: a torch device string (``cpu``, ``cuda``, ``cuda:1``, ``mps``).
    """
    if device == "cpu":
        return None  # without importing torch (1-2 s) in a command that may never need it
    import torch

    try:
        parsed = torch.device(device)
    except (RuntimeError, ValueError, TypeError):
        return f"{device!r} is not a torch device; use cpu, cuda, cuda:N or mps"
    if parsed.type == "cpu":
        return None
    if parsed.type == "cuda":
        if not torch.cuda.is_available():
            return "no CUDA device is available on this machine; use --device cpu"
        count = torch.cuda.device_count()
        if parsed.index is not None and parsed.index >= count:
            return f"{device} does not exist: this machine has {count} CUDA device(s), cuda:0.."
        return None
    if parsed.type == "mps":
        mps = getattr(torch.backends, "mps", None)
        return None if mps is not None and mps.is_available() else "MPS is not available here"
    return f"device type {parsed.type!r} is not supported; use cpu, cuda, cuda:N or mps"


class DeviceType(click.types.StringParamType):
    """A torch device that exists on this machine (checked before any work starts)."""

    name = "device"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        """Return the device string, or fail with why it cannot be used."""
        text = str(value).strip()
        problem = device_problem(text) if text else "the device name is empty"
        if problem is not None:
            self.fail(problem, param, ctx)
        return text


DEVICE = DeviceType()


class OutputPath(click.Path):
    """A file or folder a command will create.

    Its nearest existing ancestor must be a writable folder, so a command refuses a path
    it cannot create before it starts, not after hours of work.
    """

    def __init__(self, *, file_okay: bool = True, dir_okay: bool = True) -> None:
        super().__init__(file_okay=file_okay, dir_okay=dir_okay, path_type=Path)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        """Check like ``click.Path``, then check that the path can be created."""
        path = Path(os.fsdecode(super().convert(value, param, ctx)))
        if not str(value).strip():
            self.fail("the path is empty", param, ctx)
        ancestor = path.absolute()
        while not ancestor.exists() and ancestor != ancestor.parent:
            ancestor = ancestor.parent
        if ancestor != path.absolute() and not ancestor.is_dir():
            self.fail(f"cannot create {path}: {ancestor} is a file, not a folder", param, ctx)
        if not os.access(ancestor, os.W_OK):
            self.fail(
                f"cannot write to {ancestor} (read-only or not yours); choose a writable folder",
                param,
                ctx,
            )
        return path


SEED = click.IntRange(0, 2**32 - 1)
"""A random seed (numpy's ``RandomState`` accepts 0 .. 2**32 - 1)."""


class FiniteFloatRange(click.FloatRange):
    """A ``FloatRange`` that also refuses ``nan`` (which compares as inside every range)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        """Convert like ``FloatRange``; fail on ``nan``."""
        number = super().convert(value, param, ctx)
        if math.isnan(number):
            self.fail(f"{value!r} is not a number", param, ctx)
        return number


def threads_option(help_text: str) -> Callable[[F], F]:
    """``--threads N`` (at least 1; ``None`` when not given: see ``fewtrans_board.core.threads``)."""
    return click.option("--threads", type=click.IntRange(min=1), default=None, help=help_text)


def optional_str(path: Path | None) -> str | None:
    """``str(path)``, or ``None`` for an option that was not given."""
    return str(path) if path else None


# Option decorators shared by the commands that describe a run. Each command keeps its own
# help text (passed in), so every ``--help`` reads as before.


def model_option(help_text: str) -> Callable[[F], F]:
    """``--model NAME`` (required)."""
    return click.option("--model", "model", required=True, help=help_text)


def weights_option(help_text: str) -> Callable[[F], F]:
    """``--weights FILE``: a local checkpoint."""
    return click.option(
        "--weights",
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        default=None,
        help=help_text,
    )


def adapter_option(help_text: str) -> Callable[[F], F]:
    """``--adapter NAME`` (required)."""
    return click.option("--adapter", "adapter", required=True, help=help_text)


def manifest_option(help_text: str, *, required: bool = False) -> Callable[[F], F]:
    """``--manifest FILE``: an episode manifest (optional unless ``required``)."""
    # click tells an explicit default=None from no default, so a required one sets none.
    presence: dict[str, Any] = {"required": True} if required else {"default": None}
    return click.option(
        "--manifest", type=click.Path(dir_okay=False, path_type=Path), help=help_text, **presence
    )


def hpe_option(help_text: str) -> Callable[[F], F]:
    """``--hpe NAME``: the HPE protocol, passed as ``hpe`` (formerly ``--protocol``).

    ``--protocol`` names the sampling protocol of ``manifest build``; the old spelling is
    a hidden, warning alias for one release. ``None`` when not given (see ``protocol_choice``).
    """
    return renamed_option(
        "--hpe",
        "hpe",
        old="--protocol",
        default=None,
        help=help_text,
        default_text="the leaderboard protocol of the manifest's sub-benchmark "
        "('fewtrans-board sub-benchmarks'; fewtrans-paper for other manifests)",
    )


def renamed_option(
    flag: str,
    dest: str,
    *,
    old: str,
    default: Any,
    help: str,
    default_text: str | None = None,
    **kwargs: Any,
) -> Callable[[F], F]:
    """An option ``flag`` with a hidden former spelling ``old`` that still works, with a warning.

    Args:
        flag: the option's name.
        dest: the parameter the command receives.
        old: the former spelling (hidden from ``--help``).
        default: the value when neither spelling is given.
        help: help text of ``flag``.
        default_text: how ``--help`` describes the default (default: ``default``).
        kwargs: further ``click.option`` arguments (e.g. ``type``).
    """
    key = f"renamed-option:{dest}"

    def remember_old(ctx: click.Context, _: click.Parameter, value: Any) -> None:
        if value is None:
            return
        click.echo(f"Warning: {old} is now {flag}; {old} goes away in the next release.", err=True)
        # Click handles the options given on the command line first, in their order: if
        # ``flag`` was given before ``old`` it is resolved already, otherwise it comes later.
        if dest in ctx.params and ctx.params[dest] != value:
            raise click.BadParameter(
                f"{flag} {ctx.params[dest]!r} and {old} {value!r} disagree", ctx
            )
        ctx.meta[key] = value

    def resolve(ctx: click.Context, _: click.Parameter, value: Any) -> Any:
        former = ctx.meta.pop(key, None)
        if value is not None and former is not None and value != former:
            raise click.BadParameter(f"{flag} {value!r} and {old} {former!r} disagree", ctx)
        chosen = value if value is not None else former
        return default if chosen is None else chosen

    def decorate(function: F) -> F:
        function = click.option(
            flag,
            dest,
            default=None,
            callback=resolve,
            help=f"{help}  [default: {default if default_text is None else default_text}]",
            **kwargs,
        )(function)
        return click.option(
            old, f"_{dest}_former", hidden=True, expose_value=False, callback=remember_old, **kwargs
        )(function)

    return decorate


def renamed_command(command: click.Command, old_name: str) -> click.Command:
    """A hidden copy of ``command`` under its former name that warns when used (one release).

    Args:
        command: the command under its new name.
        old_name: the former name.
    """
    import copy
    import functools

    alias = copy.copy(command)
    alias.name, alias.hidden = old_name, True
    target = command.callback
    assert target is not None

    @functools.wraps(target)
    def warn_then_run(*args: Any, **kwargs: Any) -> Any:
        click.echo(
            f"Warning: '{old_name}' is now '{command.name}'; '{old_name}' goes away in the next "
            "release.",
            err=True,
        )
        return target(*args, **kwargs)

    alias.callback = warn_then_run
    return alias


def root_option(help_text: str) -> Callable[[F], F]:
    """``--root DIR``: a local dataset copy."""
    return click.option(
        "--root",
        type=click.Path(exists=True, file_okay=False, path_type=Path),
        default=None,
        help=help_text,
    )


def config_option(help_text: str) -> Callable[[F], F]:
    """``--config KEY=VALUE`` (repeatable); parse with :func:`parse_config_options`."""
    return click.option("--config", "config", multiple=True, metavar="KEY=VALUE", help=help_text)


def centre_option(help_text: str) -> Callable[[F], F]:
    """``--centre FILE``: an ``hpe search`` result, passed as ``centre_file``."""
    return click.option(
        "--centre",
        "centre_file",
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        default=None,
        help=help_text,
    )


def limit_option(help_text: str) -> Callable[[F], F]:
    """``--limit N``: only the first N episodes (``None`` when not given)."""
    return click.option("--limit", type=click.IntRange(min=1), default=None, help=help_text)


shards_option = click.option(
    "--shards",
    type=click.IntRange(min=1),
    default=None,
    help="Number of shards (default: one per 50 episodes).",
)


def run_spec(options: dict[str, Any], **fields: Any) -> RunSpec:
    """The ``RunSpec`` of a command's run options, with ``fields`` set on top.

    Reads ``model``, ``adapter``, ``weights``, ``root``, ``config`` (parsed by
    :func:`parse_config_options`), ``centre_file`` (if the command has it) and ``device``
    (resolved by :func:`resolve_device`).
    """
    from fewtrans_board.runner.spec import RunSpec

    return RunSpec(
        model=options["model"],
        adapter=options["adapter"],
        weights=optional_str(options["weights"]),
        root=optional_str(options["root"]),
        config=parse_config_options(options["config"]),
        centre_file=optional_str(options.get("centre_file")),
        device=resolve_device(options["device"]),
        **fields,
    )


def device_option(help_text: str = DEVICE_HELP) -> Callable[[F], F]:
    """``--device NAME`` (checked to exist here); resolve with :func:`resolve_device`."""
    return click.option("--device", type=DEVICE, default=None, help=help_text)


ISOLATION_HELP = (
    "Where plugin code runs: auto = a bubblewrap sandbox where one can be made (else a plain "
    "worker process), and this process when model and adapter are both built in; sandbox, "
    "process, or inline (this process; analyses and debugging). Every mode computes the same "
    "numbers; verification always uses a worker."
)


def isolation_option() -> Callable[[F], F]:
    """``--isolation`` of the commands that run plugin code."""
    return click.option(
        "--isolation",
        type=click.Choice(["auto", "sandbox", "process", "inline"]),
        default="auto",
        show_default=True,
        help=ISOLATION_HELP,
    )
