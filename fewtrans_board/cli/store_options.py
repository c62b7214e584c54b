"""Options shared by the commands that read a leaderboard store and verify submissions."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from fewtrans_board.cli.groups import DEVICE, F, FiniteFloatRange

if TYPE_CHECKING:
    from fewtrans_board.leaderboard.intake import Verification

LEADERBOARD_ENV = "FEWTRANS_BOARD_LEADERBOARD"

leaderboard_option = click.option(
    "--leaderboard",
    "leaderboard",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=lambda: os.environ.get(LEADERBOARD_ENV, "leaderboard"),
    show_default="leaderboard (or $FEWTRANS_BOARD_LEADERBOARD)",
    help="The leaderboard store folder.",
)

weights_dir_option = click.option(
    "--weights-dir",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    metavar="DIR",
    help="The runners' weights registry: each entry re-runs with DIR/<sha256>.safetensors "
    "(the checkpoint digest its submission.toml or its runs record) or "
    "DIR/<model>.safetensors (.pt/.pth too) where DIR holds one, else with --weights. An "
    "unlearned CLIP's checkpoint keeps its unlearning record beside it (DIR/<sha256>.json).",
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
    from fewtrans_board.core.errors import UnknownNameError
    from fewtrans_board.registry.lookup import Registry
    from fewtrans_board.registry.manager import get_plugin_manager

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


def _checkpoint(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A file that starts like a checkpoint (read in the worker, never here)."""
    if value is None:
        return None
    with open(value, "rb") as handle:
        head = handle.read(8)
        size = int.from_bytes(head, "little") if len(head) == 8 else 0
        opening = handle.read(1) if size else b""
    safetensors = 0 < size < (100 << 20) and opening == b"{"
    torch_file = head.startswith((b"PK\x03\x04", b"\x80"))  # torch.save: zip, or old pickle
    if not (safetensors or torch_file):
        raise click.BadParameter(
            f"{value} is not a checkpoint (safetensors, or a file written by torch.save)"
        )
    return value


def _seed(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is not None and (
        not 16 <= len(value) <= 128 or any(c not in "0123456789abcdefABCDEF" for c in value)
    ):
        raise click.BadParameter(
            f"{value!r} is not a verification seed (16 to 128 hex digits, as a report prints it)"
        )
    return value


def _secret(ctx: click.Context, param: click.Parameter, value: str | None) -> bytes | None:
    if value is None:
        return None
    secret = os.environ.get(value)
    if not secret:
        raise click.BadParameter(f"${value} is not set or empty", param_hint="--secret-env")
    return secret.encode()


def verification_from(options: dict[str, Any]) -> Verification:
    """The :class:`~fewtrans_board.leaderboard.intake.Verification` the options ask for."""
    from fewtrans_board.leaderboard.intake import Verification
    from fewtrans_board.leaderboard.verification import VerificationOptions

    enabled = options.pop("verify_enabled", True)
    settings = VerificationOptions(
        sample=options.pop("sample", None),
        seed=options.pop("verification_seed", None),
        secret=options.pop("secret", None),
        budget_s=options.pop("budget", None) or VerificationOptions.budget_s,
        roots=parse_roots(options.pop("roots", ())),
        weights=options.pop("weights", None),
        device=options.pop("device", None) or "cpu",
        threads=options.pop("threads", None),
        python=options.pop("worker_python", None),
        plugin_dirs=tuple(options.pop("plugin_dirs", ())),
        unsandboxed=bool(options.pop("unsandboxed", False)),
        progress=_estimate_printer(),
    )
    return Verification(enabled, settings)


def _estimate_printer() -> Callable[[str], None] | None:
    """Print each dataset's cost estimate and progress lines on stderr.

    Not with ``--json``: its readers parse the output.
    """
    context = click.get_current_context(silent=True)
    if context is not None and context.params.get("as_json"):
        return None
    return lambda line: click.echo(line, err=True)


def _switch_options(switch: str | None, switch_help: str) -> list[Callable[[F], F]]:
    """``--verify`` (off unless given), ``--unsafe-no-verify`` (on unless given) or none."""
    if switch == "--verify":
        return [click.option("--verify", "verify_enabled", is_flag=True, help=switch_help)]
    if switch == "--unsafe-no-verify":
        return [
            click.option(
                "--unsafe-no-verify",
                "verify_enabled",
                flag_value=False,
                default=True,
                help=switch_help,
            )
        ]
    return []


def _sampling_options() -> list[Callable[[F], F]]:
    """Which episodes are re-run: the sample size, the seed, the secret, the budget."""
    return [
        click.option(
            "--sample",
            type=click.IntRange(1),
            default=None,
            help="Episodes re-run per dataset (default: every episode when the claimed cost "
            "fits --budget, else enough to catch a forgery of 5% of the episodes with "
            "probability 0.99; the report prints what the sample catches).",
        ),
        click.option(
            "--seed",
            "verification_seed",
            default=None,
            callback=_seed,
            metavar="HEX",
            help="Reproduce a verification: the seed its report prints (default: fresh "
            "randomness drawn after the bundle is frozen).",
        ),
        click.option(
            "--secret-env",
            "secret",
            default=None,
            callback=_secret,
            metavar="NAME",
            help="Environment variable holding a maintainers' secret; the seed becomes its "
            "HMAC with the bundle's digest (CI).",
        ),
        click.option(
            "--budget",
            type=FiniteFloatRange(min=1),
            default=None,
            metavar="SECONDS",
            help="Seconds per dataset within which every episode is re-run (default 1800).",
        ),
    ]


def _worker_options(root_help: str) -> list[Callable[[F], F]]:
    """What the re-running plugin worker reads and runs on."""
    return [
        click.option("--root", "roots", multiple=True, metavar="DATASET=PATH", help=root_help),
        click.option(
            "--weights",
            type=click.Path(exists=True, dir_okay=False),
            callback=_checkpoint,
            default=None,
            help="Local checkpoint for the model.",
        ),
        click.option(
            "--device",
            type=DEVICE,
            default="cpu",
            show_default=True,
            help="Torch device of the worker.",
        ),
        click.option(
            "--threads",
            type=click.IntRange(1, 1024),
            default=None,
            help="Torch threads of the worker (default: the run's recorded count, capped at "
            "the cores here).",
        ),
        worker_python_option,
        click.option(
            "--plugin-dir",
            "plugin_dirs",
            multiple=True,
            type=click.Path(exists=True, file_okay=False, path_type=Path),
            help="Folder holding the pinned plugins (e.g. from pip install --target); the "
            "worker imports from it and sees the pinned distributions' files in it "
            "read-only, nothing else of it (repeatable).",
        ),
        click.option(
            "--unsandboxed",
            is_flag=True,
            help="UNSAFE: run the plugin worker without an OS sandbox (where bubblewrap is "
            "missing); recorded in the report and shown on the site.",
        ),
    ]


def verification_options(
    root_help: str, switch: str | None = None, switch_help: str = ""
) -> Callable[[F], F]:
    """The options of every command that verifies.

    ``submission verify``, ``leaderboard add``, ``check`` and ``check-pr`` share them.

    Args:
        root_help: help text of ``--root``.
        switch: ``"--verify"`` (off unless given), ``"--unsafe-no-verify"`` (on unless
            given) or ``None`` (always on).
        switch_help: help text of the switch.

    Returns:
        A decorator adding the options.
    """
    options = [
        *_switch_options(switch, switch_help),
        *_sampling_options(),
        *_worker_options(root_help),
        click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts."),
    ]

    def decorate(command: F) -> F:
        for option in reversed(options):
            command = option(command)
        return command

    return decorate
