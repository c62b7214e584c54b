"""``compare``: a paired comparison of two methods on shared episodes."""

from __future__ import annotations

from pathlib import Path

import click

from fewtrans_board.cli.groups import SEED, echo_json, echo_table


@click.command("compare")
@click.argument("run_a", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.argument("run_b", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--seed", type=SEED, default=0, show_default=True, help="Bootstrap seed.")
@click.option(
    "--allow-protocol-mismatch",
    is_flag=True,
    help="Compare runs scored under different HPE protocols (not a fair comparison).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
def compare_command(
    run_a: Path, run_b: Path, seed: int, allow_protocol_mismatch: bool, as_json: bool
) -> None:
    """Paired comparison of RUN_A vs RUN_B on shared episodes (FewTrans Table VIII style).

    RUN_A and RUN_B are run folders, or folders holding one run per dataset. Both must be
    scored under the same HPE protocol (grid and fusion) unless --allow-protocol-mismatch.
    Per dataset: both means, the difference, the paired t-test's p (the paper's column), the
    same p Holm-adjusted across the datasets, Wilcoxon's p and Cohen's d.
    """
    from fewtrans_board.leaderboard.compare import compare_runs

    report = compare_runs(run_a, run_b, seed=seed, allow_protocol_mismatch=allow_protocol_mismatch)
    if report["protocol_mismatch"] and not as_json:
        click.echo(
            "WARNING: A and B were scored under different HPE protocols; the differences "
            "below mix method and protocol effects.",
            err=True,
        )
    if as_json:
        echo_json(report)
        return
    pa, pb = report["protocols"]["a"], report["protocols"]["b"]
    click.echo(
        f"A = {report['a']} [HPE {pa['name']}, {pa['aggregation']}]\n"
        f"B = {report['b']} [HPE {pb['name']}, {pb['aggregation']}]\n"
        "(HPE accuracy %, paired over shared episodes; p (t): the paired t-test's p, as "
        "FewTrans Table VIII prints it; p (t, Holm): adjusted across the datasets, * below 0.05)"
    )
    rows = [
        [
            r["dataset"],
            r["episodes"],
            f"{r['a']:.2f}",
            f"{r['b']:.2f}",
            f"{r['difference']:+.2f}",
            f"{r['t_p']:.4g}",
            f"{r['t_p_holm']:.4g}{' *' if r['significant'] else ''}",
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
            f"{o['t_p']:.4g}",
            "-",
            f"{o['wilcoxon_p']:.2g}",
            f"{o['cohens_d']:+.2f}",
        ]
    )
    echo_table(
        [
            *("dataset", "episodes", "A", "B", "A - B", "p (t)", "p (t, Holm)"),
            *("p (Wilcoxon)", "Cohen's d"),
        ],
        rows,
    )
