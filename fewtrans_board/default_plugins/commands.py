"""Built-in CLI commands, registered through the same hook third parties use."""

from __future__ import annotations

import click

from fewtrans_board.api.hookspecs import hookimpl


@hookimpl
def register_commands(cli: click.Group) -> None:
    """Attach the built-in commands."""
    from fewtrans_board.cli.analyze_cmd import analyze_group
    from fewtrans_board.cli.compare_cmd import compare_command
    from fewtrans_board.cli.demo_cmd import demo_command
    from fewtrans_board.cli.evaluate_cmd import evaluate_command, results_group
    from fewtrans_board.cli.groups import renamed_command
    from fewtrans_board.cli.hpe_analyses_cmd import analyze_cross_validation, analyze_grid_spacing
    from fewtrans_board.cli.hpe_cmd import hpe_group
    from fewtrans_board.cli.leaderboard_cmd import leaderboard_group, submission_group
    from fewtrans_board.cli.listing import (
        adapters_group,
        datasets_group,
        models_group,
        plugins_command,
    )
    from fewtrans_board.cli.manifest_cmd import datasets_scan, manifest_group
    from fewtrans_board.cli.meta_cmd import meta_train_command
    from fewtrans_board.cli.preflight_cmd import preflight_command
    from fewtrans_board.cli.reproduce_cmd import reproduce_command
    from fewtrans_board.cli.site_cmd import site_group
    from fewtrans_board.cli.sub_benchmarks_cmd import sub_benchmarks_command
    from fewtrans_board.cli.sweep_cmd import sweep_command
    from fewtrans_board.cli.unlearn_cmd import tkl_command, unlearn_command

    datasets_group.add_command(datasets_scan)
    analyze_group.add_command(analyze_cross_validation)
    analyze_group.add_command(analyze_grid_spacing)
    # Former names, hidden and warning, for one release (one meaning per word: 'validate'
    # checks bundles, 'check' the leaderboard, 'benchmarks/' holds the timing scripts).
    datasets_group.add_command(renamed_command(datasets_scan, "check"))
    for command in (
        plugins_command,
        datasets_group,
        models_group,
        adapters_group,
        manifest_group,
        evaluate_command,
        sweep_command,
        results_group,
        hpe_group,
        preflight_command,
        demo_command,
        submission_group,
        leaderboard_group,
        sub_benchmarks_command,
        compare_command,
        site_group,
        unlearn_command,
        tkl_command,
        analyze_group,
        meta_train_command,
        reproduce_command,
    ):
        cli.add_command(command)
    cli.add_command(renamed_command(preflight_command, "validate"))
    cli.add_command(renamed_command(sub_benchmarks_command, "benchmarks"))
