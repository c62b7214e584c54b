"""The typed provenance record: every committed document round-trips, faults keep their codes."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from fewtrans_board.core.canonical import canonical_json
from fewtrans_board.core.errors import SubmissionError
from fewtrans_board.results.documents import (
    CentreSearch,
    EntryStatus,
    RunProvenance,
    RunRecord,
    is_name,
)
from fewtrans_board.results.load import find_runs, load_run

ROOT = Path(__file__).resolve().parents[1] / "leaderboard"
RUNS = sorted(find_runs([ROOT / "results"]))
SEARCHES = sorted((ROOT / "submissions").glob("*/centre-search.json"))
STATUSES = sorted((ROOT / "submissions").glob("*/status.json"))


def test_committed_documents_exist() -> None:
    assert RUNS and SEARCHES and STATUSES


@pytest.mark.parametrize("path", RUNS, ids=lambda p: p.parent.name)
def test_run_provenance_round_trips(path: Path) -> None:
    run = load_run(path)
    for meta in run.shard_meta:
        record = RunProvenance.from_json(meta, str(path))
        assert canonical_json(record.to_json()) == canonical_json(meta)
        assert RunProvenance.from_json(record.to_json(), str(path)) == record
    stored = json.loads((path / "run.json").read_bytes())
    record_json = RunRecord.from_json(stored, "run.json").to_json()
    assert canonical_json(record_json) == canonical_json(stored)


@pytest.mark.parametrize("path", SEARCHES + STATUSES, ids=lambda p: p.parent.name + p.name)
def test_entry_documents_round_trip(path: Path) -> None:
    stored = json.loads(path.read_bytes())
    kind = CentreSearch if path.name == "centre-search.json" else EntryStatus
    assert canonical_json(kind.from_json(stored).to_json()) == canonical_json(stored)


def _meta() -> dict[str, Any]:
    return copy.deepcopy(load_run(RUNS[0]).meta)


def test_attributes_are_typed() -> None:
    record = RunProvenance.from_json(_meta(), "x")
    name: str = record.model.name  # mypy checks these attribute reads
    size: int = record.hpe.grid_size
    assert name == record.identity.model
    assert size == len(record.identity.grid)
    with pytest.raises(AttributeError):
        record.run_id = "0" * 16  # type: ignore[misc]


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda m: m.pop("hpe"), "x: the document lacks hpe"),
        (lambda m: m["model"].update(name="bad name"), "x: model.name must be a registered name"),
        (lambda m: m["identity"]["grid"].__setitem__(0, "oops"), "x: identity.grid[0] must be an"),
        (lambda m: m["hpe"].update(grid_size=0), "x: hpe.grid_size must be in [1,"),
        (lambda m: m["manifest"].update(sha256="A" * 64), "x: manifest.sha256 must be a sha256"),
        (lambda m: m["environment"].update(device="a\x1b[2J"), "x: environment.device contains"),
    ],
)
def test_faults_keep_codes_and_key_paths(edit: Any, message: str) -> None:
    meta = _meta()
    edit(meta)
    with pytest.raises(SubmissionError) as info:
        RunProvenance.from_json(meta, "x")
    assert info.value.code == "bad-run-meta"
    assert info.value.message.startswith(message), info.value.message
    assert "\n" not in str(info.value) and "\x1b" not in str(info.value)


def test_intake_requires_the_adapter_schema() -> None:
    meta = _meta()
    meta["adapter"].pop("schema", None)
    assert RunProvenance.from_json(meta, "x").adapter.schema is None
    with pytest.raises(SubmissionError, match=r"\[bad-run-meta\] x: adapter lacks schema"):
        RunProvenance.from_json(meta, "x", intake=True)


def test_status_and_centre_search_codes() -> None:
    with pytest.raises(SubmissionError, match=r"\[bad-status\] status.json: status must be one"):
        EntryStatus.from_json({"status": "approved"})
    with pytest.raises(SubmissionError, match=r"\[bad-centre-search\] c: the document lacks"):
        CentreSearch.from_json({}, "c")


def test_one_name_rule() -> None:
    assert is_name("demo-cnn.digits+ssd:digits")
    assert not is_name("bad name") and not is_name("-x") and not is_name("a" * 201)
    assert not is_name(3)
