"""``demo``: the main job on the embedded default data."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from fewtrans_board.cli.app import App, pass_app
from fewtrans_board.cli.groups import (
    OutputPath,
    echo_json,
    echo_table,
)
from fewtrans_board.cli.summaries import print_summaries


@click.command("demo")
@click.option(
    "--out",
    type=OutputPath(file_okay=False),
    default=Path("demo-output"),
    show_default=True,
    help="Folder for the manifest, results (and site).",
)
@click.option(
    "--episodes",
    type=click.IntRange(1, 600),
    default=200,
    show_default=True,
    help="Episodes of the frozen digits manifest to evaluate (600 = all; the inductive "
    "miniature has 15).",
)
@click.option(
    "--adapters",
    default=None,
    help="Comma-separated adapters [default: mean-centroid,linear-probe,cosine-classifier; "
    "with --inductive: linear-probe,coop,taskres].",
)
@click.option(
    "--inductive",
    is_flag=True,
    help="Run the inductive-CLIP miniature instead: unlearn the digits 5-9 from the demo "
    "CLIP and compare it with the original and a model trained without 5-9.",
)
@click.option("--json", "as_json", is_flag=True, help="Print summaries as JSON.")
@click.option("--quiet", is_flag=True, help="No progress bars.")
@pass_app
def demo_command(
    app: App,
    out: Path,
    episodes: int,
    adapters: str | None,
    inductive: bool,
    as_json: bool,
    quiet: bool,
) -> None:
    """Run HPE on the embedded digits: pretrained demo CNN vs its random-init twin.

    Builds (and hash-checks) the frozen digits manifest, evaluates each adapter on both
    backbones, and prints mean ± 95% CI per run and the paired gain from pretraining. A
    pair the leaderboard store ranks on the demo sub-benchmark runs under that entry's HPE
    protocol and searched centre (so --episodes 600 gives the board's numbers), any other
    under the demo's leaderboard protocol (fewtrans-reference). Runs resume if interrupted.

    With --inductive: the inductive-CLIP miniature (SSD unlearning of the digits 5-9 from
    demo-clip.digits, zero-shot and CoOp-style few-shot tables against the original and the
    oracle trained without 5-9, a verdict per method on unlearned vs trained without (paired
    over episodes), and a site comparing both CLIP settings with the oracle check).
    """
    if inductive:
        _inductive(app, out, adapters, episodes, as_json, quiet)
        return
    from fewtrans_board.cli.protocol_choice import default_store
    from fewtrans_board.jobs.demo import run_demo

    if adapters is None:
        adapters = "mean-centroid,linear-probe,cosine-classifier"
    names = [a.strip() for a in adapters.split(",") if a.strip()]
    if not names:
        raise click.BadParameter("names no adapter", param_hint="--adapters")
    for name in names:
        app.registry.adapters.get(name)  # an unknown name fails here, before anything is written
    result = run_demo(
        app.registry,
        out,
        episodes=episodes,
        adapters=names,
        progress=not (quiet or as_json),  # a bar on a terminal, lines with ETA in a log
        store=default_store(),
    )
    if as_json:
        echo_json(
            {
                "out": str(out),
                "summaries": result.summaries,
                "gains": result.gains,
                "site": str(result.site_index) if result.site_index else None,
            }
        )
        return
    print_summaries(result.summaries)
    _print_board_lines(result.summaries)
    click.echo("\nPretraining gain (paired over shared episodes, HPE accuracy, 95% CI):")
    echo_table(
        ["adapter", "pretrained - random (points)", "episodes"],
        [[g["adapter"], f"{g['mean']:+.2f} ± {g['ci95']:.2f}", g["n"]] for g in result.gains],
    )
    click.echo(f"\nresults: {out / 'results'}")
    if result.site_index is not None:
        click.echo(f"site: {result.site_index.resolve()}")


def _print_board_lines(summaries: list[dict[str, Any]]) -> None:
    """Per run: the board entry it repeats (same protocol and centre) and the entry's number."""
    click.echo("")
    for s in summaries:
        board = s.get("board")
        run = f"{s['model']} / {s['adapter']}"
        if board is None:
            click.echo(f"{run}: no board entry; run under {s['hpe_protocol']} (the demo's)")
            continue
        head = board.get("headline")
        number = (
            f" {head['mean']:.2f} ± {head['ci95']:.2f} over {head['n']} episodes" if head else ""
        )
        same = head is not None and head["n"] == s["episodes"]
        click.echo(
            f"{run}: board entry {board['id']}{number} ({board['hpe_protocol']}, the same "
            f"centre){'' if same else '; --episodes 600 reproduces it'}"
        )


def _print_oracle_check(result: Any) -> None:
    """The verdict table, and how held-out selection chose configurations."""
    rows = result.oracle_rows()
    if rows:
        margin = rows[0]["margin"]
        click.echo(
            f"\nOracle check: unlearned vs trained without 5-9, paired over episodes "
            f"(verdict: 95% CI of the difference within ±{margin:g} points):"
        )
        echo_table(
            ["adapter", "unlearned", "trained without", "difference [95% CI]", "t p", "Wilcoxon p"],
            [
                [
                    r["adapter"],
                    f"{r['unlearned']:.1f}",
                    f"{r['scratch']:.1f}",
                    f"{r['difference']:+.1f} [{r['low']:+.1f}, {r['high']:+.1f}]",
                    f"{r['t_p']:.3g}",
                    f"{r['wilcoxon_p']:.3g}",
                ]
                for r in rows
            ],
        )
        for r in rows:
            click.echo(f"{r['adapter']}: {r['line']}")
    for adapter, roles in result.selected.items():
        chosen = ", ".join(
            f"{role} {c['field']}={c['config'][c['field']]:g}" for role, c in roles.items()
        )
        click.echo(
            f"\n{adapter}: {next(iter(roles.values()))['recipe']} recipe, {chosen} "
            "(chosen on held-out episodes inside the digits 5-9 train split)"
        )


def _inductive(
    app: App, out: Path, adapters: str | None, episodes: int, as_json: bool, quiet: bool
) -> None:
    from fewtrans_board.jobs.inductive_demo import DEFAULT_ADAPTERS, MODELS, run_inductive_demo

    names = [a.strip() for a in (adapters or "").split(",") if a.strip()] or DEFAULT_ADAPTERS
    say = (lambda _m: None) if (quiet or as_json) else (lambda m: click.echo(m, err=True))
    result = run_inductive_demo(
        app.registry,
        out,
        adapters=names,
        episodes=episodes if episodes < 15 else None,  # the miniature has 15 episodes
        progress=not (quiet or as_json),
        report=say,
    )
    if as_json:
        echo_json(
            {
                "out": str(out),
                "models": MODELS,
                "unlearning": result.unlearning,
                "zero_shot": result.zero_shot,
                "few_shot": result.few_shot,
                "gaps": result.gaps,
                "oracle_check": result.oracle_rows(),
                "selected": result.selected,
                "site": str(result.site_index) if result.site_index else None,
            }
        )
        return

    def cell(stats: dict[str, Any]) -> str:
        return f"{stats['mean']:.1f} ± {stats['ci95']:.1f}"

    roles = list(MODELS)
    click.echo("Models: " + ", ".join(f"{r} = {m}" for r, m in MODELS.items()))
    click.echo("\nZero-shot accuracy on the test halves (%, 95% CI):")
    echo_table(
        ["dataset", *roles, "chance"],
        [
            [d, *(cell(z[r]) for r in roles), f"{z['original']['chance']:.0f}"]
            for d, z in result.zero_shot.items()
        ],
    )
    click.echo("\nFew-shot accuracy on digits 5-9 (%, 15 episodes: K in 1/2/4/8/16 x 3 seeds):")
    echo_table(
        ["adapter", *roles, "original - unlearned", "scratch - unlearned"],
        [
            [
                a,
                *(cell(result.few_shot[a][r]) for r in roles),
                *(f"{g['mean']:+.1f} ± {g['ci95']:.1f}" for g in result.gaps[a].values()),
            ]
            for a in result.few_shot
        ],
    )
    _print_oracle_check(result)
    click.echo(f"\nresults: {out / 'results'}")
    if result.site_index is not None:
        click.echo(f"site: {result.site_index.resolve()}")
