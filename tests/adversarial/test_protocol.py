"""Cheaters that bend the protocol: the grid, its axes, the fusion, one configuration."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.adversarial.conftest import FIXED, VARIED, Board, edit_provenance, ok, rewrite


@pytest.fixture(scope="module")
def honest_bundle(board: Board, honest: dict[str, str]) -> Path:
    return board.pack("lp--redteam", "linear-probe", [honest["varied"], honest["fixed"]])


def refused(board: Board, bundle: Path) -> dict[str, Any]:
    code, report = board.json(["submission", "validate", bundle, "--leaderboard", board.store])
    assert code == 1 and not report["ok"], report
    return report


@pytest.mark.slow
def test_the_honest_submission_is_valid(board: Board, honest_bundle: Path) -> None:
    code, report = board.json(
        ["submission", "validate", honest_bundle, "--leaderboard", board.store]
    )
    assert code == 0 and report["ok"], report
    assert report["runs"][0]["configurations"] == 3  # fewtrans-reference: 3 learning rates


@pytest.mark.slow
def test_a_trainer_without_axes_cannot_be_evaluated(board: Board) -> None:
    result = board.evaluate("redteam-noaxis", "noaxis")
    assert result.exit_code == 1
    assert "declares 0 learning-rate and 0 epoch axes" in result.output
    assert "training_free" in result.output


@pytest.mark.slow
def test_per_dataset_tuned_values_are_refused(board: Board, centre: Path) -> None:
    ok(board.evaluate("linear-probe", "bs-varied", manifest=VARIED, centre=centre))
    ok(
        board.evaluate(
            "linear-probe", "bs-fixed", manifest=FIXED, centre=centre, config=["batch_size=64"]
        )
    )
    meta = board.meta("bs--redteam", "linear-probe")
    bundle = board.work / "bs.zip"
    code, report = board.json(
        [
            *("submission", "pack", board.work / "bs-varied", board.work / "bs-fixed"),
            *("--meta", meta, "--out", bundle, "--leaderboard", board.store),
        ]
    )
    assert code == 1 and report["code"] == "config-varies", report
    assert "batch_size" in report["error"]
    assert not bundle.exists()  # pack refuses before zipping


def test_forged_roles_are_refused(board: Board, honest_bundle: Path) -> None:
    def edit(meta: dict[str, Any]) -> None:
        if "hpe" in meta:
            meta["hpe"]["roles"] = {}
        meta["identity"]["grid"] = meta["identity"]["grid"][:1]

    report = refused(board, edit_provenance(honest_bundle, board.work / "roles.zip", edit))
    assert report["code"] == "grid-mismatch"


def test_a_shrunk_grid_is_refused(board: Board, honest_bundle: Path) -> None:
    def edit(meta: dict[str, Any]) -> None:
        meta["identity"]["grid"] = meta["identity"]["grid"][:1]

    report = refused(board, edit_provenance(honest_bundle, board.work / "grid.zip", edit))
    assert report["code"] == "grid-mismatch" and "configuration" in report["error"]


def test_a_forged_schema_without_axes_is_refused(board: Board, honest_bundle: Path) -> None:
    def edit(meta: dict[str, Any]) -> None:
        if "adapter" in meta:
            for field in meta["adapter"]["schema"]["fields"]:
                field["hpe"] = None
            meta["hpe"]["roles"] = {}

    report = refused(board, edit_provenance(honest_bundle, board.work / "schema.zip", edit))
    assert report["code"] == "axes-undeclared"


def test_a_swapped_aggregation_is_refused(board: Board, honest_bundle: Path) -> None:
    def edit(meta: dict[str, Any]) -> None:
        if "hpe" in meta:
            meta["hpe"]["aggregation"] = "logit-mean"  # fewtrans-reference votes

    report = refused(board, edit_provenance(honest_bundle, board.work / "agg.zip", edit))
    assert report["code"] == "aggregation-mismatch"


def test_a_centre_search_that_did_not_search_an_axis_is_refused(
    board: Board, honest_bundle: Path
) -> None:
    def edit(name: str, data: bytes) -> bytes:
        if name != "centre-search.json":
            return data
        record = json.loads(data)
        first = record["log"][0]
        lr = first["best"]["lr_head"]
        first["grid"] = [p for p in first["grid"] if p["config"]["lr_head"] == lr]
        return json.dumps(record).encode()

    report = refused(board, rewrite(honest_bundle, board.work / "search.zip", edit))
    assert report["code"] == "centre-search-incomplete" and "lr_head" in report["error"]


def test_a_centre_search_for_other_non_axis_values_is_refused(
    board: Board, honest_bundle: Path
) -> None:
    def edit(name: str, data: bytes) -> bytes:
        if name != "centre-search.json":
            return data
        record = json.loads(data)
        record["centre"]["batch_size"] = 7
        return json.dumps(record).encode()

    report = refused(board, rewrite(honest_bundle, board.work / "other.zip", edit))
    assert report["code"] == "centre-mismatch" and "batch_size" in report["error"]
