"""Weights are named and hashed: verification refuses another checkpoint before any re-run.

The red-team case gives verification a checkpoint that is not the one the runs recorded
(``weights_id``, ``submission.toml`` ``weights_sha256``); the plugin worker must never
start. The control gives the recorded file and reaches the worker's start.
"""

from __future__ import annotations

import dataclasses
import hashlib
import shutil
from pathlib import Path
from typing import Any

import pytest

from fewtrans_board.core.errors import SubmissionError
from fewtrans_board.leaderboard.meta import EXAMPLE, parse_meta

ROOT = Path(__file__).resolve().parents[1]
ENTRY = "mean-centroid--demo-cnn"


class WorkerStarted(Exception):
    """Raised in place of starting the plugin worker: the gate let the request through."""


def _sha256(path: Path) -> str:
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def entry() -> tuple[Any, Any, list[Any]]:
    """The committed store's demo-CNN entry (shipped weights), validated from git alone."""
    from fewtrans_board.leaderboard.runs import GIT_ONLY
    from fewtrans_board.leaderboard.store import LeaderboardStore
    from fewtrans_board.leaderboard.validate import validate_contents

    store = LeaderboardStore(ROOT / "leaderboard")
    contents = store.entry_contents(ENTRY)
    return store, contents, validate_contents(contents, store, GIT_ONLY).loaded


@pytest.fixture
def no_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    from fewtrans_board.runner.worker.isolated import PluginWorker

    def start(self: Any) -> Any:
        raise WorkerStarted

    monkeypatch.setattr(PluginWorker, "start", start)


def _verify(entry: tuple[Any, Any, list[Any]], weights: Path | None, meta: Any = None) -> None:
    from fewtrans_board.leaderboard.verification import VerificationOptions, verify_contents

    store, contents, runs = entry
    if meta is not None:
        contents = dataclasses.replace(contents, meta=meta)
    options = VerificationOptions(
        weights=None if weights is None else str(weights), unsandboxed=True, sample=1
    )
    verify_contents(contents, store, options, runs=runs)


def test_mismatching_weights_are_refused_before_any_episode(
    entry: tuple[Any, Any, list[Any]], no_worker: None, tmp_path: Path
) -> None:
    from fewtrans_board.methods.trained.demo_cnn import weights_path

    shipped = weights_path()
    other = tmp_path / "other.safetensors"
    data = bytearray(shipped.read_bytes())
    data[-1] ^= 0xFF  # one tensor byte: same format, other weights
    other.write_bytes(bytes(data))
    recorded = {str(r.provenance.model.weights_id) for r in entry[2]}
    assert recorded == {_sha256(shipped)}  # the oracle: the runs recorded the shipped file
    with pytest.raises(SubmissionError) as caught:
        _verify(entry, other)
    error = caught.value
    assert error.code == "weights-mismatch" and "\n" not in str(error)
    assert _sha256(other) in str(error) and _sha256(shipped) in str(error)
    assert "--weights" in str(error)
    # Control: the recorded file passes the gate and goes on to start the worker.
    with pytest.raises(WorkerStarted):
        _verify(entry, shipped)
    copy = tmp_path / "copy.safetensors"
    shutil.copyfile(shipped, copy)  # the same bytes under another name pass too
    with pytest.raises(WorkerStarted):
        _verify(entry, copy)


def test_declared_weights_need_a_file_and_must_match_the_runs(
    entry: tuple[Any, Any, list[Any]], no_worker: None
) -> None:
    from fewtrans_board.methods.trained.demo_cnn import weights_path

    shipped = _sha256(weights_path())
    declared = dataclasses.replace(
        entry[1].meta, weights_sha256=shipped, weights_source="https://example.org/w.safetensors"
    )
    with pytest.raises(
        SubmissionError,
        match=r"weights-mismatch.*no --weights was given.*"
        r"source: https://example\.org/w\.safetensors",
    ):
        _verify(entry, None, declared)
    with pytest.raises(WorkerStarted):  # control
        _verify(entry, weights_path(), declared)
    wrong = dataclasses.replace(declared, weights_sha256="sha256:" + "0" * 64)
    with pytest.raises(SubmissionError, match=r"weights-mismatch.*run used " + shipped):
        _verify(entry, weights_path(), wrong)


WEIGHTS_LINES = (
    'weights_sha256 = "sha256:' + "ab" * 32 + '"\nweights_source = "timm:resnet18.a1_in1k"\n'
)


def _meta(extra: str) -> str:
    return EXAMPLE.replace("[submission]\n", "[submission]\n" + extra, 1)


def test_submission_toml_records_weights() -> None:
    plain = parse_meta(EXAMPLE)
    assert plain.weights_sha256 == "" and "weights_sha256" not in plain.to_dict()
    meta = parse_meta(_meta(WEIGHTS_LINES))
    assert meta.weights_sha256 == "sha256:" + "ab" * 32
    assert meta.weights_source == "timm:resnet18.a1_in1k"
    assert meta.to_dict()["weights_source"] == "timm:resnet18.a1_in1k"
    url = parse_meta(_meta(WEIGHTS_LINES.replace("timm:resnet18.a1_in1k", "https://x.org/w.pt")))
    assert url.weights_source == "https://x.org/w.pt"


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        ('weights_sha256 = "' + "ab" * 32 + '"\n', "must be 'sha256:'"),
        ('weights_sha256 = "sha256:' + "AB" * 32 + '"\n', "must be 'sha256:'"),
        ('weights_source = "timm:resnet18"\n', "without submission.weights_sha256"),
        (WEIGHTS_LINES.replace("timm:resnet18.a1_in1k", "ftp://x/w"), "http(s) URL"),
    ],
)
def test_malformed_weights_fields_are_refused(lines: str, message: str) -> None:
    with pytest.raises(SubmissionError, match="meta-bad-value") as caught:
        parse_meta(_meta(lines))
    assert message in str(caught.value)
