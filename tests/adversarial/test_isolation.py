"""The judge and the contestant apart (issue 24): every route a worker once had to the judge.

Each cheater runs first where the route is open (in-process, or a worker without a
sandbox) to show the route is real, then through the sandboxed worker, where it finds
nothing and changes nothing.

A cheater acts in every request it gets, and the sandbox hides the judge from every
dataset's worker alike, so each submits on one manifest (``redteam-fixed``); a
verification that must pass re-runs two episodes (``--sample 2``, every probe: the judge's
lazy imports all run); one that must fail re-runs episodes without the probes.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from fewtrans_board.leaderboard.sub_benchmarks import SUB_BENCHMARKS
from fewtrans_board.registry.manager import get_plugin_manager
from tests.adversarial.cheaters import JUDGE_TMP, PLANT_HINT, SHADOWED, STORE_HINT, _hints
from tests.adversarial.conftest import (
    FIXED,
    REDTEAM_FIXED,
    Board,
    ok,
    redteam_benchmark,
    run_cli,
)


def cheater_bundle(board: Board, adapter: str, isolation: str = "auto") -> Path:
    """The cheater's submission to ``redteam-fixed`` (call inside
    ``redteam_benchmark(REDTEAM_FIXED)``): the sandbox hides the judge from each dataset's
    worker alike, and the cheater acts in every request, so one manifest shows it."""
    out = f"{adapter}-{isolation}-fixed"
    ok(board.evaluate(adapter, out, manifest=FIXED, isolation=isolation))
    return board.pack(f"{adapter}-{isolation}--redteam-fixed", adapter, [out], REDTEAM_FIXED.name)


def verify(board: Board, bundle: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    return board.verify(bundle, *extra)


@pytest.mark.slow
def test_searching_for_the_judges_files_finds_nothing_in_the_sandbox(board: Board) -> None:
    # The store lives where the judge's files do (its temporary folders here).
    assert str(board.store) in _hints(STORE_HINT)
    # One manifest: every request the cheater gets outside the sandbox rebuilds its answer
    # table in a fresh process (seconds each), and the sandbox hides the store from each
    # dataset's worker alike. The table still covers every manifest in the store.
    out = "redteam-proc-inline-fixed"
    ok(board.evaluate("redteam-proc", out, manifest=FIXED, isolation="inline"))
    with redteam_benchmark(REDTEAM_FIXED):
        bundle = board.pack(
            "redteam-proc--redteam-fixed", "redteam-proc", [out], REDTEAM_FIXED.name
        )
        code, valid = board.json(["submission", "validate", bundle, "--leaderboard", board.store])
        assert code == 0 and valid["runs"][0]["hpe"]["mean"] == 100.0  # it found the answers
        # Unsandboxed, the worker searches the judge's file system and finds them again;
        # only the memorisation probe then gives it away (its 95% bound needs three
        # episodes).
        code, report = verify(board, bundle, "--unsandboxed", "--sample", "3")
        assert code == 1 and report["code"] == "lookup-suspected", report
        assert [d["rerun_accuracy"] for d in report["report"]["datasets"]] == [100.0]
        assert report["report"]["isolation"] == "process"
        # In the sandbox there is no file of the judge's, no /proc of it, no store: the
        # re-runs of as many episodes predict what a plain centroid does (about 68%).
        code, report = board.verify_with(bundle, sample=3, probe_episodes=0)
    assert code == 1 and report["code"] == "verification-failed", report
    (dataset,) = report["report"]["datasets"]
    assert dataset["rerun_episodes"] == 3 and dataset["rerun_accuracy"] < 95.0, dataset


def member_hashes(bundle: Path) -> dict[str, str]:
    with zipfile.ZipFile(bundle) as archive:
        return {
            n: hashlib.sha256(archive.read(n)).hexdigest()
            for n in archive.namelist()
            if n.endswith(".parquet")
        }


def stored_hashes(store: Path, ident: str) -> dict[str, str]:
    """The sha256 of the validated shard file each stored (split) shard was made from.

    The store splits every shard (logits to a blob); the sealed git side records the hash
    of the file it was split from, and ``leaderboard check --with-logits`` rebuilds each
    shard from both and checks it against the seal it was validated under.
    """
    from fewtrans_board.results.blobs import read_record

    folder = store / "results" / ident
    return {
        "results/" + p.relative_to(folder).as_posix(): read_record(p)["source_sha256"]
        for p in folder.rglob("*.parquet")
    }


@pytest.mark.slow
def test_rewriting_the_extracted_bundle_has_no_effect(
    board: Board, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tempfile

    monkeypatch.setitem(SUB_BENCHMARKS, REDTEAM_FIXED.name, REDTEAM_FIXED)
    bundle = cheater_bundle(board, "redteam-rewriter")
    judge_tmp = tmp_path / JUDGE_TMP  # the judge's temporary folders, where it extracts
    judge_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(judge_tmp))
    ident = "redteam-rewriter-auto--redteam-fixed"
    store = tmp_path / "leaderboard"
    shutil.copytree(board.store / "manifests", store / "manifests")
    # Without a sandbox the worker reaches the folder 'leaderboard add' extracted the bundle
    # to, and rewrites it: the hashes taken at extraction refuse to store the changed files.
    code, report = board.json(
        ["leaderboard", "add", bundle, "--leaderboard", store, "--unsandboxed", "--sample", "2"]
    )
    assert code == 1 and report["code"] == "changed-during-check", report
    assert not (store / "results").exists() or not any((store / "results").iterdir())
    # Sandboxed, it sees no folder of the judge: exactly the validated bytes are stored.
    code, report = board.json(
        ["leaderboard", "add", bundle, "--leaderboard", store, "--sample", "2"]
    )
    assert code == 0 and report["status"] == "verified", report
    assert stored_hashes(store, ident) == member_hashes(bundle)
    code, report = board.json(
        ["leaderboard", "check", ident, "--with-logits", "--leaderboard", store]
    )
    assert code == 0, report


@pytest.mark.slow
def test_modules_planted_for_the_judge_are_never_imported(
    board: Board, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fewtrans_board.runner.worker import isolated

    # A writable folder first on the judge's path (the console script's folder in CI).
    path = tmp_path / PLANT_HINT
    path.mkdir()
    monkeypatch.syspath_prepend(str(path))
    start = isolated.PluginWorker.start

    def watched(self: isolated.PluginWorker) -> Any:
        before = set(sys.modules)
        info = start(self)
        watched.before = watched.before or before  # type: ignore[attr-defined]
        return info

    watched.before = None  # type: ignore[attr-defined]
    monkeypatch.setattr(isolated.PluginWorker, "start", watched)
    monkeypatch.setitem(SUB_BENCHMARKS, REDTEAM_FIXED.name, REDTEAM_FIXED)
    bundle = cheater_bundle(board, "redteam-planter")
    watched.before = None  # type: ignore[attr-defined]  # from verification's first worker on
    code, report = verify(board, bundle, "--sample", "2")
    assert code == 0, report  # an honest centroid otherwise
    assert list(path.iterdir()) == []  # the sandbox never saw the judge's path
    imported_late = {m.split(".")[0] for m in set(sys.modules) - watched.before}  # type: ignore[attr-defined]
    assert not imported_late & set(SHADOWED), imported_late
    # Unsandboxed, the worker finds the folder on the judge's file system and plants its
    # shadows there, but the judge imported everything it uses before any worker started:
    # no shadow runs.
    code, report = verify(board, bundle, "--unsandboxed", "--sample", "2")
    assert code == 0, report
    assert sorted(p.name for p in path.iterdir()) == sorted(SHADOWED)
    assert not list(path.glob("imported-*"))
    for package in SHADOWED:
        assert str(path) not in (getattr(sys.modules.get(package), "__file__", "") or "")


@pytest.mark.slow
def test_verification_refuses_to_run_without_a_sandbox_unless_told(
    board: Board, honest: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from fewtrans_board.core.sandbox import bwrap

    bundle = board.pack("lp--nosandbox", "linear-probe", [honest["varied"], honest["fixed"]])
    monkeypatch.setattr(bwrap.shutil, "which", lambda name: None)
    bwrap.sandbox_problem.cache_clear()
    try:
        # Straight to the command: the suite's own rule would skip (or fail in CI) a
        # sandboxed verification here, the machine this test pretends to be.
        args = ["submission", "verify", bundle, "--leaderboard", board.store, "--sample", "1"]
        result = run_cli(get_plugin_manager(entry_points=False), [*args, "--json"])
        code, report = result.exit_code, json.loads(result.output)
        assert code == 1 and report["code"] == "no-sandbox", report
        assert (
            "apt-get install bubblewrap" in report["error"] and "--unsandboxed" in report["error"]
        )
        code, report = verify(board, bundle, "--sample", "1", "--unsandboxed")
        assert code == 0 and report["isolation"] == "process", report
    finally:
        bwrap.sandbox_problem.cache_clear()
