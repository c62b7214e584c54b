"""Verification re-runs plugins in a worker process, with queries in a secret order."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.adversarial.conftest import FIXED, VARIED, Board, edit_provenance, ok


def cheater_bundle(board: Board, adapter: str) -> Path:
    for manifest, suffix in ((VARIED, "varied"), (FIXED, "fixed")):
        ok(board.evaluate(adapter, f"{adapter}-{suffix}", manifest=manifest))
    return board.pack(f"{adapter}--redteam", adapter, [f"{adapter}-varied", f"{adapter}-fixed"])


def verify(board: Board, bundle: Path) -> tuple[int, dict[str, Any]]:
    return board.json(
        ["submission", "verify", bundle, "--leaderboard", board.store, "--sample", "2"]
    )


def test_honest_submission_verifies(board: Board, honest: dict[str, str]) -> None:
    bundle = board.pack("lp--verify", "linear-probe", [honest["varied"], honest["fixed"]])
    code, report = verify(board, bundle)
    assert code == 0 and report["passed"], report
    assert all(e["config_agreement"] == 1.0 for e in report["episodes"])
    assert all(e["probe_gap"] < 1e-3 for e in report["episodes"])


def test_labels_read_from_the_stack_do_not_survive_verification(board: Board) -> None:
    bundle = cheater_bundle(board, "redteam-stack")
    code, report = verify(board, bundle)
    assert code == 1 and report["code"] == "verification-failed", report
    assert "predictions agree" in report["error"]


@pytest.mark.parametrize(
    ("adapter", "reason"),
    [
        ("redteam-balanced", "declare transductive = True"),
        ("redteam-fitmany", "fit_many() differs from fit()"),
    ],
)
def test_worker_probes_catch_transductive_and_fit_many_cheats(
    board: Board, adapter: str, reason: str
) -> None:
    bundle = cheater_bundle(board, adapter)
    code, report = verify(board, bundle)
    assert code == 1 and report["code"] == "verification-failed", report
    assert reason in report["error"]


def test_a_training_free_adapter_that_trains_is_caught_in_the_worker(board: Board) -> None:
    bundle = cheater_bundle(board, "redteam-liar")
    code, report = verify(board, bundle)
    assert code == 1 and report["code"] == "worker-failed", report
    assert "training_free" in report["error"] and "backward" in report["error"]


def test_a_recorded_schema_that_differs_from_the_installed_one_is_refused(
    board: Board, honest: dict[str, str]
) -> None:
    bundle = board.pack("lp--schema", "linear-probe", [honest["varied"], honest["fixed"]])

    def edit(meta: dict[str, Any]) -> None:
        if "adapter" in meta:  # claim transductive to skip the inductiveness probe
            meta["adapter"]["schema"]["transductive"] = True

    forged = edit_provenance(bundle, board.work / "schema-forged.zip", edit)
    code, report = board.json(["submission", "validate", forged, "--leaderboard", board.store])
    assert code == 0, report  # consistent data: only the installed plugin can refute it
    code, report = verify(board, forged)
    assert code == 1 and report["code"] == "schema-mismatch", report
