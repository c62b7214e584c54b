"""The leaderboard workflows, run locally as written (scripts/run_workflow_locally.py).

A bare repository is the origin; pull request 1 comes from a branch of it, pull request 2
from a fork (GitHub gives that run no secrets). Each ``pull_request`` run validates without
the secret and triggers ``leaderboard-verify`` (``workflow_run``), which verifies with it and
comments; after the merge ``record-statuses`` publishes CI's report as the entries' status
(a forged status artifact from the fork's own run is ignored), and a verification without
the secret (the issue's crash: an empty check.json) gets a comment saying nothing was verified.
Oracles: the seed is recomputed here as HMAC(secret, digest) (sampling's documented rule),
the comment and the published status are compared with the artifact CI uploaded.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fewtrans_board.leaderboard.pr import weights_in
from fewtrans_board.leaderboard.pr_comment import comment_for, render_comment

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from run_workflow_locally import REPOSITORY, World, run_workflow  # noqa: E402
from workflow_expr import Evaluator, condition  # noqa: E402

COMMITTED = ROOT / "leaderboard"
WORKFLOWS = ROOT / ".github" / "workflows"
SECRET = "local-verify-secret-0123456789"
SAME_REPO, FORK = "mean-centroid--demo-cnn", "mean-centroid--demo-cnn-random"
FORK_REPO = "someone/leaderboard-fork"


def git(cwd: Path, *args: str) -> str:
    command = ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args]
    return subprocess.run(
        command, cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


def add_entry(checkout: Path, ident: str) -> str:
    """Commit ``ident`` as a submitter would (without a status.json); the new head."""
    for kind in ("submissions", "results"):
        shutil.copytree(COMMITTED / kind / ident, checkout / "leaderboard" / kind / ident)
    (checkout / "leaderboard" / "submissions" / ident / "status.json").unlink()
    git(checkout, "add", "-A")
    git(checkout, "commit", "-q", "-m", f"add {ident}")
    return git(checkout, "rev-parse", "HEAD")


def local_install() -> str:
    """The install steps' local stand-in: base/.venv/bin/fewtrans-board runs this checkout's
    package (the origin holds the store, not the code)."""
    return (
        "mkdir -p base/.venv/bin\n"
        f'printf \'#!/bin/sh\\nFEWTRANS_BOARD_LOAD_PLUGINS= exec "%s" -m fewtrans_board "$@"\\n\' '
        f"'{sys.executable}' > base/.venv/bin/fewtrans-board\n"
        "chmod +x base/.venv/bin/fewtrans-board\n"
    )


def make_world(tmp: Path) -> tuple[World, dict[int, str], str]:
    """Origin with main (the store less two entries) and PRs 1 (branch) and 2 (fork)."""
    source, origin = tmp / "source", tmp / "origin.git"
    ignore = shutil.ignore_patterns("__pycache__", ".cache")
    shutil.copytree(COMMITTED, source / "leaderboard", ignore=ignore)
    for kind in ("submissions", "results"):
        for ident in (SAME_REPO, FORK):
            shutil.rmtree(source / "leaderboard" / kind / ident)
    git(tmp, "init", "-q", "-b", "main", str(source))
    git(source, "add", "-A")
    git(source, "commit", "-q", "-m", "main: the store")
    git(tmp, "clone", "-q", "--bare", str(source), str(origin))
    base = git(source, "rev-parse", "HEAD")
    git(source, "checkout", "-q", "-b", "add-entry")
    heads = {1: add_entry(source, SAME_REPO)}
    git(source, "push", "-q", str(origin), "add-entry", "HEAD:refs/pull/1/head")
    fork = tmp / "fork"
    git(tmp, "clone", "-q", str(origin), str(fork))
    heads[2] = add_entry(fork, FORK)
    git(fork, "push", "-q", str(origin), "HEAD:refs/pull/2/head")  # what GitHub does for a fork
    state, empty_weights, dtd = tmp / "state", tmp / "weights", tmp / "dtd"
    for folder in (state, empty_weights, dtd):
        folder.mkdir()
    install = local_install()
    world = World(
        origin,
        state,
        WORKFLOWS,
        vars={
            "VERIFY_SAMPLE": "1",
            "FEWTRANS_WEIGHTS_DIR": str(empty_weights),
            "FEWTRANS_DATA_ROOTS": f"dtd={dtd}",
        },
        secrets={"VERIFY_SECRET": SECRET},
        replace={
            "Install the base branch, then make it read-only": install,
            "record-statuses::Install": install,
            "Sandbox for the plugin worker": "command -v bwrap",
        },
    )
    repos = {1: REPOSITORY, 2: FORK_REPO}
    world.set_pulls(
        [
            {
                "number": n,
                "state": "open",
                "merged_at": None,
                "merge_commit_sha": None,
                "head": {"sha": heads[n], "repo": {"full_name": repos[n]}},
                "base": {"sha": base},
            }
            for n in (1, 2)
        ]
    )
    return world, heads, base


def pull_request_event(world: World, number: int) -> dict:  # type: ignore[type-arg]
    (pull,) = [p for p in world.pulls() if p["number"] == number]
    return {"number": number, "pull_request": pull}


def artifact_files(world: World, name: str) -> dict[str, dict]:  # type: ignore[type-arg]
    for meta_path in (world.state / "artifacts").glob("*/meta.json"):
        if json.loads(meta_path.read_text())["name"] == name:
            folder = meta_path.parent / "files"
            return {p.name: json.loads(p.read_text()) for p in folder.iterdir()}
    return {}


def failures(run) -> str:  # type: ignore[no-untyped-def]
    return "\n".join(
        f"{job.name}/{step.name}: {step.output[-3000:]}"
        for job in run.jobs.values()
        for step in job.steps
        if step.outcome == "failure"
    )


def verify_both(world: World, heads: dict[int, str]) -> tuple[dict[int, int], dict[int, dict]]:  # type: ignore[type-arg]
    """Open both pull requests; each is validated without and verified with the secret.

    Returns:
        The first-stage run ids and CI's status reports (the uploaded artifacts), by PR.
    """
    first_runs, reports = {}, {}
    for number, ident in ((1, SAME_REPO), (2, FORK)):
        first = run_workflow(
            world, WORKFLOWS / "leaderboard.yml", "pull_request", pull_request_event(world, number)
        )
        first_runs[number] = first.run_id
        validate = first.jobs["check-submissions"]
        assert validate.status == "success", failures(first)
        # The first stage never holds the secret (for the fork, GitHub withholds it).
        assert not any(step.secret_in_env for step in validate.steps)
        verify_run = world.runs[-1]
        assert (verify_run.workflow, verify_run.event) == ("leaderboard-verify.yml", "workflow_run")
        verify = verify_run.jobs["verify"]
        assert verify.status == "success", failures(verify_run)
        assert verify.step("Check the pull request (sandboxed verification)").secret_in_env
        ((name, report),) = artifact_files(world, f"leaderboard-status-{heads[number]}").items()
        assert name == f"{ident}.json" and report["verification"]["passed"] is True
        digest = report["verification"]["digest"]
        expected = hmac.new(SECRET.encode(), digest.encode(), hashlib.sha256).hexdigest()
        assert report["verification"]["seed"] == expected
        assert report["verification"]["seed_source"] == "secret"
        comment = (world.state / "comments" / f"{number}-1.md").read_text()
        assert f"`{ident}`" in comment and "verified" in comment and expected[:12] in comment
        reports[number] = report
    statuses = (world.state / "statuses.jsonl").read_text().splitlines()
    assert [(json.loads(s)["sha"], json.loads(s)["state"]) for s in statuses] == [
        (heads[1], "success"),
        (heads[2], "success"),
    ]
    return first_runs, reports


def check_a_crash_is_commented(world: World, heads: dict[int, str], first_run: int) -> None:
    """The issue's crash: with no secret, check-pr stops before writing check.json. The
    comment says that nothing was verified instead of the comment step crashing."""
    secrets, world.secrets = world.secrets, {}
    run = {"id": first_run, "event": "pull_request", "head_sha": heads[1], "conclusion": "success"}
    crashed = run_workflow(
        world, WORKFLOWS / "leaderboard-verify.yml", "workflow_run", {"workflow_run": run}
    )
    world.secrets = secrets
    check = crashed.jobs["verify"].step("Check the pull request (sandboxed verification)")
    assert crashed.jobs["verify"].status == "failure" and check.outcome == "failure"
    assert "VERIFY_SECRET is not set" in check.output
    comment = (world.state / "comments" / "1-2.md").read_text()
    assert "**failed: no report.** check.json is empty" in comment
    last = json.loads((world.state / "statuses.jsonl").read_text().splitlines()[-1])
    assert (last["sha"], last["state"]) == (heads[1], "failure")


def forge_status_artifact(world: World, head: str, report: dict, fork_run: int) -> None:  # type: ignore[type-arg]
    """What a fork can do: its own pull_request run (its workflow is the fork's to write)
    uploads a forged status under the name the merge job looks for, newest of all."""
    forged = json.loads(json.dumps(report))
    forged["verification"]["seed"] = "f" * 64
    fake = world.state / "artifacts" / "999"
    (fake / "files").mkdir(parents=True)
    (fake / "files" / f"{FORK}.json").write_text(json.dumps(forged))
    meta = {
        "id": 999,
        "name": f"leaderboard-status-{head}",
        "expired": False,
        "created_at": "9999999999",
        "workflow_run": {"id": fork_run},
    }
    (fake / "meta.json").write_text(json.dumps(meta))


def merge_both(world: World, source: Path, heads: dict[int, str]) -> str:
    """The maintainers merge both pull requests into main; the new main."""
    git(source, "checkout", "-q", "main")
    git(source, "fetch", "-q", str(world.origin), "refs/pull/1/head", "refs/pull/2/head")
    merges = {}
    for number in (1, 2):
        git(source, "merge", "-q", "--no-ff", "-m", f"Merge pull request #{number}", heads[number])
        merges[number] = git(source, "rev-parse", "HEAD")
    git(source, "push", "-q", str(world.origin), "main")
    merged = {"state": "closed", "merged_at": "2026-01-01T00:00:00Z"}
    world.set_pulls(
        [{**p, **merged, "merge_commit_sha": merges[p["number"]]} for p in world.pulls()]
    )
    return merges[2]


@pytest.mark.slow  # git, the sandboxed plugin worker
def test_fork_and_same_repo_prs_are_verified_with_the_secret_and_ci_report_published(
    tmp_path: Path,
) -> None:
    world, heads, base = make_world(tmp_path)
    first_runs, reports = verify_both(world, heads)
    check_a_crash_is_commented(world, heads, first_runs[1])
    # Red team: only leaderboard-verify's artifacts count, so the forged one (control: the
    # genuine one beside it) must not be published.
    forge_status_artifact(world, heads[2], reports[2], first_runs[2])
    main = merge_both(world, tmp_path / "source", heads)
    push = run_workflow(
        world,
        WORKFLOWS / "leaderboard.yml",
        "push",
        {"before": base, "after": main},
        jobs=("record-statuses",),
    )
    assert push.jobs["record-statuses"].status == "success", failures(push)
    for number, ident in ((1, SAME_REPO), (2, FORK)):
        shown = git(world.origin, "show", f"main:leaderboard/submissions/{ident}/status.json")
        assert json.loads(shown)["verification"] == reports[number]["verification"]
    index = json.loads(git(world.origin, "show", "main:leaderboard/index.json"))
    assert SAME_REPO in json.dumps(index) and FORK in json.dumps(index)


def test_a_missing_empty_or_malformed_report_gives_a_failure_comment(tmp_path: Path) -> None:
    url = "https://github.com/o/r/actions/runs/7"
    missing = comment_for(tmp_path / "check.json", url)
    (tmp_path / "empty.json").write_text("")
    (tmp_path / "bad.json").write_text('{"ok": tru')
    empty, bad = comment_for(tmp_path / "empty.json", url), comment_for(tmp_path / "bad.json")
    assert "check.json is missing" in missing and url in missing
    assert "empty.json is empty" in empty and "not JSON" in bad
    assert all(
        "**failed: no report.**" in c and "Nothing was verified" in c for c in (missing, empty, bad)
    )
    # Control: a real report is rendered, not called a failure.
    report = {
        "ok": True,
        "ids": ["a--b"],
        "failures": {},
        "entries": {"a--b": {"submission": {"adapter": "x", "model": "m"}}},
    }
    assert "failed" not in render_comment(report) and "`a--b`" in render_comment(report)


def test_untrusted_report_values_cannot_format_the_comment() -> None:
    evil = "[click](https://evil.example) @maintainer <img src=x> `x`\n# heading"
    report = {
        "ok": False,
        "ids": [evil],
        "entries": {},
        "failures": {evil: {"code": "bad", "error": evil}},
    }
    comment = render_comment(report)
    line = comment.splitlines()[1]
    # Every untrusted value sits inside one code span: no backtick of its own, no new line.
    assert line.count("`") == 6 and "\n# heading" not in comment
    assert "`[click](https://evil.example) @maintainer <img src=x> 'x' # heading`" in line


def test_the_weights_registry_prefers_the_recorded_digest_and_reads_only_plain_names(
    tmp_path: Path,
) -> None:
    digest = "ab" * 32
    (tmp_path / "resnet18.tv.safetensors").write_bytes(b"by model")
    assert weights_in(tmp_path, "resnet18.tv") == tmp_path / "resnet18.tv.safetensors"
    (tmp_path / f"{digest}.pt").write_bytes(b"by digest")
    assert weights_in(tmp_path, "resnet18.tv", f"sha256:{digest}") == tmp_path / f"{digest}.pt"
    (tmp_path.parent / "secret.safetensors").write_bytes(b"outside")
    assert weights_in(tmp_path, "../secret") is None and weights_in(tmp_path, "vit.b16") is None


def test_every_job_has_a_timeout_and_only_verify_holds_the_secret() -> None:
    from run_workflow_locally import load_workflow

    for path in sorted(WORKFLOWS.glob("leaderboard*.yml")):
        for name, job in load_workflow(path)["jobs"].items():
            assert "timeout-minutes" in job, (path.name, name)
            holds = "secrets.VERIFY_SECRET" in json.dumps(job)
            assert holds == (name == "verify"), (path.name, name)
    verify = load_workflow(WORKFLOWS / "leaderboard-verify.yml")
    assert list(verify["on"]) == ["workflow_run"]
    # The privileged job never checks out the PR as code: data only, no credentials kept.
    checkouts = [s for s in verify["jobs"]["verify"]["steps"] if "checkout" in s.get("uses", "")]
    assert all(s["with"]["persist-credentials"] is False for s in checkouts)
    assert [s["with"]["path"] for s in checkouts] == ["base", "pr"]


def test_expressions_follow_githubs_rules() -> None:
    context = {"vars": {"A": ""}, "steps": {"pr": {"outputs": {"number": "3"}}}}
    evaluator = Evaluator(context)
    assert evaluator.evaluate("vars.A || 'cpu'") == "cpu"
    assert evaluator.evaluate("fromJSON(vars.T || '350')") == 350
    assert condition("always() && steps.pr.outputs.number != ''", Evaluator(context, "failure"))
    assert not condition("steps.pr.outputs.number != ''", Evaluator(context, "failure"))


@pytest.mark.slow  # git
def test_check_pr_gives_each_entry_its_checkpoint_from_the_weights_dir(  # type: ignore[no-untyped-def]
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, invoke
) -> None:
    """--weights-dir (the workflow's FEWTRANS_WEIGHTS_DIR) reaches the entry's verification."""
    from fewtrans_board.core.errors import SubmissionError
    from fewtrans_board.leaderboard import intake

    repo = tmp_path / "repo"
    shutil.copytree(COMMITTED, repo / "leaderboard", ignore=shutil.ignore_patterns("__pycache__"))
    for kind in ("submissions", "results"):
        shutil.rmtree(repo / "leaderboard" / kind / SAME_REPO)
    git(tmp_path, "init", "-q", "-b", "main", str(repo))
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "main")
    git(repo, "checkout", "-q", "-b", "pr")
    add_entry(repo, SAME_REPO)
    weights = tmp_path / "weights"
    weights.mkdir()
    (weights / "demo-cnn.digits.safetensors").write_bytes(b"stand-in: never loaded here")
    seen: dict[str, object] = {}

    def stop(ident, store, verification, **kwargs):  # type: ignore[no-untyped-def]
        seen[ident] = verification.options.weights
        raise SubmissionError("stopped", "stopped before any re-run")

    monkeypatch.setattr(intake, "check_entry", stop)
    args = ["leaderboard", "check-pr", "--repo", str(repo), "--base", "main", "--verify", "--json"]
    invoke([*args, "--weights-dir", str(weights)])
    assert seen == {SAME_REPO: str(weights / "demo-cnn.digits.safetensors")}
    invoke(args)  # control: without the registry, no checkpoint is chosen
    assert seen == {SAME_REPO: None}
