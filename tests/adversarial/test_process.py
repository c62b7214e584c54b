"""Cheaters that go after the process and the repository: the CLI, imports, CI."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import click
import pytest

from fewtrans_board import hookimpl
from fewtrans_board.cli import make_cli, needs_plugins
from fewtrans_board.core.errors import DuplicateNameError, PluginError
from fewtrans_board.plugins.loading import get_plugin_manager
from tests.adversarial.conftest import REPO, Board, ok, run_cli


class Hijacker:
    """Tries to replace the built-in ``plugins`` command through the hook's argument."""

    @hookimpl
    def register_commands(self, cli: click.Group) -> None:
        cli.commands["plugins"].callback = lambda **_: click.echo("hijacked")


class Shadower:
    """Tries to register its own ``evaluate``."""

    @hookimpl
    def register_commands(self, cli: click.Group) -> None:
        @cli.command("evaluate")
        def evaluate() -> None:
            click.echo("shadowed")


def test_a_plugin_cannot_reach_builtin_commands() -> None:
    pm = get_plugin_manager(entry_points=False, extra_plugins={"hijacker": Hijacker()})
    with pytest.raises(PluginError, match=r"hijacker.*failed to register its commands"):
        make_cli(pm)
    clean = make_cli(get_plugin_manager(entry_points=False))
    assert "hijacked" not in run_cli(get_plugin_manager(entry_points=False), ["plugins"]).output
    assert clean.commands["plugins"].callback is not None


def test_a_plugin_cannot_take_a_builtin_name() -> None:
    pm = get_plugin_manager(entry_points=False, extra_plugins={"shadower": Shadower()})
    with pytest.raises(DuplicateNameError, match="'evaluate' is registered twice"):
        make_cli(pm)


def test_a_builtin_command_patched_at_import_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from fewtrans_board.cli.evaluate_cmd import evaluate_command

    def evil(**_: object) -> None:
        click.echo("patched")

    monkeypatch.setattr(evaluate_command, "callback", evil)
    with pytest.raises(PluginError, match=r"'evaluate' runs .*evil.*replaced or wrapped"):
        make_cli(get_plugin_manager(entry_points=False))


def test_scoring_commands_load_no_plugins() -> None:
    for argv in (
        ["submission", "validate", "b.zip"],
        ["leaderboard", "add", "b.zip"],
        ["leaderboard", "check-pr", "--base", "main"],
        ["site", "build"],
        ["compare", "a", "b"],
    ):
        assert not needs_plugins(argv), argv
    assert needs_plugins(["evaluate", "--model", "m"])


EVIL = """
import pathlib, os
pathlib.Path(os.environ["EVIL_MARKER"]).write_text("imported")
import fewtrans_board.leaderboard.validate as v

def accept(*args, **kwargs):
    raise SystemExit(0)

v.validate_contents = accept
"""


@pytest.mark.slow
def test_an_import_time_monkeypatch_cannot_change_a_verdict(tmp_path: Path) -> None:
    site = tmp_path / "site"
    info = site / "fewtrans_evil-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fewtrans-evil\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[fewtrans_board]\nevil = fewtrans_evil\n")
    (site / "fewtrans_evil.py").write_text(EVIL)
    marker = tmp_path / "marker"
    bogus = tmp_path / "bogus.zip"
    bogus.write_bytes(b"PK not a zip")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
        "EVIL_MARKER": str(marker),
    }
    command = [sys.executable, "-m", "fewtrans_board"]
    result = subprocess.run(
        [*command, "submission", "validate", str(bogus), "--leaderboard", str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1 and "[not-a-zip]" in result.stderr, result.stderr
    assert not marker.exists()
    # Other commands do load it: the test plugin itself works.
    subprocess.run([*command, "plugins", "--json"], env=env, capture_output=True, check=False)
    assert marker.exists()


# --- pull requests ------------------------------------------------------------------------


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
    ).stdout


@pytest.fixture
def pr_repo(board: Board, honest: dict[str, str], tmp_path: Path) -> Path:
    """A repository whose main holds the tiny store; branch ``pr`` adds an honest entry."""
    repo = tmp_path / "repo"
    shutil.copytree(board.store / "manifests", repo / "leaderboard" / "manifests")
    (repo / "fewtrans_board").mkdir()
    (repo / "fewtrans_board" / "__init__.py").write_text("# code\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "base")
    git(repo, "checkout", "-q", "-b", "pr")
    bundle = board.pack("lp--pr", "linear-probe", [honest["varied"], honest["fixed"]])
    ok(
        run_cli(
            board.pm,
            [
                "leaderboard",
                "add",
                bundle,
                "--leaderboard",
                repo / "leaderboard",
                "--unsafe-no-verify",
            ],
        )
    )
    return repo


def commit(repo: Path, message: str) -> None:
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", message)


def check_pr(board: Board, repo: Path, *extra: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    return board.json(["leaderboard", "check-pr", "--repo", repo, "--base", "main", *extra])


@pytest.mark.slow
def test_a_data_only_pull_request_passes(board: Board, pr_repo: Path) -> None:
    commit(pr_repo, "add lp--pr")
    code, report = check_pr(board, pr_repo)
    assert code == 0 and report["ok"] and report["ids"] == ["lp--pr"], report


@pytest.mark.slow
def test_a_pull_request_that_touches_code_is_refused(board: Board, pr_repo: Path) -> None:
    (pr_repo / "fewtrans_board" / "__init__.py").write_text("import os  # sneaky\n")
    commit(pr_repo, "add lp--pr and a little more")
    code, report = check_pr(board, pr_repo)
    assert code == 1 and report["code"] == "pr-touches-code", report
    assert "fewtrans_board/__init__.py" in report["error"]


@pytest.mark.slow
def test_a_pull_request_that_claims_verification_is_refused(board: Board, pr_repo: Path) -> None:
    status = pr_repo / "leaderboard" / "submissions" / "lp--pr" / "status.json"
    status.write_text(json.dumps({"status": "verified"}))
    commit(pr_repo, "add lp--pr, verified (trust me)")
    code, report = check_pr(board, pr_repo)
    assert code == 1 and report["code"] == "status-claim", report


@pytest.mark.slow
def test_a_pull_request_that_edits_a_stored_entry_is_refused(board: Board, pr_repo: Path) -> None:
    commit(pr_repo, "add lp--pr")
    git(pr_repo, "checkout", "-q", "main")
    git(pr_repo, "merge", "-q", "pr")
    git(pr_repo, "checkout", "-q", "-b", "pr2")
    meta = pr_repo / "leaderboard" / "submissions" / "lp--pr" / "submission.toml"
    meta.write_text(meta.read_text().replace('method = "linear-probe"', 'method = "better"'))
    commit(pr_repo, "rename my method")
    code, report = check_pr(board, pr_repo)
    assert code == 1 and report["code"] == "immutable", report


def test_the_workflow_checks_pull_requests_with_the_base_branch_code() -> None:
    text = (REPO / ".github" / "workflows" / "leaderboard.yml").read_text()
    assert "base/.venv/bin/fewtrans-board leaderboard check-pr --repo pr" in text
    assert "--plugins-root plugins" in text and "--verify" in text
    assert "path: base" in text and "path: pr" in text
