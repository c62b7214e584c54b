"""``python -m fewtrans_board.episodes``: rebuild the embedded frozen manifests and README."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from fewtrans_board.episodes.frozen import FROZEN

HEADER = """# Frozen episode manifests

Manifests, not seeds, define the benchmark. Each file lists the exact items of every episode
(relative paths and labels) with a sha256 over its content; `<file>.sha256` holds the file's
byte hash (`sha256sum -c` works). Images are never redistributed: build a manifest from your
own copy with the command below (set `DATA` to the folder holding your datasets, laid out as
`fewtrans-board datasets scan NAME --root PATH` expects), then check it with
`fewtrans-board manifest verify FILE --root PATH`.

Files marked *committed* are built from embedded data and live in this folder; a test rebuilds
them and compares hashes. Regenerate this page with `python -m fewtrans_board.episodes`.

| file | status | command |
| --- | --- | --- |
"""


def readme_text() -> str:
    """Render the manifest catalogue README."""
    # Every token is a plain name or path, so a space join is a valid shell command.
    rows = [
        f"| `{m.filename}` | {'committed' if m.embedded else 'build locally'} | "
        f"`{' '.join(m.command())}` |"
        for m in FROZEN
    ]
    return HEADER + "\n".join(rows) + "\n"


def main(out_dir: str = "leaderboard/manifests") -> None:
    """Rebuild the embedded manifests and the README in ``out_dir``."""
    target = Path(out_dir)
    target.mkdir(parents=True, exist_ok=True)
    for manifest in FROZEN:
        if manifest.embedded:
            cmd = manifest.command(out_dir)
            subprocess.run([sys.executable, "-m", "fewtrans_board", *cmd[1:]], check=True)
    (target / "README.md").write_text(readme_text(), encoding="utf-8")


if __name__ == "__main__":
    main(*sys.argv[1:])
