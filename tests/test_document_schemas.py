"""The documents' pydantic models: published schemas current, types strict, records exact."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from fewtrans_board.core.canonical import canonical_json
from fewtrans_board.core.errors import SubmissionError
from fewtrans_board.jobs.docs import render_schemas, stale_schemas
from fewtrans_board.results.documents import CentreSearch, EntryStatus, RunProvenance, RunRecord
from fewtrans_board.results.load import find_runs, load_run

ROOT = Path(__file__).resolve().parents[1]
RUN = sorted(find_runs([ROOT / "leaderboard" / "results"]))[0]
SEARCH = {
    "adapter": "linear-probe",
    "centre": {"lr": 0.1, "epochs": 5, "tag": "1"},
    "dataset": "cub",
    "manifest_protocol": "fewtrans-search",
    "manifest_sha256": "0" * 64,
    "episodes": 2,
    "log": [{"grid": [{"config": {"lr": 1}, "accuracy": 50}, {"config": {"lr": 1.0}}]}],
}


def test_committed_schemas_are_what_the_models_generate() -> None:
    stale = stale_schemas(ROOT / "docs" / "schemas", write=False)
    assert not stale, f"{stale} are out of date: run make docs"


def test_contributing_links_every_published_schema() -> None:
    text = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    assert all(f"docs/schemas/{name}" in text for name in render_schemas())


def _meta() -> dict[str, Any]:
    return copy.deepcopy(load_run(RUN).meta)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda m: m["identity"].update(shards="3"), "identity.shards must be an integer, got str"),
        (lambda m: m["identity"].update(shards=3.0), "identity.shards must be an integer, got float"),
        (lambda m: m["identity"].update(shards=True), "identity.shards must be an integer, got bool"),
        (lambda m: m.update(schema_version=True), "schema_version must be one of 1, got True"),
        (lambda m: m.update(schema_version=1.0), "schema_version must be one of 1, got 1.0"),
        (lambda m: m["model"].update(name=7), "model.name must be a string, got int"),
        (lambda m: m["adapter"]["schema"].update(transductive=1), "adapter.schema.transductive must be true or false"),
        (lambda m: m["model"].update(files_sha256=None), "model.files_sha256 must not be null"),
        (lambda m: m["model"].update(info={"a": [float("nan")]}), "model.info.a[0] must be finite"),
        (lambda m: m["identity"]["grid"][0].update({"bad key": 1}), "identity.grid[0].bad key is not an acceptable key"),
    ],
)  # fmt: skip
def test_types_are_strict_whatever_the_pydantic_defaults(edit: Any, message: str) -> None:
    meta = _meta()
    edit(meta)
    with pytest.raises(SubmissionError) as info:
        RunProvenance.from_json(meta, "x", intake=True)
    assert info.value.code == "bad-run-meta"
    assert info.value.message.startswith(f"x: {message}"), info.value.message


def test_values_keep_their_type_and_documents_their_keys() -> None:
    record = CentreSearch.from_json(copy.deepcopy(SEARCH))
    assert record.to_json() == SEARCH and canonical_json(record.to_json()) == canonical_json(SEARCH)
    points = record.to_json()["log"][0]["grid"]
    assert type(points[0]["config"]["lr"]) is int and type(points[1]["config"]["lr"]) is float
    assert type(points[0]["accuracy"]) is int and "accuracy" not in points[1]
    assert record.to_json()["centre"]["tag"] == "1"
    assert EntryStatus.from_json({"status": "verified"}).to_json() == {"status": "verified"}


def test_trusted_records_are_read_unchecked_and_written_back_exactly() -> None:
    """What the runner writes and readers of checked runs take (``of``) is never re-checked."""
    meta = _meta()
    # A local manifest may be called anything; an optional key the runner left unset.
    meta["manifest"]["file"] = "my manifests/any name.parquet"
    meta["model"]["files_sha256"] = None
    record = RunProvenance.of(meta)
    assert record.manifest.file == "my manifests/any name.parquet"
    assert record.model.files_sha256 is None and "files_sha256" not in record.to_json()["model"]
    del meta["model"]["files_sha256"]
    assert canonical_json(record.to_json()) == canonical_json(meta)
    assert RunRecord.of({"run_id": meta["run_id"], "identity": meta["identity"]}).identity.model


def test_records_are_frozen() -> None:
    record = EntryStatus.from_json({"status": "validated"})
    with pytest.raises(AttributeError):
        record.status = "verified"  # type: ignore[misc]
