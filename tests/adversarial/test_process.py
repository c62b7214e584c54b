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
from fewtrans_board.registry.manager import get_plugin_manager
from tests.adversarial.conftest import REPO, Board, ok, run_cli
from tests.conftest import VERIFY_WORKFLOW, command_options, run_commands, workflow_step


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
    from fewtrans_board.cli.listing import plugins_command

    own = plugins_command.callback  # the built-in's own function, before any plugin ran
    assert own is not None and own.__module__ == "fewtrans_board.cli.listing"
    pm = get_plugin_manager(entry_points=False, extra_plugins={"hijacker": Hijacker()})
    with pytest.raises(PluginError, match=r"hijacker.*failed to register its commands"):
        make_cli(pm)
    clean = make_cli(get_plugin_manager(entry_points=False))
    # Still the built-in's own function (the hijacker's lambda is a callback too).
    assert clean.commands["plugins"].callback is own and plugins_command.callback is own
    assert "hijacked" not in run_cli(get_plugin_manager(entry_points=False), ["plugins"]).output


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
    """A repository whose main holds the tiny store; branch ``pr`` adds an honest entry.

    Its store ignores new entries' ``status.json`` as this repository's does, so the
    honest pull request (``commit``) carries none.
    """
    repo = tmp_path / "repo"
    shutil.copytree(board.store / "manifests", repo / "leaderboard" / "manifests")
    shutil.copy(REPO / "leaderboard" / ".gitignore", repo / "leaderboard" / ".gitignore")
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


ENTRY_STATUS = Path("leaderboard") / "submissions" / "lp--pr" / "status.json"


def stored_digest(repo: Path, ident: str = "lp--pr") -> str:
    from fewtrans_board.leaderboard.store import LeaderboardStore

    return LeaderboardStore(repo / "leaderboard").entry_contents(ident).digest()


def ci_status(board: Board, repo: Path, out: Path) -> dict:  # type: ignore[type-arg]
    """``check-pr --verify --status-out out`` on the honest pull request: CI's status file."""
    code, report = check_pr(board, repo, "--verify", "--sample", "1", "--status-out", out)
    assert code == 0 and report["ok"], report
    return json.loads((out / "lp--pr.json").read_text())


def merge(repo: Path) -> None:
    git(repo, "checkout", "-q", "main")
    git(repo, "merge", "-q", "pr")


def record_status(board: Board, repo: Path, folder: Path) -> tuple[int, dict]:  # type: ignore[type-arg]
    args = ["leaderboard", "record-status", folder, "--leaderboard", repo / "leaderboard"]
    return board.json(args)


def test_a_pull_request_may_not_add_change_or_delete_an_entry_status() -> None:
    """Red team (classify's status-from-ci), without git: every form of an entry's status."""
    from fewtrans_board.core.errors import SubmissionError
    from fewtrans_board.leaderboard.pr import classify

    meta = ("A", "leaderboard/submissions/x/submission.toml")
    status = "leaderboard/submissions/x/status.json"
    assert classify([meta]).ids == ["x"]  # control: the entry without one
    for change, fix in (
        ("A", "git rm --cached"),
        ("M", "git checkout BASE"),
        ("D", "git checkout"),
    ):
        with pytest.raises(SubmissionError, match=r"\[status-from-ci\] leaderboard/sub") as info:
            classify([meta, (change, status)])
        assert "is written by CI from the check it runs; " in str(info.value)
        assert fix in str(info.value) and str(info.value).endswith(f"{status})")


@pytest.mark.slow  # git, sandboxed plugin workers
def test_a_pull_request_that_claims_verification_is_refused(board: Board, pr_repo: Path) -> None:
    """Red team (classify's status-from-ci): a pull request may carry no status.json at all.

    Not even one copied from a real, passed verification report of this very entry, which
    the old check (the claimed status word against whether CI verified) accepted with
    --verify: the index then published the copied report's mode, episodes and catch
    probability, not what CI re-ran. Nor any other content.
    """
    args = ["leaderboard", "check", "lp--pr", "--leaderboard", pr_repo / "leaderboard"]
    code, checked = board.json([*args, "--verify", "--sample", "1"])
    assert code == 0 and checked["verification"]["passed"], checked
    claims = (
        {"status": "verified", "verification": checked["verification"]},
        {"status": "verified"},
        {"status": "validated"},
    )
    for claim in claims:
        (pr_repo / ENTRY_STATUS).write_text(json.dumps(claim))
        # ... and the index rebuilt from it, as the forger would, so that it is not stale.
        ok(run_cli(board.pm, ["leaderboard", "rebuild", "--leaderboard", pr_repo / "leaderboard"]))
        git(pr_repo, "add", "-f", str(ENTRY_STATUS))
        commit(pr_repo, "add lp--pr, verified (trust me)")
        code, report = check_pr(board, pr_repo, "--verify", "--sample", "1")
        assert code == 1 and report["code"] == "status-from-ci", (claim, report)
        assert report["error"] == (
            f"[status-from-ci] {ENTRY_STATUS.as_posix()}: status.json is written by CI from "
            f"the check it runs; remove it from the pull request (git rm --cached "
            f"{ENTRY_STATUS.as_posix()})"
        )


@pytest.mark.slow  # git, sandboxed plugin workers
def test_ci_writes_the_status_and_record_status_publishes_its_report(
    board: Board, pr_repo: Path, tmp_path: Path
) -> None:
    """Honest control: the pull request without status.json passes; CI's report becomes it."""
    from fewtrans_board.leaderboard.index import VERIFIED_FIELDS

    commit(pr_repo, "add lp--pr")
    assert (pr_repo / ENTRY_STATUS).is_file()  # 'leaderboard add' wrote one, git ignored it
    assert "status.json" not in git(pr_repo, "ls-files", "leaderboard")
    out = tmp_path / "status"
    code, report = check_pr(board, pr_repo, "--verify", "--sample", "1", "--status-out", out)
    assert code == 0 and report["ok"], report
    assert sorted(p.name for p in out.iterdir()) == ["lp--pr.json"]
    status = json.loads((out / "lp--pr.json").read_text())
    verification = report["entries"]["lp--pr"]["verification"]
    assert status == {"status": "verified", "verification": verification}
    assert verification["digest"] == stored_digest(pr_repo) and verification["passed"]
    # Checked without verification: nothing to record.
    unverified = tmp_path / "unverified"
    code, report = check_pr(board, pr_repo, "--status-out", unverified)
    assert code == 0 and report["ok"] and list(unverified.iterdir()) == []

    merge(pr_repo)
    code, recorded = record_status(board, pr_repo, out)
    assert code == 0 and recorded == {
        "ok": True,
        "recorded": {"lp--pr": str(out / "lp--pr.json")},
        "refused": {},
    }
    assert json.loads((pr_repo / ENTRY_STATUS).read_text()) == status
    index = json.loads((pr_repo / "leaderboard" / "index.json").read_text())
    (entry,) = [e for e in index["submissions"] if e["id"] == "lp--pr"]
    assert entry["status"] == "re-run"
    assert entry["verification"]["datasets"] == [
        {k: d.get(k) for k in VERIFIED_FIELDS} for d in verification["datasets"]
    ]
    assert entry["verification"]["seed_source"] == verification["seed_source"]


@pytest.mark.slow  # git, sandboxed plugin workers
def test_record_status_refuses_a_report_of_other_files_or_one_that_failed(
    board: Board, pr_repo: Path, honest: dict[str, str], tmp_path: Path
) -> None:
    """Red team (checked_status): a report is recorded only for the files it verified."""
    commit(pr_repo, "add lp--pr")
    status = ci_status(board, pr_repo, tmp_path / "status")
    merge(pr_repo)
    # A forged entry beside it, stored without verification.
    bundle = board.pack("lp--forged", "linear-probe", [honest["varied"], honest["fixed"]])
    store = pr_repo / "leaderboard"
    ok(
        run_cli(
            board.pm, ["leaderboard", "add", bundle, "--leaderboard", store, "--unsafe-no-verify"]
        )
    )
    forged_status = store / "submissions" / "lp--forged" / "status.json"

    def refused(name: str, record: dict) -> tuple[str, str]:  # type: ignore[type-arg]
        folder = tmp_path / f"case-{len(list(tmp_path.iterdir()))}"
        folder.mkdir()
        (folder / name).write_text(json.dumps(record))
        before = {
            p: p.read_bytes() for p in (store / "index.json", forged_status, pr_repo / ENTRY_STATUS)
        }
        code, outcome = record_status(board, pr_repo, folder)
        assert code == 1 and not outcome["ok"] and outcome["recorded"] == {}, outcome
        assert {p: p.read_bytes() for p in before} == before  # nothing written
        (refusal,) = outcome["refused"].items()
        assert refusal[0] == name
        return refusal[1]["code"], refusal[1]["error"]

    honest_report = status["verification"]
    # The honest report copied onto the forged entry, as is and with its id edited.
    code, error = refused("lp--forged.json", status)
    assert code == "status-digest-mismatch" and "verified submission 'lp--pr'" in error
    edited = {**status, "verification": {**honest_report, "submission": "lp--forged"}}
    code, error = refused("lp--forged.json", edited)
    assert code == "status-digest-mismatch" and "stored entry lp--forged has digest" in error
    # The entry on main is not the one CI checked (it changed after the check).
    centre = store / "submissions" / "lp--pr" / "centre-search.json"
    centre.write_text(centre.read_text() + "\n")
    code, error = refused("lp--pr.json", status)
    assert code == "status-digest-mismatch" and error.startswith(
        "[status-digest-mismatch] lp--pr.json:"
    )
    git(pr_repo, "checkout", "--", str(centre.relative_to(pr_repo)))
    # A report that did not pass, or no report at all.
    failed = {**status, "verification": {**honest_report, "passed": False}}
    assert refused("lp--pr.json", failed)[0] == "status-not-passed"
    assert refused("lp--pr.json", {"status": "validated"})[0] == "status-not-passed"
    assert refused("lp--pr.json", {"status": "gold"})[0] == "bad-status"
    assert refused("lp--nobody.json", status)[0] == "unknown-submission"
    # Control: the same folder machinery records the honest report.
    folder = tmp_path / "honest"
    folder.mkdir()
    (folder / "lp--pr.json").write_text(json.dumps(status))
    code, outcome = record_status(board, pr_repo, folder)
    assert code == 0 and outcome["recorded"] == {"lp--pr": str(folder / "lp--pr.json")}


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
    # The parsed workflow: the commands its steps run, not text a comment could hold.
    # The privileged half runs on workflow_run from main's copy of its file.
    job, path = "verify", VERIFY_WORKFLOW
    step = workflow_step(job, "Check the pull request (sandboxed verification)", path)
    (check,) = [c for c in run_commands(step) if c[0].endswith("fewtrans-board")]
    assert check[:5] == ["base/.venv/bin/fewtrans-board", "leaderboard", "check-pr", "--repo", "pr"]
    options = command_options(check)
    assert options["--plugins-root"] == "plugins" and "--verify" in options
    base = workflow_step(job, "Main (the code that judges)", path)
    pr = workflow_step(job, "Pull request (data only)", path)
    assert base["uses"].startswith("actions/checkout@") and base["with"]["path"] == "base"
    assert pr["uses"].startswith("actions/checkout@") and pr["with"]["path"] == "pr"
    # Base: main's tip (checkout's default on workflow_run, github.sha); the diff is taken
    # against the judge's code.
    assert "ref" not in base["with"] and step["env"]["BASE_SHA"] == "${{ github.sha }}"
    assert options["--base"] == "$BASE_SHA"
    # CI's own report is the status, kept as an artifact for the record-statuses job.
    kept = workflow_step(
        job, "Keep CI's statuses (recorded on main by record-statuses after the merge)", path
    )
    assert (
        options["--status-out"] == "reports/status" and kept["uses"] == "actions/upload-artifact@v4"
    )
    assert kept["with"]["path"] == "reports/status" and kept["if"] == "always()"
    # The PR's data: GitHub's refs/pull/<n>/head, checked to be the triggering run's head.
    assert pr["with"]["ref"] == "refs/pull/${{ steps.pr.outputs.number }}/head"
    assert "github.event.workflow_run.head_sha" in kept["with"]["name"]
    recorded = run_commands(
        workflow_step("record-statuses", "Record them as the entries' status and push")
    )
    assert ["leaderboard", "record-status"] in [c[1:3] for c in recorded]
