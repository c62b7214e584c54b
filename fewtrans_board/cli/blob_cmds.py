"""``leaderboard export-blobs`` and ``leaderboard publish-blobs``: blobs outside git.

A store that keeps its logits blobs at a URL takes new entries through a staging location
(see :mod:`fewtrans_board.leaderboard.blob_flow`): the submitter exports the blobs of their
entry there; after the merge, the job holding the store's write credentials publishes
them into the store. Both copy only blobs that pass their hash and their shard's seal.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from fewtrans_board.cli.pr_options import BlobLocation, check_store_folder, store_folder_option
from fewtrans_board.cli.store_options import leaderboard_option


@click.command("export-blobs")
@click.argument("ident")
@leaderboard_option
@click.option(
    "--to",
    "to_location",
    type=BlobLocation(exists=False),
    required=True,
    help="Where to write the blobs: a folder or a URL you can write (your staging location).",
)
@click.option(
    "--from",
    "from_location",
    type=BlobLocation(exists=True),
    default=None,
    help="Where the blobs are now (default: the store's blob location, blobs.toml).",
)
def leaderboard_export_blobs(
    ident: str, leaderboard: Path, to_location: str, from_location: str | None
) -> None:
    """Copy a stored entry's logits blobs to a staging location, each hash- and seal-checked.

    For a pull request to a store that keeps its blobs at a URL: export them where anyone
    can read them, then name that URL in <leaderboard>/blob-sources/ID.txt (written here
    when --to is such a URL). A maintainer moving a store's blobs to a URL sets blobs.toml
    first and exports each entry --from the old folder (no note then). Copying again
    changes nothing.
    """
    from fewtrans_board.leaderboard.blob_flow import copy_entry_blobs, note_for_staging
    from fewtrans_board.leaderboard.store import LeaderboardStore
    from fewtrans_board.results.blobs import BlobStore

    store = LeaderboardStore(leaderboard)
    source = store.blobs if from_location is None else BlobStore(from_location)
    target = BlobStore(to_location)
    click.echo(copy_entry_blobs(store, ident, source, target).line(target))
    if target.location != store.blobs.location:  # else a maintainer filling the store itself
        click.echo(note_for_staging(store.root, ident, to_location))


@click.command("publish-blobs")
@click.option(
    "--repo",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=Path("."),
    show_default=True,
    help="Checkout of the store's main branch.",
)
@store_folder_option
@click.option(
    "--since",
    default=None,
    metavar="REF",
    help="Publish the entries added since this commit (CI: the push's 'before').",
)
@click.option(
    "--entry",
    "entries",
    multiple=True,
    metavar="ID",
    help="Publish this entry (repeatable; with or instead of --since).",
)
@click.option(
    "--from",
    "from_location",
    type=BlobLocation(exists=True),
    default=None,
    help="Fetch the blobs here (default: each entry's blob-sources/ID.txt, else the store).",
)
def leaderboard_publish_blobs(
    repo: Path,
    store_folder: str,
    since: str | None,
    entries: tuple[str, ...],
    from_location: str | None,
) -> None:
    """Copy merged entries' logits blobs from their staging locations into the store's.

    Run by the one job holding the blob store's write credentials, after a merge, on the
    main branch's code and data. Each blob is checked against its hash and its shard's
    seal before it is written; one already in the store is checked and left alone. A blob
    that is missing or refused fails the command with one line naming the entry, the
    shard, the blob and where it was looked for (the other entries are still published).
    A store keeping its blobs in its own folder receives them through git: nothing to do.
    """
    from fewtrans_board.core.errors import SubmissionError
    from fewtrans_board.leaderboard.blob_flow import copy_entry_blobs, source_of
    from fewtrans_board.leaderboard.git import entries_added
    from fewtrans_board.leaderboard.store import LeaderboardStore
    from fewtrans_board.results.blobs import BlobStore

    check_store_folder(repo, store_folder)
    store = LeaderboardStore(repo / store_folder)
    unknown = sorted(set(entries) - set(store.submission_ids()))
    if unknown:
        raise click.BadParameter(
            f"no stored entry {unknown[0]!r} in {store.root}", param_hint="--entry"
        )
    if since is None and not entries:
        raise click.UsageError("name what to publish: --since REF or --entry ID")
    ids = sorted({*entries, *(entries_added(repo, since, "HEAD", store_folder) if since else [])})
    target = store.blobs
    if not target.is_url:
        click.echo(
            f"{store.root} keeps its blobs in {target.location} (in git): nothing to publish"
        )
        return
    override = None if from_location is None else BlobStore(from_location)
    failed = 0
    for ident in ids:
        try:
            source = source_of(store, ident, override)
            click.echo(copy_entry_blobs(store, ident, source, target).line(target))
        except SubmissionError as exc:
            failed += 1
            click.echo(f"Error: {exc}", err=True)
    if not ids:
        click.echo("no new entry: nothing to publish")
    if failed:
        sys.exit(1)
