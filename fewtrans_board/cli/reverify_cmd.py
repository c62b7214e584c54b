"""``leaderboard reverify``: re-run stored entries under today's verification rules."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from fewtrans_board.cli.groups import echo_json
from fewtrans_board.cli.reports import refusals
from fewtrans_board.cli.store_options import (
    leaderboard_option,
    verification_from,
    verification_options,
    weights_dir_option,
)


@click.command("reverify")
@click.argument("idents", nargs=-1, metavar="[IDS]...")
@click.option("--all", "every", is_flag=True, help="Every stored entry, superseded ones too.")
@click.option(
    "--plan",
    "plan_only",
    is_flag=True,
    help="Print per entry the episodes it would re-run and the estimated time; run nothing.",
)
@leaderboard_option
@weights_dir_option
@verification_options(root_help="Local dataset copies.")
def leaderboard_reverify(
    idents: tuple[str, ...],
    every: bool,
    plan_only: bool,
    leaderboard: Path,
    weights_dir: Path | None,
    as_json: bool,
    **options: Any,
) -> None:
    """Re-run stored entries under today's verification rules; update their status (maintainers).

    Each entry is re-run as 'leaderboard check ID --verify' re-runs it (validation, then a
    secret sample of episodes in a fresh sandboxed plugin worker). A passed report replaces
    the entry's status.json atomically and the index is rebuilt at the end; an entry whose
    re-run fails is reported and keeps its old record, and the command exits with status 1.
    Run --plan first: it prints each entry's episodes, estimated time and checkpoint. With
    --weights-dir, entries of one model with different weights (a CLIP and its unlearned
    copy) each re-run with their own checkpoint, found by the digest their runs record.
    """
    from fewtrans_board.leaderboard.reverify import plan_entries, reverify_entries
    from fewtrans_board.leaderboard.store import LeaderboardStore

    if every == bool(idents):
        raise click.UsageError("name the entries to re-verify, or give --all (not both)")
    if any(not ident.strip() for ident in idents):
        raise click.BadParameter("an entry id is empty ('' given)", param_hint="IDS")
    store = LeaderboardStore(leaderboard)
    chosen = store.submission_ids() if every else list(dict.fromkeys(idents))
    verification = verification_from(options)
    if plan_only:
        plans = plan_entries(store, chosen, verification.options, weights_dir)
        total = sum(p.estimate_s for p in plans)
        refused = any(p.error is not None for p in plans)
        if as_json:
            entries = [p.to_dict() for p in plans]
            echo_json({"ok": not refused, "estimate_s": round(total, 1), "entries": entries})
        else:
            for plan in plans:
                click.echo(plan.line())
            click.echo(
                f"{len(plans)} entries, about {total / 60:.1f} min of re-runs in all "
                "(verification's estimate: worker start, decoding, embedding, claimed fit "
                "seconds, probes; where the re-runs are slower than claimed, past the budget, "
                "only the minimum is re-run)"
            )
        if refused:  # the run would fail for these: a plan that says so exits as the run would
            if as_json:
                raise click.exceptions.Exit(1)
            names = [p.ident for p in plans if p.error is not None]
            raise click.ClickException(
                f"{len(names)} of {len(plans)} entries cannot be re-run: {', '.join(names)} "
                "(why above); fix them or leave them out"
            )
        return
    with refusals(as_json):
        outcomes = reverify_entries(
            store,
            chosen,
            verification,
            progress=(lambda _: None) if as_json else click.echo,
            weights_dir=weights_dir,
        )
    failed = [o for o in outcomes if not o.ok]
    if as_json:
        echo_json({"ok": not failed, "entries": [o.to_dict() for o in outcomes]})
    else:
        click.echo(
            f"{len(outcomes) - len(failed)} of {len(outcomes)} entries re-run"
            + (f"; index rebuilt at {store.index_path}" if len(failed) < len(outcomes) else "")
        )
        for outcome in failed:
            click.echo(f"not re-verified: {outcome.line()}", err=True)
    if failed:
        raise click.exceptions.Exit(1)
