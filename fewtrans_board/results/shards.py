"""Write and read result shards atomically, with a content checksum verified on every read.

A shard's metadata carries ``checksum``: the sha256 of its canonical content, that is
the provenance metadata (everything but the checksum itself) and every row, decoded
column by column into a byte form that does not depend on the Parquet encoder
(dictionary strings decoded, numbers little-endian, list offsets rebased). A flipped
byte, a truncation or an edited row is then refused with an error naming the file,
whether or not the Parquet decoder notices it first.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from fewtrans_board.core.atomic import write_with
from fewtrans_board.core.canonical import canonical_json
from fewtrans_board.core.digest_cache import DigestCache
from fewtrans_board.core.errors import FewtransError, describe
from fewtrans_board.results.row_schema import METADATA_KEY, SCHEMA_VERSION, arrow_schema

CHECKSUM_KEY = "checksum"
CHECKSUM_ALGORITHM = "sha256/fewtrans-shard-v1"


class ResultsError(FewtransError):
    """A results file or folder is unreadable or inconsistent."""


class CorruptShardError(ResultsError):
    """A shard file is unreadable or its content does not match its checksum.

    Attributes:
        path: the shard file.
        reason: what is wrong, without the file name.
    """

    def __init__(self, path: Path, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(
            f"results shard {path} is corrupt ({reason}). Run the same 'fewtrans-board evaluate' "
            "command on this folder to recompute it (resume sets corrupt shards aside), or "
            "delete the file."
        )

    def __reduce__(self) -> tuple[type[CorruptShardError], tuple[Path, str]]:
        return (type(self), (self.path, self.reason))  # picklable across worker processes


def shard_file_name(index: int, count: int) -> str:
    """File name of shard ``index`` of ``count``."""
    return f"shard-{index:05d}-of-{count:05d}.parquet"


def rows_to_table(rows: list[dict[str, Any]], metadata: dict[str, Any]) -> Any:
    """Build a pyarrow table with the v1 schema, the provenance metadata and its checksum."""
    import pyarrow as pa

    schema = arrow_schema()
    arrays = []
    for field in schema:
        values = [row[field.name] for row in rows]
        if pa.types.is_dictionary(field.type):
            arrays.append(pa.array(values, type=field.type.value_type).dictionary_encode())
        else:
            arrays.append(pa.array(values, type=field.type))
    return seal_table(pa.Table.from_arrays(arrays, schema=schema), metadata)


def seal_table(table: Any, metadata: dict[str, Any]) -> Any:
    """Attach provenance metadata, the schema version and the content checksum to rows."""
    # Through JSON first, so the checksum sees exactly what a reader decodes (str keys ...).
    meta = json.loads(canonical_json({k: v for k, v in metadata.items() if k != CHECKSUM_KEY}))
    meta["schema_version"] = SCHEMA_VERSION
    meta[CHECKSUM_KEY] = {
        "algorithm": CHECKSUM_ALGORITHM,
        "rows": table.num_rows,
        "sha256": shard_checksum(table, meta),
    }
    return table.replace_schema_metadata({METADATA_KEY: canonical_json(meta).encode()})


def write_shard(path: Path, rows: list[dict[str, Any]], metadata: dict[str, Any]) -> None:
    """Write a shard atomically (temp file, fsync, rename): never visible half-written.

    Parquet page checksums are written too, so the decoder itself refuses most damaged
    pages before the content checksum is computed.
    """
    write_table(path, rows_to_table(rows, metadata))


def write_table(path: Path, table: Any, metadata_in_footer: bool = False) -> None:
    """Write a sealed shard table atomically, with Parquet page checksums.

    Args:
        path: the shard file.
        table: the sealed table.
        metadata_in_footer: keep the metadata only as the file's key-value metadata. By
            default pyarrow writes it twice, as key-value and again inside the serialised
            Arrow schema; a stored shard's provenance is most of its bytes once its logits
            are in a blob (12 shards per run repeat it), so the split side is written once.
            :func:`read_shard` reads either layout.
    """
    import pyarrow.parquet as pq

    def write(tmp: Path) -> None:
        if not metadata_in_footer:
            pq.write_table(table, tmp, compression="zstd", write_page_checksum=True)
            return
        bare = table.replace_schema_metadata(None)
        with pq.ParquetWriter(
            tmp, bare.schema, compression="zstd", write_page_checksum=True
        ) as writer:
            writer.write_table(bare)
            writer.add_key_value_metadata(table.schema.metadata)

    write_with(path, write)


def footer_metadata(path: Path | Any) -> dict[bytes, bytes]:
    """A Parquet file's key-value metadata (where a split shard keeps its provenance).

    Args:
        path: the file, or a ``pyarrow`` readable (a ``BufferReader`` of its bytes).
    """
    import pyarrow.parquet as pq

    return dict(pq.ParquetFile(path).metadata.metadata or {})


def shard_checksum(table: Any, meta: dict[str, Any]) -> str:
    """Sha256 of a shard's canonical content: metadata (minus the checksum) and rows.

    Args:
        table: the shard's rows (any pyarrow table with the results schema).
        meta: the shard's metadata; its ``checksum`` entry, if any, is ignored.

    Returns:
        The hex digest.
    """
    digest = hashlib.sha256()
    content = {k: v for k, v in meta.items() if k != CHECKSUM_KEY}
    digest.update(canonical_json(content).encode())
    digest.update(f"\nrows={table.num_rows}\n".encode())
    for name, column in zip(table.column_names, table.columns, strict=True):
        digest.update(f"{name}:{type_name(column.type)}\n".encode())
        for part in _canonical_parts(column.combine_chunks()):
            digest.update(len(part).to_bytes(8, "little"))
            digest.update(part)
    return digest.hexdigest()


def verify_shard_checksum(table: Any, meta: dict[str, Any], path: Path) -> None:
    """Check a decoded shard against the checksum in its metadata.

    Bundle validation and every reader call this (through :func:`read_shard`).

    Args:
        table: the decoded rows.
        meta: the decoded metadata.
        path: the file (named in the error).

    Raises:
        CorruptShardError: no checksum, an unknown algorithm, or a mismatch.
    """
    stored = meta.get(CHECKSUM_KEY)
    if not isinstance(stored, dict) or not isinstance(stored.get("sha256"), str):
        raise CorruptShardError(
            path,
            "it carries no content checksum; shards written by fewtrans-board before checksums "
            "existed must be recomputed",
        )
    if stored.get("algorithm") != CHECKSUM_ALGORITHM:
        raise CorruptShardError(path, f"unknown checksum algorithm {stored.get('algorithm')!r}")
    if stored.get("rows") != table.num_rows:
        raise CorruptShardError(
            path, f"it holds {table.num_rows} rows, its checksum covers {stored.get('rows')}"
        )
    actual = shard_checksum(table, meta)
    if actual != stored["sha256"]:
        raise CorruptShardError(
            path,
            f"content sha256 {actual[:16]}... differs from the stored {stored['sha256'][:16]}...",
        )


def read_shard(path: Path) -> tuple[Any, dict[str, Any]]:
    """Read a shard table and its metadata, verifying structure, schema and checksum.

    The file is read once; its bytes are hashed and decoded from memory, so what is checked
    is what is returned. A shard whose bytes were verified before in this process (the
    site, the index and validation read the same store many times) is returned from
    :data:`VERIFIED_SHARDS` without decoding it again; the metadata is always a new dict.

    Raises:
        CorruptShardError: anything wrong with the file, whatever the decoder raised.
    """
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError as exc:
        raise ResultsError(f"results shard {path} does not exist") from exc
    except OSError as exc:  # a folder or an unreadable file under a shard's name
        raise CorruptShardError(path, f"unreadable Parquet: {describe(exc)}") from exc
    digest = hashlib.sha256(data).hexdigest()
    known = VERIFIED_SHARDS.get(digest)
    if known is None:
        known = _decode_shard(data, path)
        VERIFIED_SHARDS.put(digest, known, len(data) + known[0].nbytes)
    table, raw = known
    return table, json.loads(raw)


def _decode_shard(data: bytes, path: Path) -> tuple[Any, bytes]:
    """Decode and verify a shard's bytes: the table and its metadata as stored (JSON)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(pa.BufferReader(data), page_checksum_verification=True)
        table.validate(full=True)
    except Exception as exc:  # any decoder error means a damaged file
        raise CorruptShardError(path, f"unreadable Parquet: {describe(exc)}") from exc
    raw = (table.schema.metadata or {}).get(METADATA_KEY)
    if raw is None:  # a split shard written with its metadata in the footer only
        try:
            raw = footer_metadata(pa.BufferReader(data)).get(METADATA_KEY)
        except Exception as exc:  # the file decoded a moment ago: a damaged footer
            raise CorruptShardError(path, f"unreadable Parquet: {describe(exc)}") from exc
        if raw is not None:
            table = table.replace_schema_metadata({METADATA_KEY: raw})
    if raw is None:
        raise CorruptShardError(path, "no fewtrans-board results metadata")
    try:
        meta = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise CorruptShardError(path, f"unreadable metadata: {describe(exc)}") from exc
    if not isinstance(meta, dict):
        raise CorruptShardError(path, "metadata is not a JSON object")
    if meta.get("schema_version") != SCHEMA_VERSION:
        raise CorruptShardError(
            path,
            f"results schema version {meta.get('schema_version')!r}, expected {SCHEMA_VERSION}",
        )
    if [(f.name, type_name(f.type)) for f in table.schema] != [
        (f.name, type_name(f.type)) for f in arrow_schema()
    ]:
        raise CorruptShardError(path, f"columns or types differ from schema v{SCHEMA_VERSION}")
    try:
        verify_shard_checksum(table, meta, path)
    except CorruptShardError:
        raise
    except Exception as exc:  # decoding a damaged column while hashing it
        raise CorruptShardError(path, f"undecodable rows: {describe(exc)}") from exc
    return table, bytes(raw)


VERIFIED_SHARDS: DigestCache[tuple[Any, bytes]] = DigestCache(max_bytes=256 * 2**20)
"""Shards that passed :func:`read_shard`'s checks in this process, by the sha256 of their
file's bytes (the checks are a function of the bytes): the table (immutable) and the
stored metadata. Reading the committed store's 114 shards again takes 15 ms of hashing
instead of about 1 s of decoding and checksumming (measured)."""


def type_name(data_type: Any) -> str:
    """A column type as text, independent of how a writer named list elements."""
    import pyarrow as pa

    if pa.types.is_dictionary(data_type):
        return f"dictionary<{type_name(data_type.value_type)}>"
    if pa.types.is_list(data_type) or pa.types.is_large_list(data_type):
        return f"list<{type_name(data_type.value_type)}>"
    return str(data_type)


def _canonical_parts(array: Any) -> Iterator[bytes]:
    """Encoder-independent bytes of an array: validity, then values."""
    import pyarrow as pa

    if pa.types.is_dictionary(array.type):
        text = _dictionary_text(array)
        if text is not None:
            yield np.zeros(len(array), dtype=np.uint8).tobytes()  # no nulls
            yield text
            return
        array = array.dictionary_decode()
    yield np.asarray(array.is_null().to_numpy(zero_copy_only=False), dtype=np.uint8).tobytes()
    if pa.types.is_string(array.type) or pa.types.is_large_string(array.type):
        yield canonical_json(array.to_pylist()).encode()
    elif pa.types.is_list(array.type) or pa.types.is_large_list(array.type):
        offsets = array.offsets.to_numpy(zero_copy_only=False).astype("<i8")
        yield (offsets - offsets[0]).astype("<i8").tobytes()
        values = array.values.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
        yield from _canonical_parts(values)
    elif pa.types.is_integer(array.type) or pa.types.is_floating(array.type):
        if array.null_count:
            array = array.fill_null(0)
        values = array.to_numpy(zero_copy_only=False)
        yield values.astype(values.dtype.newbyteorder("<")).tobytes()
    else:
        raise TypeError(f"no canonical form for column type {array.type}")


def _dictionary_text(array: Any) -> bytes | None:
    """``canonical_json`` of a dictionary-encoded text array, each distinct value encoded once.

    ``None`` where the array holds nulls or is not text. The bytes equal
    ``canonical_json(array.dictionary_decode().to_pylist())``: a list of strings is its
    items' JSON joined by commas.
    """
    import pyarrow as pa

    kind = array.type.value_type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        return None
    if array.null_count or array.dictionary.null_count:
        return None
    encoded = np.asarray(
        [canonical_json(value) for value in array.dictionary.to_pylist()], dtype=object
    )
    indices = array.indices.to_numpy(zero_copy_only=False)
    return ("[" + ",".join(encoded[indices].tolist()) + "]").encode()
