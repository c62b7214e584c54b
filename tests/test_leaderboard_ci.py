"""The CI workflow calls real commands; compare prints the paired report."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from fewtrans_board.plugins.loading import get_plugin_manager

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / ".github" / "workflows" / "leaderboard.yml"


def workflow_commands() -> list[list[str]]:
    text = WORKFLOW.read_text()
    commands = []
    for match in re.finditer(r"fewtrans-board((?: [a-z][a-z-]*)+)", text):
        commands.append(match.group(1).split())
    return commands


def test_workflow_commands_exist(invoke) -> None:  # type: ignore[no-untyped-def]
    commands = workflow_commands()
    assert ["leaderboard", "check-pr"] in [c[:2] for c in commands]
    assert ["leaderboard", "rebuild"] in [c[:2] for c in commands]
    assert ["site", "build"] in [c[:2] for c in commands]
    for words in commands:
        result = invoke([*words[:2], "--help"])
        assert result.exit_code == 0, (words, result.output)
    text = WORKFLOW.read_text()
    assert (
        "pull_request:" in text and "leaderboard/submissions/**" in text and "deploy-pages" in text
    )
    assert "vars.VERIFY_RUNNER" in text  # the GPU runner label is configurable


@pytest.mark.slow
def test_compare_two_demo_runs(mean_centroid_runs: dict[str, Path], invoke) -> None:  # type: ignore[no-untyped-def]
    """On the shared mean-centroid runs (every episode of the demo benchmark's manifest)."""
    pm = get_plugin_manager(entry_points=False)
    pretrained, random = (
        str(mean_centroid_runs[m]) for m in ("demo-cnn.digits", "demo-cnn.random")
    )
    text = invoke(["compare", pretrained, random], pm=pm).output
    assert (
        "A = demo-cnn.digits / mean-centroid" in text and "overall" in text and "Cohen's d" in text
    )
    report = json.loads(
        invoke(
            ["compare", pretrained, random, "--json"],
            pm=pm,
        ).output
    )
    row = report["datasets"][0]
    assert row["dataset"] == "digits" and row["episodes"] == 600
    assert (
        row["difference"] == row["a"] - row["b"]
        or abs(row["difference"] - (row["a"] - row["b"])) < 1e-9
    )
    assert row["significant"] and report["overall"]["difference_ci"][0] > 0


@pytest.mark.slow
def test_committed_leaderboard_is_valid_and_its_index_current(invoke) -> None:  # type: ignore[no-untyped-def]
    """What CI on main relies on: every stored entry re-validates, index.json is derived."""
    store = ROOT / "leaderboard"
    entries = sorted(p.name for p in (store / "submissions").iterdir() if p.is_dir())
    assert entries, "the committed demo entries are missing"
    for ident in entries:
        result = invoke(["leaderboard", "check", ident, "--leaderboard", str(store), "--json"])
        assert result.exit_code == 0, (ident, result.output)
    result = invoke(["leaderboard", "rebuild", "--check", "--leaderboard", str(store)])
    assert result.exit_code == 0, result.output
