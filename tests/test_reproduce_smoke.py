"""Every reproduction target runs end to end (``reproduce T --smoke``) on miniature layouts.

The miniature copies follow each dataset's official folder and split-file layout (written by
the readers' own ``write_synthetic``); the smoke swaps each paper backbone for the tiny
random-init backbone of its family, runs one episode of the target's smallest dataset with
one epoch per configuration, and must write a report whose every run completed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fewtrans_board.reproduce.plan import row_label
from fewtrans_board.reproduce.smoke import smallest_dataset
from fewtrans_board.reproduce.target import all_targets

pytestmark = pytest.mark.slow

STORE = Path(__file__).resolve().parents[1] / "leaderboard"
MAX_ROWS = 3
"""A smoke runs the first two rows and the last of a longer table (every row's model,
adapter and recipe are checked by ``test_reproduce.py`` without running)."""
EXTRA = ("miniimagenet", "clip-dtd")
"""Datasets smokes need beyond the targets' own: meta-training's source and the unlearning
smokes' retain and validation set."""


def _per_class(dataset: str) -> int:
    # BSCD's 50-shot tasks need 50 + 15 images of a class; 16-shot CLIP tasks and 5-shot
    # meta-training episodes (16 queries) fit in 21.
    return 65 if dataset.startswith("bscd-") else 21


@pytest.fixture(scope="module")
def miniature(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Synthetic copies of every dataset a smoke touches, in their official layouts (written
    once per test run, whichever xdist worker asks first)."""
    from fewtrans_board.datasets.synthetic import write_synthetic_copy
    from fewtrans_board.episodes.frozen import EMBEDDED
    from fewtrans_board.registry.lookup import Registry
    from fewtrans_board.registry.manager import get_plugin_manager
    from tests.conftest import shared_folder

    registry = Registry.from_plugin_manager(get_plugin_manager(entry_points=False))
    names = {smallest_dataset(t, registry) for t in all_targets()} | set(EXTRA)
    names -= set(EMBEDDED)

    def write(base: Path) -> None:
        for name in sorted(names):
            spec = registry.datasets.get(name).obj
            write_synthetic_copy(spec, base / name, per_class=_per_class(name))

    base = shared_folder(tmp_path_factory, "smoke-miniature", write)
    return {name: base / name for name in sorted(names)}


@pytest.mark.parametrize("name", [t.name for t in all_targets()])
def test_the_smoke_of_every_target_runs_and_reports(
    name: str, miniature: dict[str, Path], invoke, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("FEWTRANS_BOARD_UNLEARNED", str(tmp_path / "unlearned"))
    roots = [a for d, p in miniature.items() for a in ("--root", f"{d}={p}")]
    work = tmp_path / "work"
    target = next(t for t in all_targets() if t.name == name)
    args = ["reproduce", name, "--smoke", "--work", str(work), "--leaderboard", str(STORE)]
    if len(target.rows) > MAX_ROWS:
        for index in (0, 1, len(target.rows) - 1):
            args += ["--row", row_label(target, index)]
    result = invoke([*args, *roots])
    assert result.exit_code == 0, result.output
    report = json.loads((work / "report.json").read_text(encoding="utf-8"))
    assert report["target"] == name and report["smoke"], "a smoke says it is one"
    assert all(run["state"] == "complete" for run in report["runs"])
    assert "Smoke run, not a reproduction" in (work / "report.html").read_text(encoding="utf-8")
    columns = (
        json.loads((STORE / "reported" / f"{target.reported}.json").read_text())["columns"]
        if target.reported
        else []
    )
    if any(run["column"] in columns for run in report["runs"]):
        compared = [
            c for c in report["cells"] if c["measured"] is not None and c["reported"] is not None
        ]
        assert compared, "the smoke's cells meet the paper's"
