"""Structural mutations of submission bundles (hypothesis strategies and plain helpers).

Member-level mutations edit a bundle's entries (:mod:`tests.zip_members`): names,
duplicates, TOML and JSON type swaps, Arrow schema and row changes, byte damage; zip-level
ones patch the written bytes (local and central header fields, sizes, CRCs, flags,
compression methods). An adversarial mutation re-seals what it edits (shard checksums, run
ids) so the checks behind the checksum are reached; a careless one does not.
"""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import strategies as st

from fewtrans_board.results.row_schema import METADATA_KEY
from fewtrans_board.results.shards import seal_table
from tests.faults import mutations
from tests.zip_members import (
    Entry,
    named,
    read_entries,
    same_entry,
    write_entries,
    zip_mutation,
)

# --- TOML ----------------------------------------------------------------------------------


def toml_value(value: Any) -> str:
    """A TOML literal (strings as JSON strings, which are TOML basic strings)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(type(value))


def without_nulls(value: Any) -> Any:
    """TOML has no null: a None value (in a table or an array) leaves its key or element out."""
    if isinstance(value, dict):
        return {k: without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [without_nulls(v) for v in value if v is not None]
    return value


def toml_document(tables: dict[str, Any]) -> bytes:
    """A TOML document of tables of plain values (top-level plain values first, as TOML asks)."""
    tables = without_nulls(tables)
    lines = [
        f"{json.dumps(k)} = {toml_value(v)}" for k, v in tables.items() if not isinstance(v, dict)
    ]
    for table, values in tables.items():
        if isinstance(values, dict):
            lines.append(f"[{json.dumps(table)}]")
            lines += [f"{json.dumps(k)} = {toml_value(v)}" for k, v in values.items()]
    return ("\n".join(lines) + "\n").encode()


# --- values ----------------------------------------------------------------------------------

CONTROL = st.sampled_from(["\x1b[31m", "\n", "\r", "\x00", "\u202e", "\u2028", "\x7f", "\t"])
texts = st.one_of(
    st.text(max_size=12),
    st.builds(lambda a, c, b: a + c + b, st.text(max_size=5), CONTROL, st.text(max_size=5)),
    st.integers(1000, 3_000_000).map(lambda n: "x" * n),
    st.sampled_from(["", " ", "../x", "digits", "eurosat", "<script>", "1e999", "NaN"]),
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    texts,
)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)


def paths_of(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path (keys and indices) inside a JSON-like value, the root included."""
    out = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            out += paths_of(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value[:4]):
            out += paths_of(item, (*prefix, index))
    return out


@st.composite
def edit_document(draw: st.DrawFn, document: Any) -> Any:
    """A JSON-like document with one value replaced, removed or added (a deep copy)."""
    document = json.loads(json.dumps(document))
    paths = [p for p in paths_of(document) if p]
    if not paths:
        return draw(json_values)
    path = draw(st.sampled_from(paths))
    parent = document
    for key in path[:-1]:
        parent = parent[key]
    key = path[-1]
    action = draw(st.sampled_from(["swap", "swap", "swap", "delete", "add", "wrap"]))
    if action == "delete":
        del parent[key]
    elif action == "add" and isinstance(parent, dict):
        parent[draw(st.text(max_size=8))] = draw(json_values)
    elif action == "wrap":
        parent[key] = draw(
            st.sampled_from([[parent[key]], {"value": parent[key]}, str(parent[key])])
        )
    else:
        parent[key] = draw(json_values)
    return document


# --- Arrow shards --------------------------------------------------------------------------


def read_shard_bytes(data: bytes) -> tuple[pa.Table, dict[str, Any]]:
    """A shard's rows and provenance metadata."""
    table = pq.read_table(io.BytesIO(data))
    return table, json.loads(table.schema.metadata[METADATA_KEY])


def write_shard_bytes(table: pa.Table, meta: Any, reseal: bool) -> bytes:
    """Shard bytes with ``meta``; re-sealed (a fresh checksum) when asked and possible."""
    sealed = None
    if reseal and isinstance(meta, dict):
        try:
            sealed = seal_table(table, {k: v for k, v in meta.items() if k != "schema_version"})
        except Exception:  # a column type the checksum cannot encode, unserialisable meta
            sealed = None
    if sealed is None:
        try:
            raw = json.dumps(meta, allow_nan=True).encode()
        except (TypeError, ValueError):
            raw = b"{}"
        sealed = table.replace_schema_metadata({METADATA_KEY: raw})
    buffer = io.BytesIO()
    pq.write_table(sealed, buffer)
    return buffer.getvalue()


ARROW_TYPES = [
    pa.string(),
    pa.large_string(),
    pa.int8(),
    pa.int64(),
    pa.float32(),
    pa.float64(),
    pa.bool_(),
    pa.list_(pa.float32()),
    pa.large_list(pa.int16()),
    pa.list_(pa.string()),
    pa.dictionary(pa.int8(), pa.string()),
]


def retyped(column: pa.ChunkedArray, target: pa.DataType) -> pa.Array:
    """The column converted to ``target``, or nulls of that type when no cast exists."""
    try:
        return column.combine_chunks().cast(target, safe=False)
    except (pa.ArrowException, ValueError, TypeError):
        if pa.types.is_string(target) or pa.types.is_large_string(target):
            return pa.array([json.dumps(v) for v in column.to_pylist()], type=target)
        return pa.nulls(len(column), type=target)


@st.composite
def edit_table(draw: st.DrawFn, table: pa.Table) -> tuple[str, pa.Table]:
    """A result table with one structural or value change: ``(action, table)``."""
    n = table.num_rows
    names = table.column_names
    column = draw(st.sampled_from(names))
    index = names.index(column)
    action = draw(
        st.sampled_from(
            [
                "retype",
                "rename",
                "drop",
                "add",
                "swap",
                "duplicate",
                "remove",
                "shuffle",
                "nulls",
                "value",
                "value",
                "value",
            ]
        )
    )
    if action == "retype":
        array = retyped(table.column(column), draw(st.sampled_from(ARROW_TYPES)))
        return action, table.set_column(index, pa.field(column, array.type), array)
    if action == "rename":
        new = draw(st.one_of(st.text(max_size=10), st.sampled_from(names)))
        return action, table.rename_columns([new if c == column else c for c in names])
    if action == "drop":
        return action, table.remove_column(index)
    if action == "add":
        target = draw(st.sampled_from(ARROW_TYPES))
        return action, table.append_column(draw(st.text(max_size=10)), pa.nulls(n, type=target))
    if action == "swap":
        other = draw(st.sampled_from(names))
        order = [other if c == column else column if c == other else c for c in names]
        return action, table.select(order)
    if n == 0:
        return action, table
    start = draw(st.integers(0, n - 1))
    stop = draw(st.integers(start + 1, min(n, start + 8)))
    if action == "duplicate":
        return action, pa.concat_tables([table, table.slice(start, stop - start)])
    if action == "remove":
        return action, pa.concat_tables([table.slice(0, start), table.slice(stop)])
    if action == "shuffle":
        order = draw(st.permutations(list(range(n))))
        return action, table.take(pa.array(order))
    rows = table.to_pylist()
    for row in rows[start:stop]:
        row[column] = None if action == "nulls" else draw(row_value(row[column]))
    schema = table.schema
    try:
        return action, pa.Table.from_pylist(rows, schema=schema)
    except (pa.ArrowException, ValueError, TypeError, OverflowError):
        return action, table


def row_value(current: Any) -> st.SearchStrategy[Any]:
    """A replacement of the same Python kind as ``current`` (so it fits the column type)."""
    if isinstance(current, bool):
        return st.booleans()
    if isinstance(current, int):
        return st.one_of(st.integers(-3, 3), st.integers(-(2**15), 2**15 - 1), st.just(current + 1))
    if isinstance(current, float):
        return st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.just(current + 0.5))
    if isinstance(current, str):
        return st.one_of(
            texts.filter(lambda t: len(t) < 100), st.sampled_from(["", "config", "novel"])
        )
    if isinstance(current, list):
        return st.one_of(
            st.just(current[:-1]),
            st.just(current + current[:1]),
            st.lists(st.integers(-2, 20), max_size=4),
        )
    return st.none()


# --- composed mutants ------------------------------------------------------------------------

NAME_EDITS: list[Callable[[str], str]] = [
    lambda n: "./" + n,
    lambda n: n.replace("/", "//", 1) if "/" in n else n + "/",
    lambda n: n.upper(),
    lambda n: n + "/",
    lambda n: n.replace("/", "\\"),
    lambda n: "../" + n,
    lambda n: "/" + n,
    lambda n: n + "\x00.json",
    lambda n: n.rsplit("/", 1)[0] + "/notes.json",
    lambda n: n.replace("results/", "results/./", 1),
    lambda n: n.replace(".parquet", ".pkl"),
    lambda n: "results/" + n,
]
JUNK_NAMES = st.one_of(
    st.sampled_from(
        [
            "notes.json",
            "results/notes.json",
            "results/x/run.json",
            "results/x/shards/shard-00000-of-00001.parquet",
            "centre-search.json",
            "submission.toml",
            "results",
            "results/",
            "status.json",
            "README.md",
            "results/x/shards/junk.parquet",
            "Submission.toml",
        ]
    ),
    st.text(min_size=1, max_size=20),
)


@st.composite
def member_mutation(draw: st.DrawFn, entries: list[Entry]) -> tuple[str, list[Entry]]:
    """One member-level mutation: ``(kind, new entries)``."""
    entries = list(entries)
    files = [i for i, e in enumerate(entries) if not e.name.endswith("/")]
    kind = draw(
        st.sampled_from(
            [
                "rename",
                "duplicate",
                "remove",
                "junk",
                "clash",
                "mode",
                "method",
                "bytes",
                "toml",
                "toml",
                "json",
                "json",
                "arrow",
                "arrow",
                "arrow",
                "arrow",
            ]
        )
    )
    i = draw(st.sampled_from(files))
    entry = entries[i]
    if kind == "rename":
        entries[i] = replace(entry, name=draw(st.sampled_from(NAME_EDITS))(entry.name))
    elif kind == "duplicate":
        twin = draw(st.sampled_from([lambda n: n, *NAME_EDITS[:4]]))(entry.name)
        data = draw(st.sampled_from([entry.data, entries[draw(st.sampled_from(files))].data]))
        entries.insert(draw(st.integers(0, len(entries))), replace(entry, name=twin, data=data))
    elif kind == "remove":
        del entries[i]
    elif kind == "junk":
        count = draw(st.sampled_from([1, 1, 2, 30]))
        for n in range(count):
            name = draw(JUNK_NAMES) if count < 30 else f"results/junk-{n}.json"
            entries.append(Entry(name, draw(st.binary(max_size=64))))
    elif kind == "clash":
        folder = entry.name.rsplit("/", 1)[0] if "/" in entry.name else "results"
        entries.append(draw(st.sampled_from([Entry(entry.name + "/", b""), Entry(folder, b"{}")])))
    elif kind == "mode":
        mode = draw(st.sampled_from([0o120777, 0o010644, 0o140644, 0o104755, 0o020644]))
        entries[i] = replace(entry, mode=mode)
    elif kind == "method":
        other = zipfile.ZIP_STORED if entry.method == zipfile.ZIP_DEFLATED else zipfile.ZIP_DEFLATED
        entries[i] = replace(entry, method=other)
    elif kind == "bytes":
        if entry.data:
            entries[i] = same_entry(entry, draw(mutations(len(entry.data))).apply(entry.data))
    else:
        kind, entries = draw(content_mutation(entries, kind))
    return kind, entries


@st.composite
def content_mutation(draw: st.DrawFn, entries: list[Entry], family: str) -> tuple[str, list[Entry]]:
    """A TOML, JSON or Arrow edit of one member of the family's kind."""
    suffix = {"toml": ".toml", "json": ".json", "arrow": ".parquet"}[family]
    candidates = named(entries, lambda n: n.endswith(suffix))
    if not candidates:
        return family, entries
    i = draw(st.sampled_from(candidates))
    entry = entries[i]
    try:
        if family == "toml":
            kind, data = draw(toml_edit(entry.data))
        elif family == "json":
            kind, data = draw(json_edit(entry.data))
            kind += "-" + entry.name.rsplit("/", 1)[-1]
        else:
            kind, data = draw(arrow_edit(entry.data))
    except NotApplicable:  # an earlier mutation damaged the member beyond parsing
        return family + "-skipped", entries
    # Any other exception is a bug of the strategy itself and propagates.
    return kind, [*entries[:i], same_entry(entry, data), *entries[i + 1 :]]


class NotApplicable(Exception):
    """This mutation does not apply: an earlier one left the member unparsable."""


def parsed_toml(data: bytes) -> dict[str, Any]:
    """A submission.toml's tables, or :class:`NotApplicable` when it no longer parses as one."""
    import tomllib

    try:
        tables = tomllib.loads(data.decode())
        json.dumps(tables)  # TOML dates and times have no JSON form for edit_document
    except RecursionError as exc:  # what toml-nested appends is too deep for tomllib
        raise NotApplicable("nested too deep to parse") from exc
    except (UnicodeDecodeError, tomllib.TOMLDecodeError, TypeError, ValueError) as exc:
        raise NotApplicable(f"not TOML of plain values: {exc}") from exc
    if not isinstance(tables.get("submission"), dict):
        raise NotApplicable("no [submission] table")
    return tables


def parsed_json(data: bytes) -> Any:
    """A JSON member's document, or :class:`NotApplicable` when it no longer parses."""
    try:
        return json.loads(data)
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
        raise NotApplicable(f"not JSON: {exc}") from exc


def parsed_shard(data: bytes) -> tuple[pa.Table, dict[str, Any]]:
    """A shard's rows and metadata, or :class:`NotApplicable` when they no longer parse."""
    try:
        return read_shard_bytes(data)
    except (pa.ArrowException, OSError, KeyError, TypeError, ValueError) as exc:
        # not Parquet (pyarrow reports corrupt pages as OSError); no schema metadata (None) or
        # no fewtrans key; metadata not JSON
        raise NotApplicable(f"not a result shard: {exc!r}") from exc


@st.composite
def toml_edit(draw: st.DrawFn, data: bytes) -> tuple[str, bytes]:
    """submission.toml with a field swapped, removed or added, or not UTF-8, or too deep."""
    special = draw(st.sampled_from(["edit", "edit", "edit", "latin-1", "nested", "table"]))
    if special == "latin-1":
        return "toml-latin-1", data.replace(b"Red Team", "R\xe9d T\xe9am".encode("latin-1"))
    if special == "nested":
        return "toml-nested", data + b"deep = " + b"[" * 5000 + b"]" * 5000 + b"\n"
    tables = parsed_toml(data)
    if special == "table":
        tables[draw(st.text(max_size=8))] = {"x": 1}
    else:
        tables["submission"] = draw(edit_document(tables["submission"]))
    return "toml-" + special, toml_document(tables)


@st.composite
def json_edit(draw: st.DrawFn, data: bytes) -> tuple[str, bytes]:
    """A JSON member with a value swapped, removed or added (run.json maybe re-hashed)."""
    from fewtrans_board.results.row_schema import run_id_of

    document = draw(edit_document(parsed_json(data)))
    identity = document.get("identity") if isinstance(document, dict) else None
    if isinstance(identity, dict) and draw(st.booleans()):
        document["run_id"] = run_id_of(identity)  # adversary: re-hash
    return "json", json.dumps(document, allow_nan=True).encode()


@st.composite
def arrow_edit(draw: st.DrawFn, data: bytes) -> tuple[str, bytes]:
    """A shard with its provenance or its rows edited, re-sealed or not."""
    table, meta = parsed_shard(data)
    reseal = draw(st.booleans())
    if draw(st.integers(0, 3)) == 0:
        meta, kind = draw(edit_document(meta)), "arrow-meta"
    else:
        action, table = draw(edit_table(table))
        kind = f"arrow-{action}"
    return kind, write_shard_bytes(table, meta, reseal)


class Pristine(bytes):
    """Bundle bytes with a short ``repr`` (hypothesis prints the strategy's arguments)."""

    def __repr__(self) -> str:
        return f"<bundle of {len(self)} bytes>"


@st.composite
def bundle_mutants(draw: st.DrawFn, pristine: Pristine) -> tuple[list[str], bytes]:
    """One to three mutations of a valid bundle: ``(kinds, bytes)``."""
    entries = read_entries(pristine)
    kinds = []
    for _ in range(draw(st.integers(1, 3))):
        kind, entries = draw(member_mutation(entries))
        kinds.append(kind)
    bundle = write_entries(entries)
    if draw(st.integers(0, 3)) == 0:
        kind, bundle = draw(zip_mutation(bundle))
        kinds.append(kind)
    return kinds, bundle
