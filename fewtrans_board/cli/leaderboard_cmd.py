"""``submission`` and ``leaderboard`` commands."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import click

from fewtrans_board.cli.blob_cmds import leaderboard_export_blobs, leaderboard_publish_blobs
from fewtrans_board.cli.groups import OutputPath, echo_json
from fewtrans_board.cli.pr_options import BlobLocation, check_store_folder, pull_request_options
from fewtrans_board.cli.reports import print_validation, print_verification
from fewtrans_board.cli.store_options import (
    leaderboard_option,
    verification_from,
    verification_options,
)

if TYPE_CHECKING:
    from fewtrans_board.core.errors import SubmissionError


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
    from fewtrans_board.core.errors import SubmissionError
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
    from fewtrans_board.core.errors import SubmissionError
    from fewtrans_board.leaderboard.intake import validate_bundle
    from fewtrans_board.leaderboard.store import LeaderboardStore

    try:
        report = validate_bundle(bundle, LeaderboardStore(leaderboard))
    except SubmissionError as exc:
        _fail(exc, as_json)
    print_validation(report.to_dict(), as_json)


@submission_group.command("verify")
@click.argument("bundle", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@leaderboard_option
@verification_options(root_help="Local dataset copies.")
def submission_verify(bundle: Path, leaderboard: Path, as_json: bool, **options: Any) -> None:
    """Re-run a sample of a bundle's episodes with the pinned plugin and judge them.

    The plugin runs in a sandboxed worker that sees episode tensors only, with the queries
    in an order only this process knows; this process scores. The episodes are drawn from
    a seed fixed only now (printed, to reproduce the verification with --seed).
    """
    from fewtrans_board.core.errors import SubmissionError
    from fewtrans_board.leaderboard.intake import verify_bundle
    from fewtrans_board.leaderboard.store import LeaderboardStore

    verification = verification_from(options)
    try:
        report = verify_bundle(bundle, LeaderboardStore(leaderboard), verification.options)
    except SubmissionError as exc:
        _fail(exc, as_json)
    print_verification(report, as_json)


@click.group("leaderboard")
def leaderboard_group() -> None:
    """Add validated submissions to the store and derive its index."""


@leaderboard_group.command("add")
@click.argument("bundle", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@leaderboard_option
@verification_options(
    root_help="Local dataset copies (for verification).",
    switch="--unsafe-no-verify",
    switch_help="UNSAFE: store the entry without re-running it; it is listed as not verified.",
)
@click.option(
    "--blobs-to",
    type=BlobLocation(exists=False),
    default=None,
    help="Write the entry's logits blobs here, not to the store's blob location (a staging "
    "folder or URL you can write, for a pull request to a store keeping blobs at a URL).",
)
def leaderboard_add(
    bundle: Path, leaderboard: Path, as_json: bool, blobs_to: str | None, **options: Any
) -> None:
    """Validate and verify a bundle, then merge it into the store. Entries are immutable."""
    from fewtrans_board.core.errors import SubmissionError
    from fewtrans_board.leaderboard.blob_flow import note_for_staging
    from fewtrans_board.leaderboard.intake import add_bundle
    from fewtrans_board.leaderboard.store import LeaderboardStore
    from fewtrans_board.results.blobs import BlobStore

    verification = verification_from(options)
    store = LeaderboardStore(leaderboard)
    staging = None if blobs_to is None else BlobStore(blobs_to)
    try:
        result = add_bundle(bundle, store, verification, staging)
    except SubmissionError as exc:
        _fail(exc, as_json)
    status = "validated" if result.verification is None else "verified"
    ident = result.validation.meta.id
    if blobs_to is not None:
        click.echo(note_for_staging(store.root, ident, blobs_to), err=True)
    if as_json:
        echo_json({"ok": True, "id": ident, "status": status, "verification": result.verification})
    else:
        if result.verification is None:
            click.echo("Warning: stored without verification (--unsafe-no-verify)", err=True)
        else:
            print_verification(result.verification, as_json=False)
        click.echo(f"added {ident} ({status}) to {leaderboard}; index rebuilt")


@leaderboard_group.command("check")
@click.argument("ident")
@leaderboard_option
@verification_options(
    root_help="Local dataset copies.",
    switch="--verify",
    switch_help="Also re-run the entry (see 'submission verify'; fetches its logits blobs).",
)
@click.option(
    "--with-logits",
    is_flag=True,
    help="Fetch the entry's logits blobs (hash-checked) and recheck its logit-mean fusions.",
)
@click.option(
    "--blobs-from",
    type=BlobLocation(exists=True),
    default=None,
    help="Fetch the blobs from here, e.g. where a pull request stages them (implies --with-logits).",
)
def leaderboard_check(
    ident: str,
    leaderboard: Path,
    as_json: bool,
    with_logits: bool,
    blobs_from: str | None,
    **options: Any,
) -> None:
    """Re-validate (and with --verify re-run) a stored entry; writes nothing.

    Without --with-logits (and without --verify) the entry is read from git alone: every
    accuracy and vote ensemble is recomputed, its logit-mean fusions are not.
    """
    from fewtrans_board.core.errors import SubmissionError
    from fewtrans_board.leaderboard.intake import check_entry
    from fewtrans_board.leaderboard.store import LeaderboardStore
    from fewtrans_board.results.blobs import BlobStore

    verification = verification_from(options)
    source = None if blobs_from is None else BlobStore(blobs_from)
    try:
        result = check_entry(
            ident, LeaderboardStore(leaderboard), verification, with_logits, source
        )
    except SubmissionError as exc:
        _fail(exc, as_json)
    if as_json:
        echo_json({"ok": True, **result.to_dict()})
        return
    print_validation(result.validation.to_dict(), as_json=False)
    if result.verification is not None:
        print_verification(result.verification, as_json=False)


@leaderboard_group.command("check-pr")
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
    as_json: bool,
    **options: Any,
) -> None:
    """Check a submission pull request: it may only add new entries' data, each must pass.

    Run it from the base branch's installation against the pull request's checkout, with
    the submitter's pinned plugins installed only in the --worker-python environment. A
    pull request may not carry an entry's status.json: CI's own report is the status
    (--status-out).
    """
    from fewtrans_board.core.errors import SubmissionError
    from fewtrans_board.leaderboard.intake import check_pull_request
    from fewtrans_board.results.blobs import BlobStore

    check_store_folder(repo, store_folder)
    verification = verification_from(options)
    source = None if blobs_from is None else BlobStore(blobs_from)
    try:
        report = check_pull_request(
            repo, base, verification, head, store_folder, plugins_root, source, status_out
        )
    except SubmissionError as exc:
        _fail(exc, as_json)
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


@leaderboard_group.command("record-status")
@click.argument("folder", type=click.Path(exists=True, file_okay=False, path_type=Path))
@leaderboard_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
def leaderboard_record_status(folder: Path, leaderboard: Path, as_json: bool) -> None:
    """Record the statuses 'check-pr --status-out' wrote (FOLDER/ID.json) as the entries' status.

    For maintainers, after merging the pull request: each file is recorded only for a stored
    entry whose files are exactly those its report verified (its digest) and whose report
    passed; any other file is refused by name and changes nothing. The index is rebuilt.
    """
    from fewtrans_board.core.errors import SubmissionError
    from fewtrans_board.leaderboard.ci_status import record_statuses
    from fewtrans_board.leaderboard.store import LeaderboardStore

    try:
        outcome = record_statuses(folder, LeaderboardStore(leaderboard))
    except SubmissionError as exc:
        _fail(exc, as_json)
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


@leaderboard_group.command("fetch-plugins")
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
    from fewtrans_board.core.errors import SubmissionError
    from fewtrans_board.leaderboard.intake import fetch_pull_request_plugins

    check_store_folder(repo, store_folder)
    pip_options = tuple(a for link in find_links for a in ("--find-links", link))
    if no_index:
        pip_options += ("--no-index",)
    try:
        installed = fetch_pull_request_plugins(repo, base, into, head, store_folder, pip_options)
    except SubmissionError as exc:
        _fail(exc, as_json)
    if as_json:
        echo_json({"ok": True, "plugins": {k: str(v) for k, v in installed.items()}})
        return
    for ident, folder in installed.items():
        click.echo(f"{ident}: {folder}")


@leaderboard_group.command("rebuild")
@leaderboard_option
@click.option(
    "--check",
    is_flag=True,
    help="Exit 1 if the committed index.json is out of date; write nothing.",
)
@click.option(
    "--with-logits",
    is_flag=True,
    help="Fetch every entry's logits blobs (hash-checked) and recheck the logit-mean fusions.",
)
@click.option(
    "--no-cache",
    is_flag=True,
    help="Summarise every entry again, neither reading nor writing the build cache "
    "(~/.cache/fewtrans-board/build or $FEWTRANS_BUILD_CACHE).",
)
def leaderboard_rebuild(leaderboard: Path, check: bool, with_logits: bool, no_cache: bool) -> None:
    """Derive leaderboard/index.json from the raw per-episode rows.

    Every accuracy and vote ensemble is recomputed from the rows in git; --with-logits
    also fetches every entry's logits blobs (hash-checked) and rechecks the logit-mean
    fusions. Entries whose files, frozen manifests and summary format have not changed
    since the last build reuse their cached summaries (the same index); --check never
    reads the cache: CI judges the store from the files alone.
    """
    from fewtrans_board.leaderboard.index import build_index, index_difference
    from fewtrans_board.leaderboard.store import LeaderboardStore, index_text
    from fewtrans_board.leaderboard.summary_cache import SummaryCache, default_root

    store = LeaderboardStore(leaderboard)
    cache = SummaryCache(None if no_cache or check else default_root())
    index = build_index(store, with_logits=with_logits, cache=cache)
    if check:
        if not store.index_path.is_file():
            raise click.ClickException(
                f"{store.index_path} is missing; run 'fewtrans-board leaderboard rebuild'"
            )
        try:
            committed = json.loads(store.index_path.read_text())
        except ValueError as exc:
            raise click.ClickException(
                f"{store.index_path} is not JSON ({exc}); run 'fewtrans-board leaderboard rebuild'"
            ) from exc
        # Decoded and compared number by number: the last float bits follow the CPU.
        difference = index_difference(committed, json.loads(index_text(index)))
        if difference:
            raise click.ClickException(
                f"{store.index_path} is out of date ({difference}); "
                "run 'fewtrans-board leaderboard rebuild'"
            )
        click.echo(f"{store.index_path} is current")
        return
    store.write_index(index)
    click.echo(f"wrote {store.index_path}: {len(index['submissions'])} submissions")


@leaderboard_group.command("migrate-blobs")
@leaderboard_option
def leaderboard_migrate_blobs(leaderboard: Path) -> None:
    """Move the logits of stored entries into content-addressed blobs (idempotent).

    Each entry's shards are split (the logits to a blob in the store's blob location,
    blobs.toml or blobs/; the rest stays in the shard, which names the blob by sha256),
    read back with their blobs and checked against the seals they had, and swapped in
    atomically per entry. Running it again changes nothing.
    """
    from fewtrans_board.leaderboard.migrate import migrate_store
    from fewtrans_board.leaderboard.store import LeaderboardStore

    store = LeaderboardStore(leaderboard)
    done = migrate_store(store, lambda outcome: click.echo(outcome.line()))
    split = sum(o.report.shards for o in done)
    click.echo(f"{len(done)} entries, {split} shard(s) split now; blobs at {store.blobs.location}")


leaderboard_group.add_command(leaderboard_export_blobs)
leaderboard_group.add_command(leaderboard_publish_blobs)
