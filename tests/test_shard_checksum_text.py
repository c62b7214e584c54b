"""A shard checksum's text columns hash to the same bytes as before, value for value."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from fewtrans_board.core.canonical import canonical_json
from fewtrans_board.results.shards import _canonical_parts

TEXTS = st.lists(st.text(max_size=6), min_size=1, max_size=5)


def decoded_parts(array: pa.Array) -> list[bytes]:
    """The parts as the decoded values give them (validity, then their canonical JSON)."""
    values = array.dictionary_decode().to_pylist()
    return [bytes(int(v is None) for v in values), canonical_json(values).encode()]


@settings(max_examples=300, deadline=None)
@given(TEXTS, st.lists(st.integers(0, 10_000), max_size=30), st.integers(0, 3))
def test_dictionary_text_hashes_like_its_decoded_values(
    dictionary: list[str], picks: list[int], cut: int
) -> None:
    # Unused dictionary entries, repeated values, quotes, control and non-ASCII characters,
    # and a slice (an offset into the indices) all hash as the values they decode to.
    indices = pa.array([p % len(dictionary) for p in picks], type=pa.int32())
    array = pa.DictionaryArray.from_arrays(indices, pa.array(dictionary))
    array = array.slice(min(cut, len(array)))
    assert list(_canonical_parts(array)) == decoded_parts(array)


def test_nulls_and_null_dictionary_values_keep_the_general_path() -> None:
    with_null = pa.DictionaryArray.from_arrays(pa.array([0, None, 1]), pa.array(['a"', "é"]))
    null_value = pa.DictionaryArray.from_arrays(pa.array([0, 1]), pa.array(["a", None]))
    for array in (with_null, null_value):
        assert list(_canonical_parts(array)) == decoded_parts(array)
