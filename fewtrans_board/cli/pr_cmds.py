"""The pull-request commands of ``leaderboard``: check-pr, pr-comment, record-status, fetch-plugins.

CI's side of a submission (see :mod:`fewtrans_board.leaderboard.intake`); they are added
to the ``leaderboard`` group in :mod:`fewtrans_board.cli.leaderboard_cmd`.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from fewtrans_board.cli.groups import OutputPath, echo_json
from fewtrans_board.cli.pr_options import BlobLocation, check_store_folder, pull_request_options
from fewtrans_board.cli.reports import print_validation, print_verification, refusals
from fewtrans_board.cli.store_options import (
    leaderboard_option,
    verification_from,
    verification_options,
    weights_dir_option,
)


@click.command("check-pr")
@pull_request_options
@click.option(
    "--plugins-root",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="Folder of per-entry plugin folders made by 'leaderboard fetch-plugins' (each "
    "entry's worker sees its own, read-only).",
)
@click.option(
    "--blobs-from",
    type=BlobLocation(exists=True),
    default=None,
    help="Fetch the new entries' blobs here (default: each entry's blob-sources/ID.txt for "
    "a store keeping blobs at a URL, else the store's blob folder).",
)
@click.option(
    "--status-out",
    type=OutputPath(file_okay=False),
    default=None,
    metavar="DIR",
    help="Write DIR/ID.json, the status this check established, for every new entry it "
    "verified (a pull request carries no status.json; record them after the merge with "
    "'leaderboard record-status DIR').",
)
@weights_dir_option
@verification_options(
    root_help="Local dataset copies.",
    switch="--verify",
    switch_help="Also re-run each new entry (CI always does).",
)
def leaderboard_check_pr(
    repo: Path,
    base: str,
    head: str,
    store_folder: str,
    plugins_root: Path | None,
    blobs_from: str | None,
    status_out: Path | None,
    weights_dir: Path | None,
    as_json: bool,
    **options: Any,
) -> None:
    """Check a submission pull request: it may only add new entries' data, each must pass.

    Run it from the base branch's installation against the pull request's checkout, with
    the submitter's pinned plugins installed only in the --worker-python environment. A
    pull request may not carry an entry's status.json: CI's own report is the status
    (--status-out).
    """
    from fewtrans_board.leaderboard.intake import check_pull_request
    from fewtrans_board.results.blobs import BlobStore

    check_store_folder(repo, store_folder)
    verification = verification_from(options)
    source = None if blobs_from is None else BlobStore(blobs_from)
    with refusals(as_json):
        report = check_pull_request(
            repo,
            base,
            verification,
            head,
            store_folder,
            plugins_root=plugins_root,
            blobs_from=source,
            status_out=status_out,
            weights_dir=weights_dir,
        )
    if as_json:
        echo_json(report.to_dict())
    else:
        for result in report.results.values():
            print_validation(result.validation.to_dict(), as_json=False)
            if result.verification is not None:
                print_verification(result.verification, as_json=False)
        for ident, (_, message) in report.failures.items():
            click.echo(f"rejected {ident}: {message}", err=True)
        if not report.ids:
            click.echo("the pull request adds no leaderboard entry")
    if not report.ok:
        sys.exit(1)


def _run_url(ctx: click.Context, param: click.Parameter, value: str) -> str:
    if value and (not value.startswith("https://") or any(c.isspace() for c in value)):
        raise click.BadParameter(f"{value!r} is not an https:// URL")
    return value


@click.command("pr-comment")
@click.argument("report", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--run-url",
    default="",
    callback=_run_url,
    metavar="URL",
    help="The workflow run (https://...), linked from the comment on a failed check.",
)
def leaderboard_pr_comment(report: Path, run_url: str) -> None:
    """Print the Markdown comment for REPORT, the JSON 'check-pr --json' wrote.

    The report is read as data: its values are shown as code, never as Markdown. A missing,
    empty or malformed REPORT (the check crashed before writing it) still prints a comment,
    saying that nothing was verified and where to look, and then exits with status 1.
    """
    from fewtrans_board.leaderboard.pr_comment import read_report, render_comment

    parsed, reason = read_report(report)
    click.echo(render_comment(parsed, reason, run_url), nl=False)
    if parsed is None:
        raise click.ClickException(
            f"{report}: {reason}; the comment printed says that nothing was verified"
        )


@click.command("record-status")
@click.argument("folder", type=click.Path(exists=True, file_okay=False, path_type=Path))
@leaderboard_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
def leaderboard_record_status(folder: Path, leaderboard: Path, as_json: bool) -> None:
    """Record the statuses 'check-pr --status-out' wrote (FOLDER/ID.json) as the entries' status.

    For maintainers, after merging the pull request: each file is recorded only for a stored
    entry whose files are exactly those its report verified (its digest) and whose report
    passed; any other file is refused by name and changes nothing. The index is rebuilt.
    """
    from fewtrans_board.leaderboard.ci_status import record_statuses
    from fewtrans_board.leaderboard.store import LeaderboardStore

    with refusals(as_json):
        outcome = record_statuses(folder, LeaderboardStore(leaderboard))
    if as_json:
        echo_json(outcome.to_dict())
    else:
        for ident in outcome.recorded:
            click.echo(f"recorded {ident}: verified (CI's report)")
        for name, (_, message) in outcome.refused.items():
            click.echo(f"refused {name}: {message}", err=True)
        if outcome.recorded:
            click.echo(f"index rebuilt: {leaderboard / 'index.json'}")
        elif not outcome.refused:
            click.echo(f"{folder} holds no status file; nothing recorded")
    if not outcome.ok:
        sys.exit(1)


def _wheel_sources(
    ctx: click.Context, param: click.Parameter, values: tuple[str, ...]
) -> tuple[str, ...]:
    for value in values:
        if "://" not in value and not Path(value).is_dir():
            raise click.BadParameter(f"{value} is neither a folder nor a URL")
    return values


@click.command("fetch-plugins")
@pull_request_options
@click.option(
    "--into",
    type=OutputPath(file_okay=False),
    required=True,
    help="Folder to install into, one read-only folder per new entry (<into>/<id>).",
)
@click.option(
    "--find-links",
    "find_links",
    multiple=True,
    callback=_wheel_sources,
    metavar="DIR|URL",
    help="Also look for wheels there (passed to pip; a local mirror).",
)
@click.option("--no-index", is_flag=True, help="Use --find-links only, never the package index.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
def leaderboard_fetch_plugins(
    repo: Path,
    base: str,
    head: str,
    store_folder: str,
    into: Path,
    find_links: tuple[str, ...],
    no_index: bool,
    as_json: bool,
) -> None:
    """Install each new entry's pinned plugins from wheels with their recorded hashes only.

    No source distribution is built (no setup.py runs) and each entry gets its own folder,
    which no interpreter treats as a site directory (a .pth file in it never runs); pass
    the folders to 'check-pr --plugins-root'.
    """
    from fewtrans_board.leaderboard.intake import fetch_pull_request_plugins

    check_store_folder(repo, store_folder)
    pip_options = tuple(a for link in find_links for a in ("--find-links", link))
    if no_index:
        pip_options += ("--no-index",)
    with refusals(as_json):
        installed = fetch_pull_request_plugins(repo, base, into, head, store_folder, pip_options)
    if as_json:
        echo_json({"ok": True, "plugins": {k: str(v) for k, v in installed.items()}})
        return
    for ident, folder in installed.items():
        click.echo(f"{ident}: {folder}")
