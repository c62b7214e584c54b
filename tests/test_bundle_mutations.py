"""The bundle-mutation corpus builder: only 'does not apply' skips, every other error raises."""

from __future__ import annotations

import tomllib

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests import bundle_mutations
from tests.bundle_mutations import (
    Pristine,
    bundle_mutants,
    content_mutation,
    toml_document,
    write_shard_bytes,
)
from tests.zip_members import Entry, write_entries

SHARD = "results/r/shards/shard-00000-of-00001.parquet"
TABLE = pa.table({"episode": [0, 1], "accuracy": [40.0, 60.0]})
PRISTINE = Pristine(
    write_entries(
        [
            Entry("submission.toml", toml_document({"submission": {"id": "x", "n": 1}})),
            Entry("results/r/run.json", b'{"run_id": "abc", "identity": {"a": 1}}'),
            Entry(SHARD, write_shard_bytes(TABLE, {"run_id": "abc"}, reseal=False)),
        ]
    )
)
QUICK = settings(
    max_examples=40, database=None, deadline=None, suppress_health_check=list(HealthCheck)
)


@st.composite
def broken_edit(draw: st.DrawFn, data: bytes) -> tuple[str, bytes]:
    draw(st.just(data))  # a strategy that draws, as the real ones do, then fails
    raise RuntimeError("bug in the mutation strategy")


def test_a_broken_strategy_makes_the_corpus_builder_raise(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("toml_edit", "json_edit", "arrow_edit"):
        monkeypatch.setattr(bundle_mutations, name, broken_edit)

    @QUICK
    @given(data=st.data())
    def draw_mutants(data: st.DataObject) -> None:
        data.draw(bundle_mutants(PRISTINE))

    # Half the member mutations are content edits, so 40 draws reach one.
    with pytest.raises(RuntimeError, match="bug in the mutation strategy"):
        draw_mutants()


@pytest.mark.parametrize(
    ("family", "name", "damaged", "kinds"),
    [
        ("json", "results/r/run.json", b"\xff{ not json", {"json-skipped"}),
        ("arrow", SHARD, b"PAR1 not parquet PAR1", {"arrow-skipped"}),
        # latin-1 and nested edit the bytes without parsing them, so they still apply
        (
            "toml",
            "submission.toml",
            b"[submission",
            {"toml-skipped", "toml-latin-1", "toml-nested"},
        ),
    ],
)
def test_a_member_that_no_longer_parses_is_skipped(
    family: str, name: str, damaged: bytes, kinds: set[str]
) -> None:
    entries = [Entry(name, damaged)]

    @QUICK
    @given(data=st.data())
    def draw_edit(data: st.DataObject) -> None:
        kind, edited = data.draw(content_mutation(entries, family))
        assert kind in kinds
        if kind.endswith("-skipped"):
            assert edited == entries

    draw_edit()


def test_toml_document_leaves_nulls_out_and_writes_plain_keys_first() -> None:
    # TOML has no null: a None value or array element is left out; a top-level plain value
    # must precede the first table.
    document = {"submission": {"id": "x", "gone": None, "list": [1, None, 2]}, "loose": 5}
    assert tomllib.loads(toml_document(document).decode()) == {
        "loose": 5,
        "submission": {"id": "x", "list": [1, 2]},
    }
