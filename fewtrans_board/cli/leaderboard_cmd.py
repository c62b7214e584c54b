"""``submission``, ``leaderboard`` and ``compare`` commands."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

from fewtrans_board.cli.app import App, pass_app
from fewtrans_board.cli.groups import echo_json, echo_table

if TYPE_CHECKING:
    from fewtrans_board.leaderboard.errors import SubmissionError

F = TypeVar("F", bound=Callable[..., Any])

LEADERBOARD_ENV = "FEWTRANS_BOARD_LEADERBOARD"

leaderboard_option = click.option(
    "--leaderboard",
    "leaderboard",
    type=click.Path(file_okay=False, path_type=Path),
    default=lambda: os.environ.get(LEADERBOARD_ENV, "leaderboard"),
    show_default="leaderboard (or $FEWTRANS_BOARD_LEADERBOARD)",
    help="The leaderboard store folder.",
)


def _roots(values: tuple[str, ...]) -> dict[str, Path]:
    roots = {}
    for value in values:
        dataset, sep, path = value.partition("=")
        if not sep:
            raise click.BadParameter(f"{value!r} is not DATASET=PATH", param_hint="--root")
        roots[dataset] = Path(path)
    return roots


def _fail(error: SubmissionError, as_json: bool) -> NoReturn:
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


def verification_options(verify_help: str, root_help: str) -> Callable[[F], F]:
    """``--verify``, ``--seed``, ``--root`` and ``--json`` of the commands that may verify.

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
            type=int,
            default=0,
            show_default=True,
            help="Seed choosing the verified episodes.",
        ),
        click.option("--root", "roots", multiple=True, metavar="DATASET=PATH", help=root_help),
        click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts."),
    ]

    def decorate(command: F) -> F:
        for option in reversed(options):
            command = option(command)
        return command

    return decorate


@click.group("submission")
def submission_group() -> None:
    """Pack, validate and verify submission bundles."""


@submission_group.command("template")
def submission_template() -> None:
    """Print an example submission.toml."""
    from fewtrans_board.leaderboard.meta import EXAMPLE

    click.echo(EXAMPLE, nl=False)


@submission_group.command("pack")
@click.argument(
    "results",
    nargs=-1,
    required=True,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
)
@click.option(
    "--meta",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    required=True,
    help="submission.toml (see 'fewtrans-board submission template').",
)
@click.option(
    "--centre",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Centre-search JSON (default: the record embedded in the results).",
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="Bundle zip to write.",
)
def submission_pack(results: tuple[Path, ...], meta: Path, centre: Path | None, out: Path) -> None:
    """Pack result folders (one run per dataset) and metadata into a bundle zip."""
    from fewtrans_board.leaderboard.bundle import pack_bundle
    from fewtrans_board.results.load import find_runs

    pack_bundle(find_runs(list(results)), meta, out, centre)
    click.echo(f"wrote {out}; check it with: fewtrans-board submission validate {out}")


@submission_group.command("validate")
@click.argument("bundle", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@leaderboard_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
def submission_validate(bundle: Path, leaderboard: Path, as_json: bool) -> None:
    """Validate a bundle (schema, hashes, completeness, grid, recomputed accuracies). No plugin code runs."""
    from fewtrans_board.leaderboard.bundle import extract_bundle
    from fewtrans_board.leaderboard.errors import SubmissionError
    from fewtrans_board.leaderboard.store import LeaderboardStore
    from fewtrans_board.leaderboard.validate import validate_contents

    with tempfile.TemporaryDirectory() as tmp:
        try:
            report = validate_contents(
                extract_bundle(bundle, Path(tmp)), LeaderboardStore(leaderboard)
            )
        except SubmissionError as exc:
            _fail(exc, as_json)
    _print_validation(report.to_dict(), as_json)


def _print_validation(report: dict[str, Any], as_json: bool) -> None:
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
            [
                r["dataset"],
                r["episodes"],
                r["configurations"],
                f"{r['hpe']['mean']:.2f} ± {r['hpe']['ci95']:.2f}",
            ]
            for r in report["runs"]
        ],
    )


@submission_group.command("verify")
@click.argument("bundle", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@leaderboard_option
@click.option(
    "--sample",
    type=click.IntRange(1),
    default=5,
    show_default=True,
    help="Episodes re-run per dataset.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed choosing the episodes.")
@click.option(
    "--threshold",
    type=click.FloatRange(0, 1),
    default=0.9,
    show_default=True,
    help="Minimum agreement.",
)
@click.option(
    "--root", "roots", multiple=True, metavar="DATASET=PATH", help="Local dataset copies."
)
@click.option("--weights", default=None, help="Local checkpoint for the model.")
@click.option("--device", default="cpu", show_default=True, help="Torch device.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@pass_app
def submission_verify(
    app: App,
    bundle: Path,
    leaderboard: Path,
    sample: int,
    seed: int,
    threshold: float,
    roots: tuple[str, ...],
    weights: str | None,
    device: str,
    as_json: bool,
) -> None:
    """Re-run a seeded sample of episodes with the installed pinned plugin and compare predictions."""
    from fewtrans_board.leaderboard.bundle import extract_bundle
    from fewtrans_board.leaderboard.errors import SubmissionError
    from fewtrans_board.leaderboard.store import LeaderboardStore
    from fewtrans_board.leaderboard.verify import verify_contents

    with tempfile.TemporaryDirectory() as tmp:
        try:
            report = verify_contents(
                extract_bundle(bundle, Path(tmp)),
                LeaderboardStore(leaderboard),
                app.registry,
                sample=sample,
                seed=seed,
                threshold=threshold,
                roots=_roots(roots),
                weights=weights,
                device=device,
            )
        except SubmissionError as exc:
            _fail(exc, as_json)
    _print_verification(report, as_json)


def _print_verification(report: dict[str, Any], as_json: bool) -> None:
    if as_json:
        echo_json({"ok": True, **report})
        return
    click.echo(
        f"verified {report['submission']}: {len(report['episodes'])} re-run episodes agree "
        f"(threshold {report['threshold']})"
    )
    echo_table(
        ["dataset", "episode", "config agreement", "HPE agreement"],
        [
            [
                e["dataset"],
                e["episode"],
                f"{e['config_agreement']:.3f}",
                f"{e['hpe_agreement']:.3f}",
            ]
            for e in report["episodes"]
        ],
    )


@click.group("leaderboard")
def leaderboard_group() -> None:
    """Add validated submissions to the store and derive its index."""


@leaderboard_group.command("add")
@click.argument("bundle", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@leaderboard_option
@verification_options(
    verify_help="Also re-run this many episodes per dataset; the entry is then marked verified.",
    root_help="Local dataset copies (for --verify).",
)
@pass_app
def leaderboard_add(
    app: App,
    bundle: Path,
    leaderboard: Path,
    verify_sample: int,
    seed: int,
    roots: tuple[str, ...],
    as_json: bool,
) -> None:
    """Validate (and optionally verify) a bundle, then merge it into the store. Entries are immutable."""
    from fewtrans_board.leaderboard.bundle import extract_bundle
    from fewtrans_board.leaderboard.errors import SubmissionError
    from fewtrans_board.leaderboard.index import build_index
    from fewtrans_board.leaderboard.store import LeaderboardStore
    from fewtrans_board.leaderboard.verify import validate_and_verify

    store = LeaderboardStore(leaderboard)
    with tempfile.TemporaryDirectory() as tmp:
        try:
            report, verification = validate_and_verify(
                extract_bundle(bundle, Path(tmp)),
                store,
                app.registry,
                sample=verify_sample,
                seed=seed,
                roots=_roots(roots),
            )
            status: dict[str, Any] = (
                {"status": "validated"}
                if verification is None
                else {"status": "verified", "verification": verification}
            )
            store.add(Path(tmp), report.meta.id, status, report.meta.supersedes)
        except SubmissionError as exc:
            _fail(exc, as_json)
    store.write_index(build_index(store))
    if as_json:
        echo_json({"ok": True, "id": report.meta.id, "status": status["status"]})
    else:
        click.echo(f"added {report.meta.id} ({status['status']}) to {leaderboard}; index rebuilt")


@leaderboard_group.command("check")
@click.argument("ident")
@leaderboard_option
@verification_options(
    verify_help="Also re-run this many episodes per dataset.",
    root_help="Local dataset copies.",
)
@pass_app
def leaderboard_check(
    app: App,
    ident: str,
    leaderboard: Path,
    verify_sample: int,
    seed: int,
    roots: tuple[str, ...],
    as_json: bool,
) -> None:
    """Re-validate (and optionally verify) a stored entry; writes nothing (used by CI on PRs)."""
    from fewtrans_board.leaderboard.errors import SubmissionError
    from fewtrans_board.leaderboard.store import LeaderboardStore
    from fewtrans_board.leaderboard.verify import validate_and_verify

    store = LeaderboardStore(leaderboard)
    try:
        validation, verification = validate_and_verify(
            store.entry_contents(ident),
            store,
            app.registry,
            sample=verify_sample,
            seed=seed,
            roots=_roots(roots),
        )
    except SubmissionError as exc:
        _fail(exc, as_json)
    report = validation.to_dict()
    if verification is not None:
        report["verification"] = verification
    if as_json:
        echo_json({"ok": True, **report})
        return
    _print_validation(report, as_json=False)
    if verification is not None:
        _print_verification(verification, as_json=False)


@leaderboard_group.command("rebuild")
@leaderboard_option
@click.option(
    "--check",
    is_flag=True,
    help="Exit 1 if the committed index.json is out of date; write nothing.",
)
def leaderboard_rebuild(leaderboard: Path, check: bool) -> None:
    """Derive leaderboard/index.json from the raw per-episode rows."""
    from fewtrans_board.leaderboard.index import build_index
    from fewtrans_board.leaderboard.store import LeaderboardStore, index_text

    store = LeaderboardStore(leaderboard)
    index = build_index(store)
    if check:
        current = store.index_path.read_text() if store.index_path.is_file() else ""
        if current != index_text(index):
            raise click.ClickException(
                f"{store.index_path} is out of date; run 'fewtrans-board leaderboard rebuild'"
            )
        click.echo(f"{store.index_path} is current")
        return
    store.write_index(index)
    click.echo(f"wrote {store.index_path}: {len(index['submissions'])} submissions")


@click.command("compare")
@click.argument("run_a", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.argument("run_b", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--seed", type=int, default=0, show_default=True, help="Bootstrap seed.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
def compare_command(run_a: Path, run_b: Path, seed: int, as_json: bool) -> None:
    """Paired comparison of RUN_A vs RUN_B on shared episodes (FewTrans Table VIII style).

    RUN_A and RUN_B are run folders, or folders holding one run per dataset.
    """
    from fewtrans_board.leaderboard.compare import compare_runs

    report = compare_runs(run_a, run_b, seed=seed)
    if as_json:
        echo_json(report)
        return
    click.echo(
        f"A = {report['a']}\nB = {report['b']}\n"
        "(HPE accuracy %, paired over shared episodes; p Holm-adjusted across datasets)"
    )
    rows = [
        [
            r["dataset"],
            r["episodes"],
            f"{r['a']:.2f}",
            f"{r['b']:.2f}",
            f"{r['difference']:+.2f}",
            f"{r['t_p_holm']:.2g}{' *' if r['significant'] else ''}",
            f"{r['wilcoxon_p']:.2g}",
            f"{r['cohens_d']:+.2f}",
        ]
        for r in report["datasets"]
    ]
    o = report["overall"]
    rows.append(
        [
            "overall",
            o["episodes"],
            f"{o['a']:.2f}",
            f"{o['b']:.2f}",
            f"{o['difference']:+.2f} [{o['difference_ci'][0]:+.2f}, {o['difference_ci'][1]:+.2f}]",
            f"{o['t_p']:.2g}",
            f"{o['wilcoxon_p']:.2g}",
            f"{o['cohens_d']:+.2f}",
        ]
    )
    echo_table(
        ["dataset", "episodes", "A", "B", "A - B", "p (t)", "p (Wilcoxon)", "Cohen's d"], rows
    )
