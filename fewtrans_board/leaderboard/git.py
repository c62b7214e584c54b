"""What git says a pull request or a merge changed: the only place that runs ``git``.

The pull-request check (:func:`~.pr.classify`) and the blob publishing job
(``leaderboard publish-blobs --since``) read the changed paths from here; everything else
in the leaderboard reads files, never the repository's history.
"""

from __future__ import annotations

import subprocess
from pathlib import Path, PurePosixPath

from fewtrans_board.core.errors import SubmissionError


def changed_paths(repo: Path, base: str, head: str = "HEAD") -> list[tuple[str, str]]:
    """``(status, path)`` of every file that differs between ``base`` and ``head``.

    Uses the merge base (``base...head``), as a pull request's diff does, with rename
    detection off so that a moved file shows as a deletion and an addition.

    Raises:
        SubmissionError: git failed (not a repository, unknown ref).
    """
    command = ["git", "-C", str(repo), "diff", "--name-status", "--no-renames", "-z"]
    try:
        out = subprocess.run([*command, f"{base}...{head}"], check=True, capture_output=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        detail = getattr(exc, "stderr", b"") or b""
        raise SubmissionError(
            "git-failed",
            f"cannot diff {base}...{head} in {repo}: {detail.decode(errors='replace').strip() or exc}",
        ) from exc
    parts = out.decode("utf-8", errors="surrogateescape").split("\0")
    return [(parts[i], parts[i + 1]) for i in range(0, len(parts) - 1, 2)]


def entries_added(
    repo: Path, since: str, head: str = "HEAD", leaderboard: str = "leaderboard"
) -> list[str]:
    """The entries whose ``submission.toml`` was added between ``since`` and ``head``.

    Raises:
        SubmissionError: ``git-failed``.
    """
    root = PurePosixPath(leaderboard) / "submissions"
    ids = set()
    for status, raw in changed_paths(repo, since, head):
        path = PurePosixPath(raw)
        if status == "A" and path.name == "submission.toml" and path.parent.parent == root:
            ids.add(path.parent.name)
    return sorted(ids)
