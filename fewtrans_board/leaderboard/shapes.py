"""Declarative shapes of untrusted metadata, and a strict JSON decoder for it.

They live in :mod:`fewtrans_board.results.shapes`, below the provenance records that are
declared with them (:mod:`fewtrans_board.results.provenance`); this module is their
leaderboard name.
"""

from __future__ import annotations

from fewtrans_board.results.shapes import (
    ANY,
    FORBIDDEN_CHARACTERS,
    MAX_DEPTH,
    MAX_INT,
    SCALAR_KINDS,
    AnyJson,
    Flag,
    Items,
    Mapping,
    Nullable,
    Number,
    OneOf,
    Record,
    Scalar,
    Shape,
    String,
    Text,
    check,
    is_mapping,
    load_json,
    text_problem,
)

__all__ = [
    "ANY",
    "FORBIDDEN_CHARACTERS",
    "MAX_DEPTH",
    "MAX_INT",
    "SCALAR_KINDS",
    "AnyJson",
    "Flag",
    "Items",
    "Mapping",
    "Nullable",
    "Number",
    "OneOf",
    "Record",
    "Scalar",
    "Shape",
    "String",
    "Text",
    "check",
    "is_mapping",
    "load_json",
    "text_problem",
]
