"""The bundle schema's building blocks: leaf types, strict JSON, layout paths, one-line errors,
submission.toml fields (no bundle needed; the whole-bundle tests are in
tests/adversarial/test_bundles.py)."""

from __future__ import annotations

import functools
from typing import Annotated, Any

import pytest
from pydantic import Field

from fewtrans_board.core.errors import SubmissionError, one_line
from fewtrans_board.leaderboard.bundle_schema import check_centre_values
from fewtrans_board.leaderboard.layout import check_tree, normalise
from fewtrans_board.leaderboard.meta import EXAMPLE, read_meta
from fewtrans_board.results.document_types import Document, Number, Text, checked
from fewtrans_board.results.documents import CentreSearch, RunRecord
from fewtrans_board.results.strict_json import load_json

DEEP = {"deep": functools.reduce(lambda value, _: [value], range(40), 1)}
AnyNumber = Annotated[int | float, Number()]


class Named(Document):
    name: Annotated[str, Text()]


class Closed(Named, extra="forbid"):
    pass


def check(value: Any, kind: Any, where: str, code: str) -> None:
    if isinstance(kind, type) and issubclass(kind, Document):
        kind.from_json(value, where, code=code)
    else:
        checked(value, kind, where, code)


def refusal(call, *args) -> SubmissionError:  # type: ignore[no-untyped-def]
    with pytest.raises(SubmissionError) as caught:
        call(*args)
    return caught.value


def test_messages_are_one_bounded_line_without_control_characters() -> None:
    message = one_line("a\nb\x1b[31m" + "x" * 5000)
    assert "\n" not in message and "\x1b" not in message and "\\x1b" in message
    assert len(message) == 1000 and message.endswith("…")
    error = SubmissionError("bad-toml", "line one\nline two")
    assert str(error) == "[bad-toml] line one line two" and error.code == "bad-toml"


@pytest.mark.parametrize(
    ("value", "shape", "problem"),
    [
        ("Eve\x1b[2J", Annotated[str, Text()], "control character U+001B at position 3"),
        ("abc\u202edcba", Annotated[str, Text()], "U+202E"),
        ("x" * 201, Annotated[str, Text(200)], "201 characters long (at most 200)"),
        ("ABC", Annotated[str, Text(pattern=r"[a-z]+", what="lowercase")], "must be lowercase"),
        (True, AnyNumber, "must be a number, got bool"),
        (1.5, Annotated[int, Number()], "must be an integer"),
        (10**30, AnyNumber, "beyond 64 bits"),
        (-1, Annotated[int | float, Number(low=0)], "must be in [0, None]"),
        ([1] * 3, Annotated[list[AnyNumber], Field(max_length=2)], "has 3 items"),
        ({"a": "x"}, dict[str, AnyNumber], "a must be a number"),
        ({}, Named, "lacks name"),
        ({"name": "x", "other": 1}, Closed, "other is not a known"),
        (DEEP, Document, "nested more than"),
    ],
)  # fmt: skip
def test_shapes_name_the_path_and_the_problem(value: object, shape: object, problem: str) -> None:
    error = refusal(check, value, shape, "results/x/run.json", "bad-run-meta")
    assert error.code == "bad-run-meta" and str(error).startswith(
        "[bad-run-meta] results/x/run.json"
    )
    assert problem in str(error), str(error)


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b'{"a": NaN}', "NaN is not a JSON number"),
        (b'{"a": 1e999}', "overflows a float"),
        (b'{"a": 1, "a": 2}', "appears twice"),
        (b"\xff{}", "not UTF-8 text (byte 0)"),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        (b"{", "not valid JSON"),
    ],
)
def test_json_is_decoded_strictly(data: bytes, problem: str) -> None:
    error = refusal(load_json, data, "centre-search.json", "bad-centre-search")
    assert problem in str(error) and "centre-search.json" in str(error)
    assert load_json(b'{"a": [1, 2.5, "x"]}', "m", "c") == {"a": [1, 2.5, "x"]}


def test_paths_are_normalised_before_duplicate_and_layout_checks() -> None:
    assert normalise("./results//x/./run.json") == "results/x/run.json"
    for name in ("../x.json", "/etc/x.json", "a\\b.json", "C:x.json", "a\x00.json"):
        assert refusal(normalise, name).code == "unsafe-path"
    kinds = check_tree(["results/", "./submission.toml", "results/r/run.json"])
    assert kinds == {"submission.toml": "meta", "results/r/run.json": "run"}
    cases = {
        ("submission.toml", "./submission.toml"): "duplicate-entry",
        ("submission.toml", "SUBMISSION.toml"): "duplicate-entry",
        ("results/r/run.json", "results/r/run.json/"): "duplicate-entry",
        ("notes.json",): "outside-layout",
        ("results/r/shards/extra/",): "outside-layout",
        ("results/r/model.pkl",): "forbidden-file",
        ("results/.hidden/run.json",): "outside-layout",
    }
    for paths, code in cases.items():
        assert refusal(check_tree, list(paths)).code == code, paths


def test_submission_toml_fields_are_typed_and_bounded() -> None:
    good = EXAMPLE.encode()
    assert read_meta(good).authors == ("Ada Lovelace",)
    edits = {
        b'authors = ["Ada Lovelace"]': {
            b'authors = ["Ada\\nLovelace"]': "meta-bad-value",
            b'authors = ["' + b"x" * 300 + b'"]': "meta-bad-value",
            b"authors = [" + b'"a", ' * 150 + b'"a"]': "meta-bad-value",
            b"authors = []": "meta-bad-value",
            b"authors = 1979-05-27": "meta-bad-value",
        },
        b'hardware = "2-core CPU"': {
            b'hardware = "2-core CPU"\nhardwar = "typo"': "meta-unknown-field",
            b'hardware = ""': "meta-bad-value",
        },
        b'model = "demo-cnn.digits"': {b'model = "demo cnn"': "meta-bad-value"},
    }
    for old, news in edits.items():
        for new, code in news.items():
            assert refusal(read_meta, good.replace(old, new)).code == code, new
    assert refusal(read_meta, good + b"[extra]\nx = 1\n").code == "meta-unknown-field"
    assert refusal(read_meta, good.replace(b"Ada", b"\xc1da")).code == "bad-toml"
    assert refusal(read_meta, good + b"#" * (64 << 10)).code == "too-large"


def test_centre_values_have_their_declared_types() -> None:
    fields = [
        {"name": "lr", "type": "float", "default": 0.1, "hpe": "lr"},
        {"name": "epochs", "type": "int", "default": 5, "hpe": "epochs"},
        {"name": "tag", "type": "str", "default": "a", "hpe": None},
    ]
    check_centre_values({"lr": 1, "epochs": 5, "tag": "b"}, fields, "results/x")
    for centre, problem in (
        ({"lr": "0.1", "epochs": 5, "tag": "b"}, "is not a float"),
        ({"lr": 0.1, "epochs": True, "tag": "b"}, "is not a int"),
        ({"lr": -0.1, "epochs": 5, "tag": "b"}, "must be positive"),
    ):
        assert problem in str(refusal(check_centre_values, centre, fields, "results/x"))
    record = {"adapter": "a", "centre": {}, "dataset": "cub", "manifest_protocol": "p"}
    error = refusal(check, record, CentreSearch, "centre-search.json", "bad-centre-search")
    assert "lacks manifest_sha256, episodes, log" in str(error)


def test_a_forged_batching_mode_is_refused_before_verification_replays_it() -> None:
    # Verification replays the recorded --batching mode in the plugin worker: a value the
    # worker cannot apply must be refused by the schema, not surface as a worker load error.
    identity = {
        "grid": [{"lr": 0.1}],
        "limit": None,
        "shards": 1,
        "manifest_sha256": "0" * 64,
        "model": "demo-cnn.digits",
        "adapter": "linear-probe",
        "hpe": "fewtrans-paper",
    }
    record = {"run_id": "0123456789abcdef", "identity": identity}
    for mode in ("auto", "on", "off"):
        check({**record, "identity": {**identity, "batching": mode}}, RunRecord, "run.json", "x")
    check(record, RunRecord, "run.json", "x")  # runs from before the mode was recorded
    for forged in ("turbo", "", True, None):
        bad = {**record, "identity": {**identity, "batching": forged}}
        error = refusal(check, bad, RunRecord, "results/x/run.json", "bad-run-meta")
        assert error.code == "bad-run-meta" and "identity.batching" in str(error)
