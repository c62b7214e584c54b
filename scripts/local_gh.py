"""A stand-in for the GitHub CLI (``gh``) of the leaderboard workflows, run locally.

:mod:`run_workflow_locally` puts a ``gh`` wrapper calling this file first on the steps'
``PATH``. It answers exactly the calls the workflows make, from a state folder
(``$LOCAL_GH_STATE``) that the runner and the test fill: the open and merged pull requests,
the workflow runs and their artifacts. A comment is written to ``comments/``, a commit
status appended to ``statuses.jsonl``. Any other call fails loudly, so a workflow that
starts using a call this file does not know cannot pass by accident.
"""

from __future__ import annotations

import json
import os
import re
import sys
import zipfile
from io import BytesIO
from pathlib import Path
from typing import Any


class GhError(Exception):
    """A call this stand-in does not answer (or a bad one)."""


def state() -> Path:
    """The state folder (``$LOCAL_GH_STATE``)."""
    folder = os.environ.get("LOCAL_GH_STATE")
    if not folder:
        raise GhError("LOCAL_GH_STATE is not set (run the steps with run_workflow_locally.py)")
    return Path(folder)


def load(name: str, default: Any) -> Any:
    """A JSON document of the state folder."""
    path = state() / name
    return json.loads(path.read_text()) if path.is_file() else default


def artifacts() -> list[dict[str, Any]]:
    """Every artifact uploaded so far (``artifacts/<id>/meta.json``)."""
    root = state() / "artifacts"
    metas = [json.loads(p.read_text()) for p in sorted(root.glob("*/meta.json"))]
    return sorted(metas, key=lambda m: int(m["id"]))


def zipped(folder: Path) -> bytes:
    """An artifact's files as the zip GitHub serves."""
    buffer = BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                archive.write(path, path.relative_to(folder).as_posix())
    return buffer.getvalue()


def api_get(endpoint: str, repo: str) -> bytes:
    """The answer of ``gh api ENDPOINT`` (a GET)."""
    prefix = f"repos/{repo}/"
    if not endpoint.startswith(prefix):
        raise GhError(f"gh api {endpoint}: only repos/{repo}/... is served")
    path, _, query = endpoint[len(prefix) :].partition("?")
    params = dict(p.partition("=")[::2] for p in query.split("&") if p)
    pulls = load("pulls.json", [])
    if path == "pulls":
        wanted = params.get("state", "open")
        out: Any = [p for p in pulls if wanted == "all" or p.get("state") == wanted]
    elif match := re.fullmatch(r"commits/([0-9a-f]{40})/pulls", path):
        sha = match.group(1)
        out = [p for p in pulls if sha in (p.get("merge_commit_sha"), p["head"]["sha"])]
    elif path == "actions/artifacts":
        named = [a for a in artifacts() if a["name"] == params.get("name", a["name"])]
        out = {"total_count": len(named), "artifacts": named}
    elif match := re.fullmatch(r"actions/runs/(\d+)", path):
        out = load(f"runs/{match.group(1)}.json", None)
        if out is None:
            raise GhError(f"gh api {endpoint}: HTTP 404 (no run {match.group(1)})")
    elif match := re.fullmatch(r"actions/artifacts/(\d+)/zip", path):
        folder = state() / "artifacts" / match.group(1) / "files"
        if not folder.is_dir():
            raise GhError(f"gh api {endpoint}: HTTP 404")
        return zipped(folder)
    else:
        raise GhError(f"gh api {endpoint}: not served by this stand-in")
    return json.dumps(out).encode()


def api_post(endpoint: str, fields: list[str], repo: str) -> bytes:
    """``gh api -X POST repos/R/statuses/SHA -f key=value ...``: recorded."""
    match = re.fullmatch(rf"repos/{re.escape(repo)}/statuses/([0-9a-f]{{40}})", endpoint)
    if match is None:
        raise GhError(f"gh api -X POST {endpoint}: not served by this stand-in")
    record = {"sha": match.group(1), **dict(f.partition("=")[::2] for f in fields)}
    with (state() / "statuses.jsonl").open("a") as handle:
        handle.write(json.dumps(record) + "\n")
    return json.dumps(record).encode()


def api(args: list[str], repo: str) -> bytes:
    """``gh api [-X METHOD] ENDPOINT [--paginate] [-f key=value ...]``."""
    method, endpoint, fields = "GET", None, []
    words = iter(args)
    for word in words:
        if word == "-X":
            method = next(words)
        elif word == "-f":
            fields.append(next(words))
        elif word == "--paginate":
            continue
        elif word.startswith("-"):
            raise GhError(f"gh api: option {word} is not served by this stand-in")
        else:
            endpoint = word
    if endpoint is None:
        raise GhError("gh api: no endpoint")
    if method == "GET":
        return api_get(endpoint, repo)
    if method == "POST":
        return api_post(endpoint, fields, repo)
    raise GhError(f"gh api -X {method}: not served by this stand-in")


def pr_comment(args: list[str], repo: str) -> bytes:
    """``gh pr comment N --repo R --body-file F``: the body is written to ``comments/``."""
    number, options = args[0], dict(zip(args[1::2], args[2::2], strict=False))
    if not number.isdigit() or options.get("--repo") != repo or "--body-file" not in options:
        raise GhError(f"gh pr comment {' '.join(args)}: expected N --repo {repo} --body-file F")
    if not any(p["number"] == int(number) for p in load("pulls.json", [])):
        raise GhError(f"gh pr comment: no pull request {number}")
    folder = state() / "comments"
    folder.mkdir(exist_ok=True)
    count = len(list(folder.glob(f"{number}-*.md")))
    body = Path(options["--body-file"]).read_text()
    (folder / f"{number}-{count + 1}.md").write_text(body)
    return b""


def main(argv: list[str]) -> int:
    """Answer one ``gh`` call; print its output, or an error and exit status 1."""
    repo = os.environ.get("GITHUB_REPOSITORY", "")
    try:
        if not os.environ.get("GH_TOKEN"):
            raise GhError("GH_TOKEN is not set: the step holds no token (gh would refuse)")
        if argv[:1] == ["api"]:
            out = api(argv[1:], repo)
        elif argv[:2] == ["pr", "comment"]:
            out = pr_comment(argv[2:], repo)
        else:
            raise GhError(f"gh {' '.join(argv)}: not served by this stand-in")
    except (GhError, StopIteration, KeyError) as exc:
        print(f"gh (local stand-in): {exc}", file=sys.stderr)
        return 1
    sys.stdout.buffer.write(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
