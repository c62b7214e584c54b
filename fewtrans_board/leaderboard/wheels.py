"""Install a submission's pinned plugins as inert files: wheels only, hashes checked.

The judge's own pip installs each pull request's pins with :data:`PIP_FLAGS` into a fresh
folder per entry, then made read-only: no ``setup.py`` runs, no site directory holds it (so
no ``.pth`` file runs), and only the sandboxed plugin worker imports it (``--plugin-dir``).
SECURITY.md ("CI installs no code where it judges") gives the tests.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from fewtrans_board.core.errors import SubmissionError
from fewtrans_board.leaderboard.meta import SubmissionMeta

PIP_FLAGS = (
    "--no-deps --only-binary :all: --require-hashes --no-compile --disable-pip-version-check "
    "--no-input"
)
"""Wheels only (no ``setup.py`` runs), each checked against its hash, no dependencies."""


def requirements(meta: SubmissionMeta) -> list[str]:
    """``pip`` requirement lines (with hashes) of a submission's third-party pins.

    Raises:
        SubmissionError: a third-party pin has no wheel hash (``pin-without-hash``).
    """
    lines = []
    for distribution, version in sorted(meta.plugins.items()):
        if distribution == "fewtrans-board":
            continue
        digest = meta.wheels.get(distribution)
        if digest is None:
            raise SubmissionError(
                "pin-without-hash",
                f"{meta.id}: {distribution}=={version} has no wheel hash; add "
                f'wheels = {{ "{distribution}" = "sha256:..." }} to submission.toml (the sha256 '
                "of the wheel file on the package index)",
            )
        lines.append(f"{distribution}=={version} --hash={digest}")
    return lines


def _read_only(folder: Path) -> None:
    for root, dirs, files in os.walk(folder):
        for name in [*dirs, *files]:
            path = Path(root) / name
            mode = path.lstat().st_mode
            if not stat.S_ISLNK(mode):
                path.chmod(mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    folder.chmod(folder.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


def install_pins(meta: SubmissionMeta, target: Path, pip_options: Sequence[str] = ()) -> Path:
    """Install ``meta``'s third-party pins into ``target`` (created; must not exist).

    Args:
        meta: the submission's metadata.
        target: the entry's plugin folder.
        pip_options: extra ``pip install`` options (an index URL, ``--find-links``).

    Returns:
        ``target``, read-only.

    Raises:
        SubmissionError: a pin without a hash, or pip refused (no wheel, a wrong hash).
    """
    lines = requirements(meta)
    target.mkdir(parents=True, exist_ok=False)
    if lines:
        requirement_file = target.parent / f".{target.name}.requirements.txt"
        requirement_file.write_text("\n".join(lines) + "\n", encoding="utf-8")
        command = [sys.executable, "-m", "pip", "install", "--target", str(target)]
        command += [*PIP_FLAGS.split(), *pip_options, "-r", str(requirement_file)]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        requirement_file.unlink(missing_ok=True)
        if done.returncode != 0:
            detail = (done.stderr or done.stdout).strip().splitlines()
            raise SubmissionError(
                "pin-install-failed",
                f"{meta.id}: pip installs pinned plugins from wheels with the recorded hashes "
                f"only, and refused: {detail[-1] if detail else f'exit status {done.returncode}'}",
            )
    _read_only(target)
    return target
