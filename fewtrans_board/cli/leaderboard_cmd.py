"""``submission`` and ``leaderboard`` commands."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import click

from fewtrans_board.cli.groups import (
    DEVICE,
    SEED,
    FiniteFloatRange,
    OutputPath,
    echo_json,
    echo_table,
    threads_option,
)
from fewtrans_board.cli.store_options import (
    leaderboard_option,
    parse_roots,
    verification_from,
    verification_options,
    worker_python_option,
)

if TYPE_CHECKING:
    from fewtrans_board.leaderboard.errors import SubmissionError


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
    type=OutputPath(dir_okay=False),
    required=True,
    help="Bundle zip to write.",
)
@leaderboard_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
def submission_pack(
    results: tuple[Path, ...],
    meta: Path,
    centre: Path | None,
    out: Path,
    leaderboard: Path,
    as_json: bool,
) -> None:
    """Validate result folders (one run per dataset) and pack them with metadata into a zip.

    Runs every check of 'submission validate' first and writes nothing if one fails.
    """
    from fewtrans_board.leaderboard.errors import SubmissionError
    from fewtrans_board.leaderboard.intake import pack_checked
    from fewtrans_board.leaderboard.store import LeaderboardStore
    from fewtrans_board.results.load import find_runs

    try:
        report = pack_checked(
            find_runs(list(results)), meta, out, LeaderboardStore(leaderboard), centre
        )
    except SubmissionError as exc:
        _fail(exc, as_json)
    if as_json:
        echo_json({"ok": True, "bundle": str(out), **report.to_dict()})
        return
    click.echo(f"wrote {out} (valid); upload it, or add it: fewtrans-board leaderboard add {out}")


@submission_group.command("validate")
@click.argument("bundle", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@leaderboard_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
def submission_validate(bundle: Path, leaderboard: Path, as_json: bool) -> None:
    """Validate a bundle (schema, hashes, completeness, grid, recomputed accuracies). No plugin code runs."""
    from fewtrans_board.leaderboard.errors import SubmissionError
    from fewtrans_board.leaderboard.intake import validate_bundle
    from fewtrans_board.leaderboard.store import LeaderboardStore

    try:
        report = validate_bundle(bundle, LeaderboardStore(leaderboard))
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
@click.option("--seed", type=SEED, default=0, show_default=True, help="Seed choosing the episodes.")
@click.option(
    "--threshold",
    type=FiniteFloatRange(0, 1),
    default=0.9,
    show_default=True,
    help="Minimum agreement.",
)
@click.option(
    "--root", "roots", multiple=True, metavar="DATASET=PATH", help="Local dataset copies."
)
@click.option(
    "--weights",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="Local checkpoint for the model.",
)
@click.option(
    "--device", type=DEVICE, default="cpu", show_default=True, help="Torch device of the worker."
)
@threads_option(
    "Torch threads of the worker (default: the run's recorded count, capped at the cores here)."
)
@worker_python_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
def submission_verify(
    bundle: Path,
    leaderboard: Path,
    sample: int,
    seed: int,
    threshold: float,
    roots: tuple[str, ...],
    weights: str | None,
    device: str,
    threads: int | None,
    worker_python: str | None,
    as_json: bool,
) -> None:
    """Re-run a seeded sample of episodes with the pinned plugin and compare predictions.

    The plugin runs in a separate worker process that sees episode tensors only, with the
    queries in an order only this process knows; this process scores.
    """
    from fewtrans_board.leaderboard.errors import SubmissionError
    from fewtrans_board.leaderboard.intake import verify_bundle
    from fewtrans_board.leaderboard.store import LeaderboardStore

    try:
        report = verify_bundle(
            bundle,
            LeaderboardStore(leaderboard),
            sample=sample,
            seed=seed,
            threshold=threshold,
            roots=parse_roots(roots),
            weights=weights,
            device=device,
            python=worker_python,
            threads=threads,
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
def leaderboard_add(
    bundle: Path,
    leaderboard: Path,
    verify_sample: int,
    seed: int,
    roots: tuple[str, ...],
    worker_python: str | None,
    as_json: bool,
) -> None:
    """Validate (and optionally verify) a bundle, then merge it into the store. Entries are immutable."""
    from fewtrans_board.leaderboard.errors import SubmissionError
    from fewtrans_board.leaderboard.intake import add_bundle
    from fewtrans_board.leaderboard.store import LeaderboardStore

    verification = verification_from(verify_sample, seed, roots, worker_python)
    try:
        result = add_bundle(bundle, LeaderboardStore(leaderboard), verification)
    except SubmissionError as exc:
        _fail(exc, as_json)
    status = "validated" if result.verification is None else "verified"
    ident = result.validation.meta.id
    if as_json:
        echo_json({"ok": True, "id": ident, "status": status})
    else:
        click.echo(f"added {ident} ({status}) to {leaderboard}; index rebuilt")


@leaderboard_group.command("check")
@click.argument("ident")
@leaderboard_option
@verification_options(
    verify_help="Also re-run this many episodes per dataset.",
    root_help="Local dataset copies.",
)
def leaderboard_check(
    ident: str,
    leaderboard: Path,
    verify_sample: int,
    seed: int,
    roots: tuple[str, ...],
    worker_python: str | None,
    as_json: bool,
) -> None:
    """Re-validate (and optionally verify) a stored entry; writes nothing (used by CI on PRs)."""
    from fewtrans_board.leaderboard.errors import SubmissionError
    from fewtrans_board.leaderboard.intake import check_entry
    from fewtrans_board.leaderboard.store import LeaderboardStore

    verification = verification_from(verify_sample, seed, roots, worker_python)
    try:
        result = check_entry(ident, LeaderboardStore(leaderboard), verification)
    except SubmissionError as exc:
        _fail(exc, as_json)
    if as_json:
        echo_json({"ok": True, **result.to_dict()})
        return
    _print_validation(result.validation.to_dict(), as_json=False)
    if result.verification is not None:
        _print_verification(result.verification, as_json=False)


@leaderboard_group.command("check-pr")
@click.option(
    "--repo",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=Path("."),
    show_default=True,
    help="Checkout of the pull request (its data is read, its code never run).",
)
@click.option("--base", required=True, help="Git ref of the base branch, e.g. origin/main.")
@click.option("--head", default="HEAD", show_default=True, help="Git ref of the pull request.")
@click.option(
    "--store",
    "store_folder",
    default="leaderboard",
    show_default=True,
    help="The leaderboard folder, relative to --repo.",
)
@verification_options(
    verify_help="Also re-run this many episodes per dataset of each new entry.",
    root_help="Local dataset copies.",
)
def leaderboard_check_pr(
    repo: Path,
    base: str,
    head: str,
    store_folder: str,
    verify_sample: int,
    seed: int,
    roots: tuple[str, ...],
    worker_python: str | None,
    as_json: bool,
) -> None:
    """Check a submission pull request: it may only add new entries' data, each must pass.

    Run it from the base branch's installation against the pull request's checkout, with
    the submitter's pinned plugins installed only in the --worker-python environment.
    """
    from fewtrans_board.leaderboard.errors import SubmissionError
    from fewtrans_board.leaderboard.intake import check_pull_request

    folder = (repo / store_folder).resolve()
    if not folder.is_relative_to(repo.resolve()) or not folder.is_dir():
        raise click.BadParameter(
            f"{store_folder!r} is not a folder inside {repo}", param_hint="--store"
        )
    verification = verification_from(verify_sample, seed, roots, worker_python)
    try:
        report = check_pull_request(repo, base, verification, head, store_folder)
    except SubmissionError as exc:
        _fail(exc, as_json)
    if as_json:
        echo_json(report.to_dict())
    else:
        for result in report.results.values():
            _print_validation(result.validation.to_dict(), as_json=False)
            if result.verification is not None:
                _print_verification(result.verification, as_json=False)
        for ident, (_, message) in report.failures.items():
            click.echo(f"rejected {ident}: {message}", err=True)
        if not report.ids:
            click.echo("the pull request adds no leaderboard entry")
    if not report.ok:
        sys.exit(1)


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
