"""Verification is the maintainers' own re-run: every forgery route refused, honest runs pass.

Each attack is the one that reached the store as "verified" before (issue 23); each has an
honest control through the same path.

Cost: verifying the two-manifest linear-probe bundle by the default rule re-runs 16 episodes
with four requests each (the re-run and three probes), each request a fresh episode process.
A test whose forgery the re-run comparison must refuse verifies with
:meth:`~tests.adversarial.conftest.Board.verify_reruns` (the default sample, no probe: a
probe can only add a failure); a test about a probe or a passing verification keeps them,
with ``--sample`` only where its statistic allows; tests that read the same report share it.
A cheater whose defence acts in every dataset's worker alike is submitted on one manifest
(the one its statistic is measured on): a worker and half the requests fewer.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fewtrans_board.leaderboard.sub_benchmarks import SubBenchmark
from tests.adversarial.conftest import (
    FIXED,
    MANIFESTS,
    REDTEAM_FIXED,
    REDTEAM_VARIED,
    VARIED,
    Board,
    edit_provenance,
    ok,
    redteam_benchmark,
)
from tests.adversarial.forgery import correct_outside, forge_bundle, shaved


def cheater_bundle(
    board: Board, adapter: str, *, isolation: str = "auto", only: SubBenchmark | None = None
) -> Path:
    """The cheater's submission to ``redteam`` (both manifests), or to ``only`` (one of them:
    call inside :func:`redteam_benchmark` with it)."""
    manifests = [(VARIED, "varied"), (FIXED, "fixed")]
    if only is not None:
        manifests = [(m, suffix) for m, suffix in manifests if m in only.manifests]
    for manifest, suffix in manifests:
        out = f"{adapter}-{isolation}-{suffix}"
        ok(board.evaluate(adapter, out, manifest=manifest, isolation=isolation))
    runs = [f"{adapter}-{isolation}-{suffix}" for _, suffix in manifests]
    benchmark = only.name if only is not None else "redteam"
    return board.pack(f"{adapter}-{isolation}--{benchmark}", adapter, runs, benchmark)


def verify(board: Board, bundle: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    return board.verify(bundle, *extra)


def failure(report: dict[str, Any]) -> dict[str, Any]:
    """The verification report a refusal carries."""
    assert report["ok"] is False, report
    return report["report"]


@pytest.fixture(scope="module")
def honest_bundle(board: Board, honest: dict[str, str]) -> Path:
    return board.pack("lp--verify", "linear-probe", [honest["varied"], honest["fixed"]])


@pytest.fixture(scope="module")
def secret_verification(board: Board, honest_bundle: Path) -> dict[str, Any]:
    """A CI-style verification of the honest bundle (seeded by a secret), two episodes per
    dataset: read by the secret test and reproduced by the reproduction test."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("VERIFY_SECRET", "maintainers-only")
        code, report = verify(
            board, honest_bundle, "--secret-env", "VERIFY_SECRET", "--sample", "2"
        )
    assert code == 0, report
    return report


@pytest.fixture(scope="module")
def shaved_bundle(board: Board, honest_bundle: Path) -> Path:
    """A tenth of each configuration's wrong predictions flipped to correct, re-sealed.

    Every episode of the fixed manifest has over 20 wrong predictions per configuration
    (5-way 1-shot digits), so any sample of it holds changed predictions."""
    return forge_bundle(
        honest_bundle, board.work / "shaved.zip", board.store / "manifests", shaved(0.1)
    )


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
def test_a_verification_is_reproduced_from_its_report(
    board: Board, honest_bundle: Path, secret_verification: dict[str, Any]
) -> None:
    # Two of eight episodes per dataset, in order: 56 ordered draws each, so a seed that
    # did not fix the sample would match by chance once in 3,136.
    first = secret_verification
    assert first["reproduce"].split()[2:] == ["--sample", "2"]
    code, again = verify(board, honest_bundle, *first["reproduce"].split())
    assert code == 0 and again["seed"] == first["seed"] and again["seed_source"] == "given"
    assert again["digest"] == first["digest"]
    keys = ("dataset", "episode", "claimed", "rerun", "perturbed", "fit_gain")
    assert [{k: e[k] for k in keys} for e in again["episodes"]] == [
        {k: e[k] for k in keys} for e in first["episodes"]
    ]


@pytest.mark.slow
def test_a_ci_secret_seeds_the_sample_through_the_bundle_digest(
    secret_verification: dict[str, Any],
) -> None:
    import hashlib
    import hmac

    report = secret_verification
    assert report["seed_source"] == "secret"
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
    # The default rule's sample, re-runs only: the comparison itself must catch it.
    code, report = board.verify_reruns(forged)
    assert code == 1 and report["code"] == "verification-failed", report
    for dataset in failure(report)["datasets"]:
        assert dataset["catch_probability"] >= 0.99 and not dataset["passed"]


@pytest.mark.slow
def test_predictions_shaved_under_any_tolerance_are_caught(
    board: Board, honest_bundle: Path, shaved_bundle: Path
) -> None:
    # The honest control through the same path (re-runs only) matches every episode.
    code, report = board.verify_reruns(honest_bundle)
    assert code == 0 and all(d["identical_episodes"] == 8 for d in report["datasets"]), report
    code, report = board.verify_reruns(shaved_bundle)
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
    """Recorded on "another CPU": no exact verdict; the paired bound decides.

    Both verifications re-run every episode (the bound over all eight) without the probes,
    which have their own tests and do not depend on the mode."""
    elsewhere = other_environment(honest_bundle, board.work / "elsewhere.zip")
    code, report = board.verify_reruns(elsewhere)
    assert code == 0, report
    for dataset in report["datasets"]:
        assert dataset["mode"] == "statistical" and dataset["rerun_episodes"] == 8
        assert dataset["environment_differences"] == [
            "cpu_flags: 'another-cpu' -> " + repr(report["environment"]["cpu_flags"])
        ]
        assert dataset["difference_bound"] <= 0.5
    forged = forge_bundle(
        elsewhere, board.work / "elsewhere-shaved.zip", board.store / "manifests", shaved(0.1)
    )
    code, report = board.verify_reruns(forged)
    assert code == 1 and report["code"] == "verification-failed", report
    assert "claimed accuracy exceeds the re-run's" in report["error"]
    datasets = failure(report)["datasets"]
    assert all(d["claimed_on_rerun_episodes"] > d["rerun_accuracy"] for d in datasets)


@pytest.mark.slow
def test_labels_read_where_unchecked_do_not_survive_verification(board: Board) -> None:
    bundle = cheater_bundle(board, "redteam-sample-aware", isolation="inline")
    code, valid = board.json(["submission", "validate", bundle, "--leaderboard", board.store])
    assert code == 0 and valid["runs"][0]["hpe"]["mean"] > 80, valid
    code, report = board.verify_reruns(bundle)  # the default sample: all eight episodes
    assert code == 1 and report["code"] == "verification-failed", report


@pytest.mark.slow
@pytest.mark.parametrize(
    ("adapter", "isolation", "sample", "reason"),
    [
        # Transductive in-process, inductive in a worker: the re-run predicts differently.
        # The nudge is light: it changes predictions in 6 of the 8 fixed-manifest episodes,
        # so any 4 of them hold one.
        ("redteam-quiet", "inline", "4", "predict differently from the stored results"),
        # Transductive everywhere, hiding behind a first-answer cache: the subsets go to
        # another episode process, where nothing is cached. The inductive probe sees the
        # balancing on every episode, so two (each probed) suffice.
        ("redteam-cached", "auto", "2", "declare transductive = True"),
        ("redteam-balanced", "auto", "2", "declare transductive = True"),
    ],
)
def test_undeclared_transductive_adapters_are_caught(
    board: Board, adapter: str, isolation: str, sample: str, reason: str
) -> None:
    # Other tests of the same pytest process import the worker module; the in-process run
    # here must still be the cheating one (the whole suite once verified it as honest).
    importlib.import_module("fewtrans_board.runner.worker.serve")
    # The fixed manifest alone: each defence acts in every dataset's worker alike, and the
    # cheaters' cost is in every request.
    with redteam_benchmark(REDTEAM_FIXED):
        bundle = cheater_bundle(board, adapter, isolation=isolation, only=REDTEAM_FIXED)
        code, report = verify(board, bundle, "--sample", sample)
    assert code == 1 and report["code"] == "verification-failed", report
    assert reason in report["error"]


@pytest.mark.slow
def test_fit_many_that_beats_fit_is_caught(board: Board) -> None:
    # The varied manifest alone, every episode probed (the default rule): fit_many's gain
    # there is about 25 points, its 99% lower bound over the 8 episodes about 12, against a
    # margin of 0.5.
    with redteam_benchmark(REDTEAM_VARIED):
        bundle = cheater_bundle(board, "redteam-fitmany", only=REDTEAM_VARIED)
        code, report = verify(board, bundle)
    assert code == 1 and report["code"] == "verification-failed", report
    assert "fit_many() must compute what fit() computes" in report["error"]
    (dataset,) = failure(report)["datasets"]
    assert dataset["rerun_episodes"] == 8 and dataset["fit_many_gain"]["bound"] > 0.5


@pytest.mark.slow
def test_a_shipped_answer_key_is_flagged(board: Board, redteam_dist: Path) -> None:
    from tests.adversarial.cheaters import answer_key

    # Built from the public support sets of the committed 600-episode manifest.
    table = answer_key(MANIFESTS / "fewtrans-varied--digits.parquet", 32, queries=False)
    (redteam_dist / "fewtrans_redteam-0.1.dist-info" / "answer_key.json").write_text(
        json.dumps(table)
    )
    # The fixed manifest alone (the probe acts in every dataset's worker alike): there the
    # key's answers drop by about 55 points under the probe, a 95% bound near 50 over its 8
    # episodes (on the varied one, where 2-way episodes keep a plain centroid near 90%, 25).
    with redteam_benchmark(REDTEAM_FIXED):
        bundle = cheater_bundle(board, "redteam-answer-key", only=REDTEAM_FIXED)
        args = ["submission", "validate", bundle, "--leaderboard", board.store]
        code, valid = board.json(args)
        assert code == 0 and valid["runs"][0]["hpe"]["mean"] > 95, valid
        code, report = verify(board, bundle)
    assert code == 1 and report["code"] == "lookup-suspected", report
    (dataset,) = failure(report)["datasets"]
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
    board: Board, shaved_bundle: Path, tmp_path: Path
) -> None:
    import shutil

    from fewtrans_board.website.build import build_site

    store = tmp_path / "leaderboard"
    shutil.copytree(board.store / "manifests", store / "manifests")
    forged = shaved_bundle  # changed predictions in every fixed-manifest episode
    # No switch: 'add' verifies (one episode per dataset is enough to catch this one).
    code, report = board.json(
        ["leaderboard", "add", forged, "--leaderboard", store, "--sample", "1"]
    )
    assert code == 1 and report["code"] == "verification-failed", report
    assert not (store / "submissions").exists() or not any((store / "submissions").iterdir())
    code, report = board.json(
        ["leaderboard", "add", forged, "--leaderboard", store, "--unsafe-no-verify"]
    )
    assert code == 0 and report["status"] == "validated", report
    index = json.loads((store / "index.json").read_text())
    (entry,) = index["submissions"]
    assert entry["status"] == "not verified"
    pages = build_site(store, tmp_path / "site")
    benchmark = next(p for p in pages if p.name == "benchmark-redteam.html").read_text()
    assert "not verified" in benchmark and "Not verified (not ranked)" in benchmark
