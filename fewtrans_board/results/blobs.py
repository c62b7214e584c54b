"""Logits outside the shards: content-addressed blobs, and shards split from and joined to them.

A stored shard is *split*: its ``logits`` column (nearly all of its bytes) moves to a blob, a
Parquet file of that one column named by the sha256 of its bytes; the shard keeps every other
column, its ``logits`` all null, and records in its sealed metadata (:data:`LOGITS_BLOB_KEY`)
the blob's ``sha256`` and ``bytes``, ``content`` (the seal of the shard as validated, which
:func:`join_shard` checks the rebuilt shard against) and ``source_sha256`` (the sha256 of the
validated shard file, what a bundle's digest covers). Where blobs live is the store's
configuration (:class:`BlobStore`: a folder or an fsspec URL); every read checks a blob's size
and sha256 before decoding it. SECURITY.md ("The store") explains why this keeps every number.
"""

from __future__ import annotations

import hashlib
import io
import tomllib
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from fewtrans_board.core.atomic import create_exclusive
from fewtrans_board.core.errors import describe
from fewtrans_board.results.shards import (
    CHECKSUM_ALGORITHM,
    CHECKSUM_KEY,
    CorruptShardError,
    ResultsError,
    read_shard,
    seal_table,
    type_name,
    verify_shard_checksum,
)

LOGITS_BLOB_KEY = "logits_blob"
"""Shard metadata key of a split shard: the blob holding its logits column."""
BLOB_FORMAT = "parquet/fewtrans-logits-v1"
"""A blob is a Parquet file with one column ``logits`` (list<float16>), the shard's rows."""
CONFIG_FILE = "blobs.toml"
"""The store's blob configuration, beside ``results/``."""
DEFAULT_FOLDER = "blobs"
"""The blob folder of a store without ``blobs.toml`` (relative to the store)."""
MAX_BLOB_BYTES = 8 << 30
"""A recorded blob size above this is refused before anything is fetched."""
_HEX = frozenset("0123456789abcdef")
RECORD_KEYS = frozenset({"sha256", "bytes", "format", "rows", "content", "source_sha256"})
"""The keys of a split shard's blob record (:func:`split_shard` writes them)."""
LFS_POINTER = b"version https://git-lfs.github.com/spec/v1"
"""How a git LFS pointer file starts (a blob folder tracked by LFS, cloned without it)."""


class BlobError(ResultsError):
    """A logits blob is missing, unreadable or not what its shard recorded.

    Attributes:
        sha256: the blob's recorded hash.
        where: where it was looked for (a path or a URL).
        problem: what is wrong, without the blob's name.
        missing: whether the blob was not found at all (else it is damaged).
    """

    def __init__(self, sha256: str, where: str, problem: str, missing: bool = False) -> None:
        self.sha256 = sha256
        self.where = where
        self.problem = problem
        self.missing = missing
        super().__init__(f"logits blob {sha256} {problem} (looked for at {where})")

    def __reduce__(self) -> tuple[type[BlobError], tuple[str, str, str, bool]]:
        return (type(self), (self.sha256, self.where, self.problem, self.missing))


def is_sha256(value: object) -> bool:
    """Whether ``value`` is a lowercase sha256 hex digest."""
    return isinstance(value, str) and len(value) == 64 and set(value) <= _HEX


class BlobStore:
    """Content-addressed blobs in a local folder or at an fsspec URL.

    A blob ``<sha>`` is ``<location>/<sha[:2]>/<sha>``. Writing is idempotent (an existing
    blob is checked, never rewritten) and atomic where the backend allows it (a local folder:
    a complete file appears at once; object stores write whole objects).

    Args:
        location: a folder, or a URL with a scheme (``file://``, ``s3://``, ...), which goes
            through fsspec.
        options: keyword arguments for the fsspec file system (never credentials: those
            come from the environment the backend reads).
    """

    def __init__(self, location: str | Path, options: dict[str, Any] | None = None) -> None:
        self.location = str(location)
        self.options = dict(options or {})

    def __repr__(self) -> str:
        return f"BlobStore({self.location!r})"

    @property
    def is_url(self) -> bool:
        """Whether blobs are reached through fsspec."""
        return "://" in self.location

    @classmethod
    def for_store(cls, root: Path) -> BlobStore:
        """The blob store a leaderboard store configures in ``blobs.toml`` (default ``blobs/``).

        Its one table ``[blobs]`` holds ``url`` (a folder relative to the store, or an fsspec
        URL) and optionally fsspec ``options`` (no credentials); CONTRIBUTING.md shows one.

        Raises:
            ResultsError: an unreadable or malformed ``blobs.toml``.
        """
        path = root / CONFIG_FILE
        if not path.is_file():
            return cls(root / DEFAULT_FOLDER)
        try:
            config = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise ResultsError(f"{path} is unreadable: {describe(exc)}") from exc
        table = config.get("blobs")
        unknown = sorted(set(config) - {"blobs"}) or sorted(
            set(table or {}) - {"url", "options"} if isinstance(table, dict) else []
        )
        if not isinstance(table, dict) or unknown or not isinstance(table.get("url"), str):
            raise ResultsError(
                f'{path} must hold a [blobs] table with url = "FOLDER-OR-URL" (and optionally '
                f"options = {{...}}){'; unknown key ' + unknown[0] if unknown else ''}"
            )
        options = table.get("options", {})
        if not isinstance(options, dict):
            raise ResultsError(f"{path}: blobs.options must be a table")
        url = str(table["url"]).strip()
        if not url:
            raise ResultsError(f"{path}: blobs.url is empty")
        return cls(url if "://" in url else root / url, options)

    @cached_property
    def _fs(self) -> tuple[Any, str]:
        import fsspec

        fs, root = fsspec.core.url_to_fs(self.location, **self.options)
        return fs, str(root).rstrip("/")

    def _relative(self, sha256: str) -> str:
        if not is_sha256(sha256):
            raise ValueError(f"{sha256!r} is not a sha256 hex digest")
        return f"{sha256[:2]}/{sha256}"

    def where(self, sha256: str) -> str:
        """Where blob ``sha256`` lives: a path, or a URL."""
        if not self.is_url:
            return str(Path(self.location) / self._relative(sha256))
        return f"{self.location.rstrip('/')}/{self._relative(sha256)}"

    def has(self, sha256: str) -> bool:
        """Whether a blob of that name exists (its content is not checked).

        Raises:
            BlobError: the backend could not tell (refused, unreachable).
        """
        if not self.is_url:
            return Path(self.where(sha256)).is_file()
        try:
            fs, root = self._fs
            return bool(fs.exists(f"{root}/{self._relative(sha256)}"))
        except Exception as exc:  # any backend error: name the blob, never a traceback
            raise BlobError(
                sha256, self.where(sha256), f"cannot be looked up: {describe(exc)}"
            ) from exc

    def get(self, sha256: str, size: int | None = None) -> bytes:
        """The bytes of blob ``sha256``, checked against its name (and ``size``, if given).

        Raises:
            BlobError: missing, unreadable, of another size, or with another sha256.
        """
        where = self.where(sha256)
        if size is not None and not 0 < size <= MAX_BLOB_BYTES:
            raise BlobError(sha256, where, f"has a recorded size of {size} bytes")
        try:
            if self.is_url:
                fs, root = self._fs
                path = f"{root}/{self._relative(sha256)}"
                if size is not None and fs.size(path) != size:
                    raise BlobError(
                        sha256, where, f"holds {fs.size(path)} bytes, its shard records {size}"
                    )
                data = fs.cat_file(path)
            else:
                file = Path(where)
                if size is not None and file.stat().st_size != size:
                    with file.open("rb") as head:  # the start only: a wrong blob may be large
                        pointer = head.read(len(LFS_POINTER)) == LFS_POINTER
                    if pointer:
                        raise BlobError(
                            sha256,
                            where,
                            "is a git LFS pointer, not the blob: fetch it with "
                            f"'git lfs pull --include {file.as_posix()}'",
                            missing=True,
                        )
                    raise BlobError(
                        sha256,
                        where,
                        f"holds {file.stat().st_size} bytes, its shard records {size}",
                    )
                data = file.read_bytes()
        except BlobError:
            raise
        except FileNotFoundError as exc:
            raise BlobError(sha256, where, "is missing", missing=True) from exc
        except Exception as exc:  # any backend error: name the blob, never a traceback
            raise BlobError(sha256, where, f"cannot be read: {describe(exc)}") from exc
        actual = hashlib.sha256(data).hexdigest()
        if actual != sha256:
            raise BlobError(sha256, where, f"is corrupt: its content has sha256 {actual}")
        return bytes(data)

    def put(self, data: bytes) -> str:
        """Store ``data`` under its sha256 (idempotent); an existing blob is checked.

        Returns:
            The sha256.

        Raises:
            BlobError: a blob of that name exists with other content (it is left alone:
                remove it and store again), or the backend refused the write.
        """
        sha256 = hashlib.sha256(data).hexdigest()
        where = self.where(sha256)
        if self.has(sha256):
            self.get(sha256, len(data))  # a damaged copy is named, never silently kept
            return sha256
        try:
            if self.is_url:
                fs, root = self._fs
                path = f"{root}/{self._relative(sha256)}"
                fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
                fs.pipe_file(path, data)
            else:
                create_exclusive(Path(where), data)
        except Exception as exc:  # any backend error
            raise BlobError(sha256, where, f"cannot be written: {describe(exc)}") from exc
        self.get(sha256, len(data))
        return sha256


# --- split and joined shards ---------------------------------------------------------------


def check_split(table: Any, meta: dict[str, Any], path: Path) -> dict[str, Any] | None:
    """Check the blob record of a decoded, sealed shard; ``None`` for a shard with its logits.

    Raises:
        CorruptShardError: a malformed record, or logits left in a split shard.
    """
    if LOGITS_BLOB_KEY not in meta:
        return None
    record = meta[LOGITS_BLOB_KEY]
    content = record.get("content") if isinstance(record, dict) else None
    problem = None
    if not isinstance(record, dict) or set(record) != RECORD_KEYS:
        problem = "a malformed logits_blob record"
    elif record["format"] != BLOB_FORMAT:
        problem = f"logits blob format {record['format']!r}, expected {BLOB_FORMAT!r}"
    elif not is_sha256(record["sha256"]) or not is_sha256(record["source_sha256"]):
        problem = "a logits_blob record without sha256 digests"
    elif (
        not isinstance(record["bytes"], int)
        or isinstance(record["bytes"], bool)
        or not 0 < record["bytes"] <= MAX_BLOB_BYTES
    ):
        problem = f"a logits blob size of {record['bytes']!r}"
    elif record["rows"] != table.num_rows:
        problem = f"a logits blob of {record['rows']!r} rows for {table.num_rows} rows"
    elif (
        not isinstance(content, dict)
        or content.get("algorithm") != CHECKSUM_ALGORITHM
        or content.get("rows") != table.num_rows
        or not is_sha256(content.get("sha256"))
    ):
        problem = "a logits_blob record without the seal of the shard as validated"
    elif table.column("logits").null_count != table.num_rows:
        problem = "logits in the shard although its logits_blob holds them"
    if problem is not None:
        raise CorruptShardError(path, problem)
    return dict(record)


def blob_bytes(logits: Any) -> bytes:
    """A blob: the ``logits`` column alone, as a Parquet file (zstd, page checksums)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    buffer = io.BytesIO()
    table = pa.table({"logits": logits})
    pq.write_table(table, buffer, compression="zstd", write_page_checksum=True)
    return buffer.getvalue()


def split_shard(table: Any, meta: dict[str, Any], source_sha256: str) -> tuple[Any, bytes]:
    """Split a sealed shard into its git side (sealed) and its logits blob.

    Args:
        table: the shard's rows, with logits (checked by :func:`~.shards.read_shard`).
        meta: its sealed metadata.
        source_sha256: the sha256 of the shard file's bytes (recorded for bundle digests).

    Returns:
        ``(git table, blob bytes)``: the table carries its metadata and new seal.
    """
    import pyarrow as pa

    blob = blob_bytes(table.column("logits"))
    logits_field = table.schema.field("logits")
    record = {
        "sha256": hashlib.sha256(blob).hexdigest(),
        "bytes": len(blob),
        "format": BLOB_FORMAT,
        "rows": table.num_rows,
        "content": meta[CHECKSUM_KEY],
        "source_sha256": source_sha256,
    }
    rest = {k: v for k, v in meta.items() if k not in (CHECKSUM_KEY, "schema_version")}
    nulls = pa.nulls(table.num_rows, type=logits_field.type)
    git = table.set_column(table.schema.get_field_index("logits"), logits_field, nulls)
    return seal_table(git, {**rest, LOGITS_BLOB_KEY: record}), blob


def join_shard(
    table: Any, meta: dict[str, Any], record: dict[str, Any], blob: bytes, path: Path
) -> tuple[Any, dict[str, Any]]:
    """Put a split shard's logits back and check the result against the seal it was split from.

    Args:
        table: the git side (checked by :func:`check_split`).
        meta: its metadata.
        record: its blob record.
        blob: the blob's bytes (hash already checked by :meth:`BlobStore.get`).
        path: the shard file, for messages.

    Returns:
        ``(table, metadata)`` exactly as the shard was validated.

    Raises:
        BlobError: the blob does not decode to the shard's logits column.
        CorruptShardError: the joined rows do not match the recorded seal.
    """
    import pyarrow.parquet as pq

    try:
        logits = pq.read_table(io.BytesIO(blob), page_checksum_verification=True)
        logits.validate(full=True)
    except Exception as exc:  # a decoder error on a blob whose hash matched: a bad split
        raise BlobError(
            record["sha256"], str(path), f"is not a logits column: {describe(exc)}"
        ) from exc
    expected = type_name(table.schema.field("logits").type)
    if (
        logits.column_names != ["logits"]
        or type_name(logits.schema.field("logits").type) != expected
        or logits.num_rows != table.num_rows
    ):
        raise BlobError(
            record["sha256"],
            str(path),
            f"holds columns {logits.column_names} of {logits.num_rows} rows, not the "
            f"{table.num_rows} rows of {expected} logits of its shard",
        )
    field = table.schema.field("logits")
    joined = table.set_column(
        table.schema.get_field_index("logits"), field, logits.column("logits").cast(field.type)
    )
    original = {k: v for k, v in meta.items() if k not in (LOGITS_BLOB_KEY, CHECKSUM_KEY)}
    original[CHECKSUM_KEY] = record["content"]
    try:
        verify_shard_checksum(joined, original, path)
    except CorruptShardError as exc:
        raise CorruptShardError(
            path, f"with its logits blob it is not the shard that was validated ({exc.reason})"
        ) from exc
    from fewtrans_board.core.canonical import canonical_json
    from fewtrans_board.results.row_schema import METADATA_KEY

    joined = joined.replace_schema_metadata({METADATA_KEY: canonical_json(original).encode()})
    return joined, original


def split_shard_file(path: Path, blobs: BlobStore) -> bool:
    """Split one shard file in place: blob stored (and checked) first, then the file replaced.

    Returns:
        ``False`` when the shard was split already (nothing is written).

    Raises:
        CorruptShardError: the shard is damaged (nothing is written).
        BlobError: the blob store refused the blob.
    """
    from fewtrans_board.results.shards import write_table

    data = path.read_bytes()
    table, meta = read_shard(path)
    if check_split(table, meta, path) is not None:
        return False
    git, blob = split_shard(table, meta, hashlib.sha256(data).hexdigest())
    blobs.put(blob)
    write_table(path, git, metadata_in_footer=True)
    return True


@dataclass(frozen=True)
class SplitReport:
    """What splitting a folder of runs did.

    Attributes:
        shards: shard files split now.
        already: shard files that were split before.
        git_bytes: bytes of the split shard files (what stays in git).
        blob_bytes: bytes of the blobs they reference.
    """

    shards: int
    already: int
    git_bytes: int
    blob_bytes: int


def split_results_folder(folder: Path, blobs: BlobStore) -> SplitReport:
    """Split every shard under ``folder`` (runs of one entry); idempotent.

    Raises:
        CorruptShardError, BlobError: as :func:`split_shard_file`.
    """
    split = already = git = blob = 0
    for path in sorted(folder.rglob("shards/shard-*.parquet")):
        if split_shard_file(path, blobs):
            split += 1
        else:
            already += 1
        git += path.stat().st_size
        blob += int(read_record(path)["bytes"])
    return SplitReport(split, already, git, blob)


def read_record(path: Path) -> dict[str, Any]:
    """The blob record in a split shard file's metadata, read without decoding its rows.

    Only for reporting sizes and bundle digests: readers take the record from
    :func:`check_split` on the verified shard.
    """
    import json

    import pyarrow.parquet as pq

    from fewtrans_board.results.row_schema import METADATA_KEY
    from fewtrans_board.results.shards import footer_metadata

    try:
        raw = (pq.read_schema(path).metadata or {}).get(METADATA_KEY) or footer_metadata(path).get(
            METADATA_KEY, b"{}"
        )
        record = json.loads(raw).get(LOGITS_BLOB_KEY)
    except Exception:  # a damaged file: its readers name it
        return {}
    return record if isinstance(record, dict) else {}
