"""``site build``: render the static leaderboard site."""

from __future__ import annotations

from pathlib import Path

import click

from fewtrans_board.cli.app import App, pass_app
from fewtrans_board.cli.groups import OutputPath
from fewtrans_board.cli.store_options import leaderboard_option


@click.group("site")
def site_group() -> None:
    """Build the static leaderboard site."""


@site_group.command("build")
@leaderboard_option
@click.option(
    "--out",
    type=OutputPath(file_okay=False),
    default=Path("_site"),
    show_default=True,
    help="Output folder.",
)
@click.option(
    "--results",
    "results",
    multiple=True,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="Also show these local result folders as unsubmitted entries (repeatable); "
    "unfinished runs and runs evaluated with --limit are left out, one line each.",
)
@click.option(
    "--no-cache",
    is_flag=True,
    help="Summarise every entry again, neither reading nor writing the build cache "
    "(~/.cache/fewtrans-board/build or $FEWTRANS_BUILD_CACHE).",
)
@click.option(
    "--build-date",
    metavar="YYYY-MM-DD",
    default=None,
    help="The date the pages say they are built as of (default: $SOURCE_DATE_EPOCH if set, "
    "else the store's latest dated change, so that rebuilds are identical).",
)
@pass_app
def site_build(
    app: App,
    leaderboard: Path,
    out: Path,
    results: tuple[Path, ...],
    no_cache: bool,
    build_date: str | None,
) -> None:
    """Render tables with CIs, significance flags, method and dataset pages, plots. No JS needed."""
    from fewtrans_board.leaderboard.runs import unshowable_run
    from fewtrans_board.leaderboard.summary_cache import SummaryCache, default_root
    from fewtrans_board.results.load import find_runs
    from fewtrans_board.website.build import build_site

    shown = []
    for path in find_runs(list(results)) if results else []:
        reason = unshowable_run(path)
        if reason is None:
            shown.append(path)
        else:  # a table compares runs over every episode of the manifest
            click.echo(f"Warning: not shown: {reason}", err=True)
    cache = SummaryCache(None if no_cache else default_root())
    pages = build_site(leaderboard, out, app.registry, shown, cache=cache, build_date=build_date)
    click.echo(f"wrote {len(pages)} pages to {out}; open {out / 'index.html'}")
