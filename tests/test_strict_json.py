"""The strict JSON check's quick pass agrees with its path-naming walk on every value."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from fewtrans_board.results import strict_json
from fewtrans_board.results.strict_json import MAX_DEPTH, json_fault

SCALARS = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=3)
ODD = st.tuples(st.integers()) | st.sets(st.integers(), max_size=2) | st.binary(max_size=2)
VALUES = st.recursive(
    SCALARS | ODD,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=2), inner, max_size=4)
    ),
    max_leaves=30,
)


def nested(value: Any, depth: int) -> Any:
    for i in range(depth):
        value = [value] if i % 2 else {"k": value}
    return value


@settings(max_examples=400, deadline=None)
@given(VALUES, st.integers(0, 3))
def test_the_quick_pass_finds_a_fault_exactly_where_the_walk_does(value: Any, depth: int) -> None:
    deep = nested(value, MAX_DEPTH - 1 + depth)  # around the depth limit
    for document in (value, deep):
        walked = _walk_only(document)
        assert (json_fault(document) is None) == (walked is None)
        assert json_fault(document) == walked  # the same path and problem named


def _walk_only(document: Any) -> tuple[str, str] | None:
    """json_fault without the quick pass (the path-naming walk alone)."""
    quick = strict_json._is_plain
    strict_json._is_plain = lambda value, depth: False
    try:
        return json_fault(document)
    finally:
        strict_json._is_plain = quick


def test_faults_are_still_named() -> None:
    assert json_fault({"a": [1, {"b": float("nan")}]}) == ("a[1].b", "must be finite, got nan")
    assert json_fault(nested(1, MAX_DEPTH + 1))[1] == f"is nested more than {MAX_DEPTH} levels deep"
    assert json_fault({"a": (1,)}) == ("a", "is a tuple, not a JSON value")
    assert json_fault({"a": [1.5, "x", None, True, {"b": [2]}]}) is None
