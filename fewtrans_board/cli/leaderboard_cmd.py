"""``submission`` and ``leaderboard`` commands."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from fewtrans_board.cli.blob_cmds import leaderboard_export_blobs, leaderboard_publish_blobs
from fewtrans_board.cli.groups import OutputPath, echo_json
from fewtrans_board.cli.pr_cmds import (
    leaderboard_check_pr,
    leaderboard_fetch_plugins,
    leaderboard_pr_comment,
    leaderboard_record_status,
)
from fewtrans_board.cli.pr_options import BlobLocation
from fewtrans_board.cli.reports import print_validation, print_verification, refusals
from fewtrans_board.cli.reverify_cmd import leaderboard_reverify
from fewtrans_board.cli.store_options import (
    leaderboard_option,
    verification_from,
    verification_options,
)
from fewtrans_board.cli.submission_template import submission_template


@click.group("submission")
def submission_group() -> None:
    """Pack, validate and verify submission bundles."""


submission_group.add_command(submission_template)


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
@click.option("--out", type=OutputPath(dir_okay=False), required=True, help="Bundle zip to write.")
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
    from fewtrans_board.leaderboard.intake import pack_checked
    from fewtrans_board.leaderboard.store import LeaderboardStore
    from fewtrans_board.results.load import find_runs

    with refusals(as_json):
        report = pack_checked(
            find_runs(list(results)), meta, out, LeaderboardStore(leaderboard), centre
        )
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
    from fewtrans_board.leaderboard.intake import validate_bundle
    from fewtrans_board.leaderboard.store import LeaderboardStore

    with refusals(as_json):
        report = validate_bundle(bundle, LeaderboardStore(leaderboard))
    print_validation(report.to_dict(), as_json)


@submission_group.command("verify")
@click.argument("bundle", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@leaderboard_option
@verification_options(root_help="Local dataset copies.")
def submission_verify(bundle: Path, leaderboard: Path, as_json: bool, **options: Any) -> None:
    """Re-run a sample of a bundle's episodes with the pinned plugin and judge them.

    The plugin runs in a sandboxed worker that sees episode tensors only, with the queries
    in an order only this process knows; this process scores. The episodes are drawn from
    a seed fixed only now (printed, to reproduce the verification with --seed). A passed
    verification is recorded for this installation, so 'leaderboard add' of the same
    bundle with the same options re-runs nothing.
    """
    from fewtrans_board.leaderboard.intake import verify_bundle
    from fewtrans_board.leaderboard.store import LeaderboardStore

    verification = verification_from(options)
    with refusals(as_json):
        report = verify_bundle(bundle, LeaderboardStore(leaderboard), verification.options)
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
    """Validate and verify a bundle, then merge it into the store. Entries are immutable.

    A verification this installation already passed on the same bundle (same digest, seed
    source, sample options, fewtrans-board and pinned code: 'submission verify' records
    it in the user's cache folder) is reused, and the output says so; nothing a bundle
    carries is ever taken as its verification.
    """
    from fewtrans_board.leaderboard.blob_flow import note_for_staging
    from fewtrans_board.leaderboard.intake import add_bundle
    from fewtrans_board.leaderboard.store import LeaderboardStore
    from fewtrans_board.results.blobs import BlobStore

    verification = verification_from(options)
    store = LeaderboardStore(leaderboard)
    staging = None if blobs_to is None else BlobStore(blobs_to)
    with refusals(as_json):
        result = add_bundle(bundle, store, verification, staging)
    status = "validated" if result.verification is None else "verified"
    ident = result.validation.meta.id
    if blobs_to is not None:
        click.echo(note_for_staging(store.root, ident, blobs_to), err=True)
    reused = None if result.reused is None else str(result.reused)
    if as_json:
        echo_json(
            {
                "ok": True,
                "id": ident,
                "status": status,
                "verification": result.verification,
                "reused_verification": reused,
            }
        )
    else:
        if result.verification is None:
            click.echo("Warning: stored without verification (--unsafe-no-verify)", err=True)
        else:
            if reused is not None:
                click.echo(
                    "verification: nothing re-run; this installation already verified this "
                    f"bundle (digest {result.verification['digest'][:16]}…) with the same "
                    f"options and code (record {reused})"
                )
            print_verification(result.verification, as_json=False)
        from fewtrans_board.leaderboard.status import entry_status

        shown = entry_status(status, result.verification).summary  # as the site shows it
        click.echo(f"added {ident} ({shown}) to {leaderboard}; index rebuilt")


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
    from fewtrans_board.leaderboard.intake import check_entry
    from fewtrans_board.leaderboard.store import LeaderboardStore
    from fewtrans_board.results.blobs import BlobStore

    verification = verification_from(options)
    source = None if blobs_from is None else BlobStore(blobs_from)
    with refusals(as_json):
        result = check_entry(
            ident, LeaderboardStore(leaderboard), verification, with_logits, source
        )
    if as_json:
        echo_json({"ok": True, **result.to_dict()})
        return
    print_validation(result.validation.to_dict(), as_json=False)
    if result.verification is not None:
        print_verification(result.verification, as_json=False)


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


leaderboard_group.add_command(leaderboard_check_pr)
leaderboard_group.add_command(leaderboard_reverify)
leaderboard_group.add_command(leaderboard_pr_comment)
leaderboard_group.add_command(leaderboard_record_status)
leaderboard_group.add_command(leaderboard_fetch_plugins)
leaderboard_group.add_command(leaderboard_export_blobs)
leaderboard_group.add_command(leaderboard_publish_blobs)
