"""Run the leaderboard workflows' steps locally, as written, against a local git origin.

Every ``run:`` block runs in bash (``-eo pipefail``, as GitHub runs it) with the workflow's,
job's and step's ``env`` and every ``${{ }}`` substituted from the event, ``vars`` and
``secrets``; ``if:`` conditions, step outputs (``$GITHUB_OUTPUT``) and ``timeout-minutes``
are honoured. The few actions the workflows use are emulated: ``actions/checkout`` clones
the origin (a bare repository whose ``refs/pull/<n>/head`` are the pull requests, as on
GitHub), ``upload-artifact`` stores into the state folder, the cache and Python setup are
no-ops, and ``gh`` is :mod:`local_gh`. A ``pull_request`` run from a fork gets no secrets,
as on GitHub; a completed run triggers the ``workflow_run`` workflows that name it.

Steps that install software (``make install``, ``apt-get``) can be replaced by name with a
local equivalent (``--replace 'NAME=SCRIPT'``): everything else runs as the workflow says.

    python scripts/run_workflow_locally.py --origin origin.git --state state \\
        --event pull_request --payload event.json --secret VERIFY_SECRET=x
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from workflow_expr import Evaluator, condition, substitute, text

REPOSITORY = "local/leaderboard"
GH = Path(__file__).resolve().parent / "local_gh.py"
PASSED_THROUGH = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "USER", "TERM")


@dataclass
class StepResult:
    """One step: its name, outcome (``success``/``failure``/``skipped``), output, and whether a
    secret's value was in its environment."""

    name: str
    outcome: str
    output: str = ""
    secret_in_env: bool = False
    seconds: float = 0.0


@dataclass
class JobResult:
    """One job: its name, status and steps."""

    name: str
    status: str
    steps: list[StepResult] = field(default_factory=list)

    def step(self, name: str) -> StepResult:
        """The step called ``name``."""
        (found,) = [s for s in self.steps if s.name == name]
        return found


@dataclass
class RunResult:
    """One workflow run: its id, workflow file, event and jobs."""

    run_id: int
    workflow: str
    event: str
    jobs: dict[str, JobResult] = field(default_factory=dict)


@dataclass
class World:
    """The local stand-in for GitHub: an origin repository and a state folder.

    Attributes:
        origin: a bare git repository (``refs/pull/<n>/head`` for pull requests).
        state: where runs, artifacts, pull requests, comments and workspaces live.
        workflows: the folder of workflow files (``.github/workflows``).
        vars: the repository variables.
        secrets: the repository secrets.
        replace: ``{step name or "job::step name": bash script}`` run instead of a step.
    """

    origin: Path
    state: Path
    workflows: Path
    vars: dict[str, str] = field(default_factory=dict)
    secrets: dict[str, str] = field(default_factory=dict)
    replace: dict[str, str] = field(default_factory=dict)
    runs: list[RunResult] = field(default_factory=list)

    def next_id(self, kind: str) -> int:
        """A fresh id for a run or an artifact."""
        counter = self.state / f".{kind}-counter"
        value = int(counter.read_text()) + 1 if counter.is_file() else 1
        counter.write_text(str(value))
        return value

    def pulls(self) -> list[dict[str, Any]]:
        """The pull requests (``pulls.json``, as GitHub's API lists them)."""
        path = self.state / "pulls.json"
        return json.loads(path.read_text()) if path.is_file() else []

    def set_pulls(self, pulls: list[dict[str, Any]]) -> None:
        """Replace the pull requests."""
        (self.state / "pulls.json").write_text(json.dumps(pulls, indent=1))


def load_workflow(path: Path) -> dict[str, Any]:
    """A workflow file as data (YAML 1.1's ``on:`` key under ``"on"``)."""
    import yaml

    data: dict[Any, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    if True in data:
        data["on"] = data.pop(True)
    return data


def git(*args: str, cwd: Path | None = None) -> str:
    """Run git; its standard output."""
    done = subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True)
    return done.stdout.strip()


def checkout(world: World, options: dict[str, Any], workspace: Path) -> str:
    """``actions/checkout``: clone the origin and check out ``ref`` (default: ``github.sha``)."""
    target = workspace / str(options.get("path") or ".")
    ref = str(options.get("ref") or options["_default_ref"])
    git("clone", "-q", "--no-checkout", str(world.origin), str(target))
    git("fetch", "-q", "origin", "+refs/pull/*:refs/remotes/pull/*", cwd=target)
    if ref.startswith("refs/pull/"):
        resolved = "refs/remotes/pull/" + ref.removeprefix("refs/pull/")
    elif ref.startswith("refs/heads/") or not all(c in "0123456789abcdef" for c in ref):
        resolved = "refs/remotes/origin/" + ref.removeprefix("refs/heads/")
    else:
        resolved = ref
    git("checkout", "-q", "--detach", resolved, cwd=target)
    if options.get("persist-credentials") is False:
        git("remote", "set-url", "origin", "https://github.invalid/no-credentials", cwd=target)
    return f"checked out {ref} into {target.name}"


def upload_artifact(world: World, options: dict[str, Any], workspace: Path, run_id: int) -> str:
    """``actions/upload-artifact``: a copy of ``path`` in ``state/artifacts/<id>``."""
    source = workspace / str(options["path"]).strip()
    if not source.exists() or (source.is_dir() and not any(source.iterdir())):
        if options.get("if-no-files-found", "warn") == "error":
            raise RuntimeError(f"no files at {source}")
        return f"no files at {options['path']}; nothing uploaded"
    ident = world.next_id("artifact")
    folder = world.state / "artifacts" / str(ident)
    if source.is_dir():
        shutil.copytree(source, folder / "files")
    else:
        (folder / "files").mkdir(parents=True)
        shutil.copy2(source, folder / "files" / source.name)
    meta = {
        "id": ident,
        "name": options["name"],
        "expired": False,
        "created_at": f"{time.time():.6f}",
        "workflow_run": {"id": run_id},
    }
    (folder / "meta.json").write_text(json.dumps(meta))
    return f"uploaded artifact {options['name']} (id {ident})"


NO_OPS = (
    "actions/setup-python",
    "actions/cache",
    "actions/cache/restore",
    "actions/upload-pages-artifact",
    "actions/deploy-pages",
)


def run_action(
    world: World, uses: str, options: dict[str, Any], workspace: Path, run_id: int
) -> str:
    """Emulate one ``uses:`` step."""
    action = uses.split("@", 1)[0]
    if action == "actions/checkout":
        return checkout(world, options, workspace)
    if action == "actions/upload-artifact":
        return upload_artifact(world, options, workspace, run_id)
    if action in NO_OPS:
        return f"{action}: nothing to do locally"
    raise RuntimeError(f"{uses} is not emulated by run_workflow_locally.py")


def step_env(world: World, workspace: Path, run: dict[str, Any]) -> dict[str, str]:
    """The environment every step starts from: the runner's, never the caller's secrets."""
    env = {k: v for k, v in os.environ.items() if k in PASSED_THROUGH or k.startswith("FEWTRANS")}
    bin_folder = world.state / "bin"
    bin_folder.mkdir(exist_ok=True)
    gh = bin_folder / "gh"
    gh.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{GH}" "$@"\n')
    gh.chmod(0o755)
    env.update(
        PATH=f"{bin_folder}{os.pathsep}{env.get('PATH', '')}",
        CI="true",
        GITHUB_ACTIONS="true",
        GITHUB_WORKSPACE=str(workspace),
        GITHUB_REPOSITORY=REPOSITORY,
        GITHUB_SHA=run["github"]["sha"],
        GITHUB_REF=run["github"]["ref"],
        GITHUB_EVENT_NAME=run["github"]["event_name"],
        GITHUB_RUN_ID=str(run["github"]["run_id"]),
        GITHUB_SERVER_URL=run["github"]["server_url"],
        RUNNER_OS="Linux",
        LOCAL_GH_STATE=str(world.state),
    )
    return env


def run_script(script: str, env: dict[str, str], cwd: Path, timeout: float) -> tuple[bool, str]:
    """Run a ``run:`` block as GitHub does (``bash --noprofile --norc -eo pipefail``)."""
    path = cwd / f".step-{time.monotonic_ns()}.sh"
    path.write_text(script)
    try:
        done = subprocess.run(
            ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(path)],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=max(timeout, 1),
        )
    except subprocess.TimeoutExpired as exc:
        partial = [
            part.decode() if isinstance(part, bytes) else part or ""
            for part in (exc.stdout, exc.stderr)
        ]
        return False, "timed out (timeout-minutes)\n" + "".join(partial)
    finally:
        path.unlink(missing_ok=True)
    return done.returncode == 0, done.stdout + done.stderr


def read_outputs(path: Path) -> dict[str, str]:
    """``key=value`` lines a step wrote to ``$GITHUB_OUTPUT``."""
    if not path.is_file():
        return {}
    pairs = (line.partition("=") for line in path.read_text().splitlines() if "=" in line)
    return {key: value for key, _, value in pairs}


def run_step(
    world: World, job: str, step: dict[str, Any], context: dict[str, Any], todo: dict[str, Any]
) -> StepResult:
    """Run one step (whose ``if:`` held) and record its outputs in ``context["steps"]``."""
    name = str(step.get("name") or step.get("uses") or step.get("run", "").split("\n")[0])
    evaluator = Evaluator(context, todo["status"])
    workspace, env = todo["workspace"], dict(todo["env"])
    for key, value in {**todo["job_env"], **(step.get("env") or {})}.items():
        env[key] = substitute(text(value), evaluator)
    outputs = world.state / f".outputs-{time.monotonic_ns()}"
    env["GITHUB_OUTPUT"], env["GITHUB_STEP_SUMMARY"] = str(outputs), str(workspace / ".summary")
    secret_in_env = any(s and s in env.values() for s in world.secrets.values())
    script = world.replace.get(f"{job}::{name}", world.replace.get(name))
    started = time.monotonic()
    try:
        if script is None and "uses" in step:
            options = {
                k: substitute(text(v), evaluator) if isinstance(v, str) else v
                for k, v in (step.get("with") or {}).items()
            }
            options["_default_ref"] = context["github"]["sha"]
            ok, output = True, run_action(world, step["uses"], options, workspace, todo["run_id"])
        else:
            source = script if script is not None else substitute(step["run"], evaluator)
            cwd = workspace / str(step.get("working-directory") or ".")
            ok, output = run_script(source, env, cwd, todo["deadline"] - time.monotonic())
    except (RuntimeError, subprocess.CalledProcessError, KeyError) as exc:
        ok, output = False, f"{type(exc).__name__}: {exc}"
    if "id" in step:
        outcome = "success" if ok else "failure"
        context["steps"][step["id"]] = {"outputs": read_outputs(outputs), "outcome": outcome}
    outputs.unlink(missing_ok=True)
    seconds = time.monotonic() - started
    return StepResult(name, "success" if ok else "failure", output, secret_in_env, seconds)


def run_job(world: World, name: str, job: dict[str, Any], run: dict[str, Any]) -> JobResult:
    """Run one job's steps in a fresh workspace."""
    context = {**run, "steps": {}, "runner": {"os": "Linux"}}
    if "timeout-minutes" not in job:
        raise RuntimeError(f"job {name} has no timeout-minutes (GitHub's default is 6 hours)")
    limit = str(job["timeout-minutes"]).strip().removeprefix("${{").removesuffix("}}")
    minutes = Evaluator(context).evaluate(limit)
    workspace = world.state / "work" / f"{run['github']['run_id']}-{name}"
    workspace.mkdir(parents=True)
    todo = {
        "status": "success",
        "workspace": workspace,
        "env": step_env(world, workspace, run),
        "job_env": {**(run["workflow_env"] or {}), **(job.get("env") or {})},
        "deadline": time.monotonic() + 60 * float(minutes),
        "run_id": run["github"]["run_id"],
    }
    result = JobResult(name, "success")
    for step in job["steps"]:
        step_name = str(step.get("name") or step.get("uses") or "run")
        if not condition(step.get("if"), Evaluator(context, todo["status"])):
            result.steps.append(StepResult(step_name, "skipped"))
            continue
        outcome = run_step(world, name, step, context, todo)
        result.steps.append(outcome)
        if outcome.outcome == "failure" and not step.get("continue-on-error"):
            todo["status"] = result.status = "failure"
    return result


def github_context(
    world: World, event: str, payload: dict[str, Any], run_id: int
) -> dict[str, Any]:
    """The ``github`` context of a run of ``event`` (``sha``: what GitHub would check out)."""
    main = git("rev-parse", "refs/heads/main", cwd=world.origin)
    sha = {
        "push": payload.get("after", main),
        "pull_request": payload.get("pull_request", {}).get("head", {}).get("sha", main),
    }.get(event, main)
    return {
        "event_name": event,
        "event": payload,
        "sha": sha,
        "ref": "refs/heads/main",
        "repository": REPOSITORY,
        "run_id": run_id,
        "server_url": "https://github.invalid",
        "token": "local-token",
        "workspace": "",
    }


def run_workflow(
    world: World, path: Path, event: str, payload: dict[str, Any], jobs: tuple[str, ...] = ()
) -> RunResult:
    """Run one workflow for one event (only ``jobs`` when given), then the runs it triggers."""
    data = load_workflow(path)
    run_id = world.next_id("run")
    github = github_context(world, event, payload, run_id)
    head = (payload.get("pull_request") or {}).get("head", {}).get("repo", {}).get("full_name")
    fork = event == "pull_request" and head not in (None, REPOSITORY)
    secrets = {} if fork else dict(world.secrets)  # GitHub withholds secrets from forks
    record = {
        "id": run_id,
        "event": event,
        "path": f".github/workflows/{path.name}",
        "head_repository": {"full_name": head if fork else REPOSITORY},
    }
    (world.state / "runs").mkdir(exist_ok=True)
    (world.state / "runs" / f"{run_id}.json").write_text(json.dumps(record))
    run: dict[str, Any] = {
        "github": github,
        "vars": dict(world.vars),
        "secrets": secrets,
        "needs": {},
        "workflow_env": data.get("env"),
    }
    result = RunResult(run_id, path.name, event)
    for name, job in data["jobs"].items():
        if (jobs and name not in jobs) or not condition(
            job.get("if"), Evaluator({**run, "steps": {}})
        ):
            continue
        result.jobs[name] = run_job(world, name, job, run)
        run["needs"][name] = {"result": result.jobs[name].status}
    world.runs.append(result)
    trigger_workflow_runs(world, data.get("name", path.stem), result, github["sha"])
    return result


def trigger_workflow_runs(world: World, name: str, finished: RunResult, head_sha: str) -> None:
    """Run every workflow whose ``on.workflow_run`` names the workflow that just finished."""
    failed = any(j.status == "failure" for j in finished.jobs.values())
    payload = {
        "workflow_run": {
            "id": finished.run_id,
            "name": name,
            "event": finished.event,
            "head_sha": head_sha,
            "conclusion": "failure" if failed else "success",
        }
    }
    for path in sorted(world.workflows.glob("*.yml")):
        trigger = load_workflow(path).get("on") or {}
        watched = trigger.get("workflow_run") if isinstance(trigger, dict) else None
        if watched and name in watched.get("workflows", []):
            run_workflow(world, path, "workflow_run", payload)


def pair(value: str) -> tuple[str, str]:
    """``KEY=VALUE`` of the command line."""
    key, sep, rest = value.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"{value!r} is not KEY=VALUE")
    return key, rest


def main(argv: list[str] | None = None) -> int:
    """Command line: run the workflows triggered by one event; print each step's outcome."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--origin", type=Path, required=True)
    parser.add_argument("--state", type=Path, required=True)
    parser.add_argument("--workflows", type=Path, default=Path(".github/workflows"))
    parser.add_argument("--event", required=True, choices=("pull_request", "push"))
    parser.add_argument("--payload", type=Path, required=True)
    for option in ("--var", "--secret", "--replace"):
        parser.add_argument(option, type=pair, action="append", default=[])
    args = parser.parse_args(argv)
    args.state.mkdir(parents=True, exist_ok=True)
    world = World(
        args.origin,
        args.state,
        args.workflows,
        dict(args.var),
        dict(args.secret),
        dict(args.replace),
    )
    for path in sorted(world.workflows.glob("*.yml")):
        trigger = load_workflow(path).get("on") or {}
        if args.event in trigger:
            run_workflow(world, path, args.event, json.loads(args.payload.read_text()))
    failed = False
    for run, (name, job) in itertools.chain.from_iterable(
        ((r, j) for j in r.jobs.items()) for r in world.runs
    ):
        print(f"{run.workflow} [{run.event}] {name}: {job.status}")
        for step in job.steps:
            print(f"  {step.outcome:8} {step.name}")
            if step.outcome == "failure":
                print("    " + step.output.strip().replace("\n", "\n    "))
        failed = failed or job.status == "failure"
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
