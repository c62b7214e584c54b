"""Write and read result shards atomically."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fewtrans_board.atomic import write_with
from fewtrans_board.canonical import canonical_json
from fewtrans_board.errors import FewtransError
from fewtrans_board.results.schema import COLUMNS, METADATA_KEY, SCHEMA_VERSION, arrow_schema


class ResultsError(FewtransError):
    """A results file or folder is unreadable or inconsistent."""


def rows_to_table(rows: list[dict[str, Any]], metadata: dict[str, Any]) -> Any:
    """Build a pyarrow table with the v1 schema and the provenance metadata."""
    import pyarrow as pa

    schema = arrow_schema()
    arrays = []
    for field in schema:
        values = [row[field.name] for row in rows]
        if pa.types.is_dictionary(field.type):
            arrays.append(pa.array(values, type=field.type.value_type).dictionary_encode())
        else:
            arrays.append(pa.array(values, type=field.type))
    table = pa.Table.from_arrays(arrays, schema=schema)
    meta = {**metadata, "schema_version": SCHEMA_VERSION}
    return table.replace_schema_metadata({METADATA_KEY: canonical_json(meta).encode()})


def write_shard(path: Path, rows: list[dict[str, Any]], metadata: dict[str, Any]) -> None:
    """Write a shard atomically (temp file, fsync, rename): never visible half-written."""
    import pyarrow.parquet as pq

    table = rows_to_table(rows, metadata)
    write_with(path, lambda tmp: pq.write_table(table, tmp, compression="zstd"))


def read_shard(path: Path) -> tuple[Any, dict[str, Any]]:
    """Read a shard table and its metadata, checking the schema version."""
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as exc:  # any decoder error means a corrupt file
        raise ResultsError(f"results shard {path} is unreadable: {exc}") from exc
    raw = (table.schema.metadata or {}).get(METADATA_KEY)
    if raw is None:
        raise ResultsError(f"{path} is not a fewtrans-board results shard (no metadata)")
    meta = json.loads(raw)
    if meta.get("schema_version") != SCHEMA_VERSION:
        raise ResultsError(
            f"{path}: results schema version {meta.get('schema_version')}, "
            f"expected {SCHEMA_VERSION}"
        )
    if "split" not in table.column_names:  # shards written before base-to-novel existed
        import pyarrow as pa

        table = table.add_column(
            table.column_names.index("kind"),
            "split",
            pa.array(["base"] * table.num_rows).dictionary_encode(),
        )
    missing = [c for c in COLUMNS if c not in table.column_names]
    if missing:
        raise ResultsError(f"{path}: missing columns {missing}")
    return table, meta
