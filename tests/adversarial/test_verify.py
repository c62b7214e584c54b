"""Verification is the maintainers' own re-run: every forgery route refused, honest runs pass.

Each attack is the one that reached the store as "verified" before (issue 23); each has an
honest control through the same path.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.adversarial.conftest import FIXED, MANIFESTS, VARIED, Board, edit_provenance, ok
from tests.adversarial.forgery import correct_outside, forge_bundle, shaved


def cheater_bundle(board: Board, adapter: str, *, isolation: str = "auto") -> Path:
    for manifest, suffix in ((VARIED, "varied"), (FIXED, "fixed")):
        out = f"{adapter}-{isolation}-{suffix}"
        ok(board.evaluate(adapter, out, manifest=manifest, isolation=isolation))
    runs = [f"{adapter}-{isolation}-varied", f"{adapter}-{isolation}-fixed"]
    return board.pack(f"{adapter}-{isolation}--redteam", adapter, runs)


def verify(board: Board, bundle: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    return board.json(["submission", "verify", bundle, "--leaderboard", board.store, *extra])


def failure(report: dict[str, Any]) -> dict[str, Any]:
    """The verification report a refusal carries."""
    assert report["ok"] is False, report
    return report["report"]


@pytest.fixture(scope="module")
def honest_bundle(board: Board, honest: dict[str, str]) -> Path:
    return board.pack("lp--verify", "linear-probe", [honest["varied"], honest["fixed"]])


@pytest.mark.slow
def test_honest_submission_verifies_exactly(board: Board, honest_bundle: Path) -> None:
    code, report = verify(board, honest_bundle)
    assert code == 0 and report["passed"], report
    assert report["seed_source"] == "urandom" and report["isolation"] == "sandbox"
    for dataset in report["datasets"]:
        # Eight cheap episodes: the rule re-runs all of them, so any forgery is caught.
        assert dataset["mode"] == "exact" and dataset["rerun_episodes"] == 8
        assert dataset["catch_probability"] == 1.0
        assert dataset["identical_episodes"] == 8 and dataset["prediction_agreement"] == 1.0
        assert dataset["inductive_gap"] < 1e-4
        assert dataset["worker_isolation"] == "namespaces"
        assert dataset["memorisation_probe"]["drop_bound"] < 15.0
    assert {e["episode"] for e in report["episodes"]} == set(range(8))


@pytest.mark.slow
def test_a_verification_is_reproduced_from_its_report(board: Board, honest_bundle: Path) -> None:
    _, first = verify(board, honest_bundle, "--sample", "3")
    code, again = verify(board, honest_bundle, *first["reproduce"].split())
    assert code == 0 and again["seed"] == first["seed"] and again["seed_source"] == "given"
    assert again["digest"] == first["digest"]
    keys = ("dataset", "episode", "claimed", "rerun", "perturbed", "fit_gain")
    assert [{k: e[k] for k in keys} for e in again["episodes"]] == [
        {k: e[k] for k in keys} for e in first["episodes"]
    ]


@pytest.mark.slow
def test_a_ci_secret_seeds_the_sample_through_the_bundle_digest(
    board: Board, honest_bundle: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import hashlib
    import hmac

    monkeypatch.setenv("VERIFY_SECRET", "maintainers-only")
    code, report = verify(board, honest_bundle, "--secret-env", "VERIFY_SECRET", "--sample", "1")
    assert code == 0 and report["seed_source"] == "secret"
    expected = hmac.new(b"maintainers-only", report["digest"].encode(), hashlib.sha256)
    assert report["seed"] == expected.hexdigest()


@pytest.mark.slow
def test_forged_outside_a_known_sample_is_caught(board: Board, honest_bundle: Path) -> None:
    # Today's rule would re-run RandomState(57)'s two of eight; the forger spares those.
    spared = set(np.random.RandomState(57).choice(8, size=2, replace=False).tolist())
    forged = forge_bundle(
        honest_bundle,
        board.work / "outside.zip",
        board.store / "manifests",
        correct_outside(spared),
    )
    code, valid = board.json(["submission", "validate", forged, "--leaderboard", board.store])
    assert code == 0 and valid["runs"][0]["hpe"]["mean"] > 80, valid  # the forgery is consistent
    code, report = verify(board, forged)
    assert code == 1 and report["code"] == "verification-failed", report
    for dataset in failure(report)["datasets"]:
        assert dataset["catch_probability"] >= 0.99 and not dataset["passed"]


@pytest.mark.slow
def test_predictions_shaved_under_any_tolerance_are_caught(
    board: Board, honest_bundle: Path
) -> None:
    forged = forge_bundle(
        honest_bundle, board.work / "shaved.zip", board.store / "manifests", shaved(0.1)
    )
    code, report = verify(board, forged)
    assert code == 1 and report["code"] == "verification-failed", report
    assert "predict differently from the stored results" in report["error"]


def other_environment(bundle: Path, out: Path) -> Path:
    def edit(meta: dict[str, Any]) -> None:
        if "environment" in meta and "cpu_flags" in meta["environment"]:
            meta["environment"]["cpu_flags"] = "another-cpu"

    return edit_provenance(bundle, out, edit)


@pytest.mark.slow
def test_across_environments_the_rerun_accuracy_bounds_the_claim(
    board: Board, honest_bundle: Path
) -> None:
    """Recorded on "another CPU": no exact verdict; the paired bound decides."""
    elsewhere = other_environment(honest_bundle, board.work / "elsewhere.zip")
    code, report = verify(board, elsewhere)
    assert code == 0, report
    for dataset in report["datasets"]:
        assert dataset["mode"] == "statistical"
        assert dataset["environment_differences"] == [
            "cpu_flags: 'another-cpu' -> " + repr(report["environment"]["cpu_flags"])
        ]
        assert dataset["difference_bound"] <= 0.5
    forged = forge_bundle(
        elsewhere, board.work / "elsewhere-shaved.zip", board.store / "manifests", shaved(0.1)
    )
    code, report = verify(board, forged)
    assert code == 1 and report["code"] == "verification-failed", report
    assert "claimed accuracy exceeds the re-run's" in report["error"]
    datasets = failure(report)["datasets"]
    assert all(d["claimed_on_rerun_episodes"] > d["rerun_accuracy"] for d in datasets)


@pytest.mark.slow
def test_labels_read_where_unchecked_do_not_survive_verification(board: Board) -> None:
    bundle = cheater_bundle(board, "redteam-sample-aware", isolation="inline")
    code, valid = board.json(["submission", "validate", bundle, "--leaderboard", board.store])
    assert code == 0 and valid["runs"][0]["hpe"]["mean"] > 80, valid
    code, report = verify(board, bundle)
    assert code == 1 and report["code"] == "verification-failed", report


@pytest.mark.slow
@pytest.mark.parametrize(
    ("adapter", "isolation", "reason"),
    [
        # Transductive in-process, inductive in a worker: the re-run predicts differently.
        ("redteam-quiet", "inline", "predict differently from the stored results"),
        # Transductive everywhere, hiding behind a first-answer cache: the subsets go to
        # another episode process, where nothing is cached.
        ("redteam-cached", "auto", "declare transductive = True"),
        ("redteam-balanced", "auto", "declare transductive = True"),
    ],
)
def test_undeclared_transductive_adapters_are_caught(
    board: Board, adapter: str, isolation: str, reason: str
) -> None:
    # Other tests of the same pytest process import the worker module; the in-process run
    # here must still be the cheating one (the whole suite once verified it as honest).
    importlib.import_module("fewtrans_board.runner.worker")
    bundle = cheater_bundle(board, adapter, isolation=isolation)
    code, report = verify(board, bundle)
    assert code == 1 and report["code"] == "verification-failed", report
    assert reason in report["error"]


@pytest.mark.slow
def test_fit_many_that_beats_fit_is_caught(board: Board) -> None:
    bundle = cheater_bundle(board, "redteam-fitmany")
    code, report = verify(board, bundle)
    assert code == 1 and report["code"] == "verification-failed", report
    assert "fit_many() must compute what fit() computes" in report["error"]


@pytest.mark.slow
def test_a_shipped_answer_key_is_flagged(board: Board, redteam_dist: Path) -> None:
    from tests.adversarial.cheaters import answer_key

    # Built from the public support sets of the committed 600-episode manifest.
    table = answer_key(MANIFESTS / "fewtrans-varied--digits.parquet", 32, queries=False)
    (redteam_dist / "fewtrans_redteam-0.1.dist-info" / "answer_key.json").write_text(
        json.dumps(table)
    )
    bundle = cheater_bundle(board, "redteam-answer-key")
    code, valid = board.json(["submission", "validate", bundle, "--leaderboard", board.store])
    assert code == 0 and valid["runs"][0]["hpe"]["mean"] > 95, valid
    code, report = verify(board, bundle)
    assert code == 1 and report["code"] == "lookup-suspected", report
    for dataset in failure(report)["datasets"]:
        probe = dataset["memorisation_probe"]
        assert dataset["mode"] == "exact" and dataset["identical_episodes"] == 8  # consistent
        assert probe["drop_bound"] > probe["threshold"]


@pytest.mark.slow
def test_a_training_free_adapter_that_trains_is_caught_in_the_worker(board: Board) -> None:
    bundle = cheater_bundle(board, "redteam-liar", isolation="inline")
    code, report = verify(board, bundle)
    assert code == 1 and report["code"] == "worker-failed", report
    assert "training_free" in report["error"] and "backward" in report["error"]


@pytest.mark.slow
def test_a_recorded_schema_that_differs_from_the_installed_one_is_refused(
    board: Board, honest_bundle: Path
) -> None:
    def edit(meta: dict[str, Any]) -> None:
        if "adapter" in meta:  # claim transductive to skip the inductiveness probe
            meta["adapter"]["schema"]["transductive"] = True

    forged = edit_provenance(honest_bundle, board.work / "schema-forged.zip", edit)
    code, report = board.json(["submission", "validate", forged, "--leaderboard", board.store])
    assert code == 0, report  # consistent data: only the installed plugin can refute it
    code, report = verify(board, forged)
    assert code == 1 and report["code"] == "schema-mismatch", report


@pytest.mark.slow
def test_add_verifies_by_default_and_an_unsafe_opt_out_is_never_ranked(
    board: Board, honest_bundle: Path, tmp_path: Path
) -> None:
    import shutil

    from fewtrans_board.website.build import build_site

    store = tmp_path / "leaderboard"
    shutil.copytree(board.store / "manifests", store / "manifests")
    spared = set(np.random.RandomState(0).choice(8, size=2, replace=False).tolist())
    forged = forge_bundle(
        honest_bundle, tmp_path / "forged.zip", board.store / "manifests", correct_outside(spared)
    )
    code, report = board.json(["leaderboard", "add", forged, "--leaderboard", store])
    assert code == 1 and report["code"] == "verification-failed"
    assert not (store / "submissions").exists() or not any((store / "submissions").iterdir())
    code, report = board.json(
        ["leaderboard", "add", forged, "--leaderboard", store, "--unsafe-no-verify"]
    )
    assert code == 0 and report["status"] == "validated", report
    index = json.loads((store / "index.json").read_text())
    (entry,) = index["submissions"]
    assert entry["status"] == "validated"
    pages = build_site(store, tmp_path / "site")
    benchmark = next(p for p in pages if p.name == "benchmark-redteam.html").read_text()
    assert "not verified" in benchmark and "Not verified (not ranked)" in benchmark
