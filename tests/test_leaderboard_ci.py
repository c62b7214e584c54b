"""The CI workflow calls real commands; compare prints the paired report."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from fewtrans_board.registry.manager import get_plugin_manager
from tests.conftest import VERIFY_WORKFLOW, run_commands, workflow

ROOT = Path(__file__).resolve().parents[1]


def workflow_commands() -> list[list[str]]:
    """The fewtrans-board subcommands the workflow's steps run (comments are not steps)."""
    commands = []
    jobs = [*workflow()["jobs"].values(), *workflow(VERIFY_WORKFLOW)["jobs"].values()]
    for job in jobs:
        for step in job["steps"]:
            for words in run_commands(step):
                if words[0].endswith("fewtrans-board"):
                    names = [w for w in words[1:3] if re.fullmatch(r"[a-z][a-z-]*", w)]
                    commands.append(names)
    return commands


def test_workflow_commands_exist(invoke) -> None:  # type: ignore[no-untyped-def]
    commands = workflow_commands()
    assert ["leaderboard", "check-pr"] in [c[:2] for c in commands]
    assert ["leaderboard", "rebuild"] in [c[:2] for c in commands]
    assert ["site", "build"] in [c[:2] for c in commands]
    for words in commands:
        result = invoke([*words[:2], "--help"])
        assert result.exit_code == 0, (words, result.output)
    data = workflow()
    deploy = [s.get("uses", "") for s in data["jobs"]["deploy-site"]["steps"]]
    assert (
        "leaderboard/submissions/**" in data["on"]["pull_request"]["paths"]
        and "actions/deploy-pages@v4" in deploy
    )
    # the GPU runner label is configurable
    assert "vars.VERIFY_RUNNER" in workflow(VERIFY_WORKFLOW)["jobs"]["verify"]["runs-on"]
    assert ["leaderboard", "pr-comment"] in [c[:2] for c in commands]


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


def workflow_jobs() -> dict[str, dict]:  # type: ignore[type-arg]
    return workflow()["jobs"]  # type: ignore[no-any-return]


def test_only_the_publish_job_holds_blob_credentials_and_nothing_reaches_a_shell() -> None:
    jobs = workflow_jobs()
    publish = jobs["publish-blobs"]
    # Runs on a push to main only, on main's code, in its own environment.
    assert publish["if"] == "github.event_name == 'push'" and "environment" in publish
    assert publish["permissions"] == {"contents": "read"}
    text = json.dumps(publish)
    assert "secrets.BLOBS_" in text and "pull_request" not in text
    for name, job in {**jobs, **workflow(VERIFY_WORKFLOW)["jobs"]}.items():
        secrets = set(re.findall(r"secrets\.(\w+)", json.dumps(job)))
        allowed = {"VERIFY_SECRET"} if name == "verify" else set()
        if name == "publish-blobs":
            allowed = {
                "BLOBS_AWS_ACCESS_KEY_ID",
                "BLOBS_AWS_SECRET_ACCESS_KEY",
                "BLOBS_WRITE_TOKEN",
            }
        assert secrets <= allowed, (name, secrets)
        for step in job["steps"]:
            # Nothing a pull request writes (its body, branch name, a file's content) is
            # interpolated into a script: values reach commands through env or as files.
            for expression in re.findall(r"\$\{\{(.*?)\}\}", step.get("run", "")):
                assert expression.strip() == "github.event.pull_request.base.sha", (name, step)
    # The site is built from git alone: no blob is fetched, no credential held.
    deploy = json.dumps(jobs["deploy-site"])
    assert "--with-logits" not in deploy and "secrets." not in deploy
    check = jobs["check-submissions"]["steps"]
    paths = workflow()["on"]["pull_request"]["paths"]  # a pull request naming staged blobs ...
    assert "leaderboard/blob-sources/**" in paths and "--blobs-from" not in json.dumps(check)
    # ... or editing where the store keeps them is checked
    assert all(p in paths for p in ("leaderboard/blob-sources/**", "leaderboard/blobs.toml"))


@pytest.mark.slow  # git
def test_the_publish_step_runs_on_a_store_keeping_blobs_in_git(invoke) -> None:  # type: ignore[no-untyped-def]
    """The publish step's command line, as the job runs it, on this repository's store."""
    (step,) = [
        s for s in workflow_jobs()["publish-blobs"]["steps"] if "publish-blobs" in s.get("run", "")
    ]
    words = step["run"].split()
    start = next(i for i, w in enumerate(words) if w.endswith("/fewtrans-board"))
    args = words[start + 1 :]
    args = [str(ROOT) if a == "." else "HEAD" if a == '"$SINCE"' else a for a in args]
    result = invoke(args)
    assert result.exit_code == 0 and "nothing to publish" in result.output, result.output
