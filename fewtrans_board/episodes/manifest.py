"""Frozen episode manifests: Parquet, one row per (episode, item), content-addressed.

The sha256 covers a canonical serialisation of the content metadata and every row in
stored order, so it does not depend on the Parquet encoder. It is stored in the file's
metadata and checked on every load; a sidecar ``<file>.sha256`` holds the file's byte hash
in ``sha256sum`` format for frozen copies.
"""

from __future__ import annotations

import collections
import hashlib
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fewtrans_board.core.atomic import write_bytes_atomic, write_with
from fewtrans_board.core.canonical import canonical_json, sha256_text
from fewtrans_board.core.digest_cache import DigestCache
from fewtrans_board.core.errors import FewtransError, describe
from fewtrans_board.core.version import __version__
from fewtrans_board.models.weights import file_sha256

SCHEMA_VERSION = 1
METADATA_KEY = b"fewtrans_board.manifest"
ROLES = ("support", "query", "novel")
# Provenance that must not change the content hash of identical episodes.
UNHASHED_KEYS = frozenset({"sha256", "built_with", "build_command"})
COLUMNS = ("dataset", "episode", "stream_index", "role", "item", "label", "class_index", "class_id")


def _python_values(column: Any) -> list[Any]:
    """A column's values as Python objects, equal to ``column.to_pylist()``.

    A dictionary-encoded column without nulls is decoded through its distinct values:
    ``to_pylist`` builds an Arrow scalar per row, 40-60 ms for each of a 31k-row manifest's
    three dictionary columns (measured), a third of loading it.
    """
    import pyarrow as pa

    if not pa.types.is_dictionary(column.type) or column.null_count:
        return column.to_pylist()  # type: ignore[no-any-return]
    values: list[Any] = []
    for chunk in column.chunks:
        words = chunk.dictionary.to_pylist()
        values.extend([words[i] for i in chunk.indices.to_numpy().tolist()])
    return values


class ManifestError(FewtransError):
    """A manifest file is unreadable, altered, or inconsistent."""


@dataclass(frozen=True)
class ManifestEpisode:
    """One episode of a manifest.

    Attributes:
        index: episode position in the manifest (0-based).
        stream_index: position in the sampler's stream.
        classes: global class indices in label order.
        class_ids: the matching class ids.
        support: ``(item, label)`` pairs in stored order.
        query: ``(item, label)`` pairs in stored order.
        novel_classes: base-to-novel only: novel classes in novel-label order.
        novel_class_ids: their class ids.
        novel_query: ``(item, novel label)`` pairs of unseen-class queries.
    """

    index: int
    stream_index: int
    classes: tuple[int, ...]
    class_ids: tuple[str, ...]
    support: tuple[tuple[str, int], ...]
    query: tuple[tuple[str, int], ...]
    novel_classes: tuple[int, ...] = ()
    novel_class_ids: tuple[str, ...] = ()
    novel_query: tuple[tuple[str, int], ...] = ()

    @property
    def ways(self) -> int:
        """Number of classes."""
        return len(self.classes)

    def shots(self) -> list[int]:
        """Support items per class, in label order."""
        counts = collections.Counter(label for _, label in self.support)
        return [counts[c] for c in range(self.ways)]

    def queries(self) -> list[int]:
        """Query items per class, in label order."""
        counts = collections.Counter(label for _, label in self.query)
        return [counts[c] for c in range(self.ways)]


@dataclass
class Manifest:
    """An episode manifest in memory.

    Attributes:
        rows: column name to list of values, in stored order.
        meta: content metadata (protocol, dataset, seed, draw ...).
        sha256: canonical content hash.
    """

    rows: dict[str, list[Any]]
    meta: dict[str, Any]
    sha256: str = ""
    _episodes: list[ManifestEpisode] | None = field(default=None, repr=False)

    # --- construction -------------------------------------------------------------------

    @classmethod
    def from_episodes(
        cls, dataset: str, episodes: Sequence[ManifestEpisode], meta: dict[str, Any]
    ) -> Manifest:
        """Build a manifest from episodes and content metadata, computing its hash."""
        rows: dict[str, list[Any]] = {name: [] for name in COLUMNS}
        for ep in episodes:
            for role, pairs, classes, ids in (
                ("support", ep.support, ep.classes, ep.class_ids),
                ("query", ep.query, ep.classes, ep.class_ids),
                ("novel", ep.novel_query, ep.novel_classes, ep.novel_class_ids),
            ):
                for item, label in pairs:
                    row = (dataset, ep.index, ep.stream_index, role, item, label)
                    for name, value in zip(
                        COLUMNS, (*row, classes[label], ids[label]), strict=True
                    ):
                        rows[name].append(value)
        meta = {**meta, "schema_version": SCHEMA_VERSION, "episodes": len(episodes)}
        manifest = cls(rows=rows, meta=meta)
        manifest.sha256 = manifest.compute_sha256()
        manifest._episodes = list(episodes)
        return manifest

    def compute_sha256(self) -> str:
        """Hash the canonical serialisation of content metadata and rows."""
        content_meta = {k: v for k, v in self.meta.items() if k not in UNHASHED_KEYS}
        lines = "\n".join(
            "\t".join(str(value) for value in row)
            for row in zip(*(self.rows[name] for name in COLUMNS), strict=True)
        )
        return sha256_text(canonical_json(content_meta), "\t".join(COLUMNS), lines)

    # --- I/O ----------------------------------------------------------------------------

    def to_table(self) -> Any:
        """Return the rows as a ``pyarrow.Table`` with the metadata attached."""
        import pyarrow as pa

        schema = manifest_schema()
        arrays = [
            pa.array(self.rows[f.name], type=f.type.value_type).dictionary_encode()
            if pa.types.is_dictionary(f.type)
            else pa.array(self.rows[f.name], type=f.type)
            for f in schema
        ]
        stored_meta = {
            **self.meta,
            "sha256": self.sha256,
            "built_with": f"fewtrans-board {__version__}",
        }
        table = pa.Table.from_arrays(arrays, schema=schema)
        return table.replace_schema_metadata({METADATA_KEY: canonical_json(stored_meta).encode()})

    def write(self, path: Path) -> str:
        """Write the manifest atomically, plus ``<path>.sha256``; return the file hash.

        The same manifest written twice gives byte-identical files.
        """
        import pyarrow.parquet as pq

        table = self.to_table()
        write_with(
            path,
            lambda tmp: pq.write_table(
                table, tmp, compression="zstd", use_dictionary=True, write_statistics=True
            ),
        )
        digest = file_sha256(path)
        write_bytes_atomic(sidecar_path(path), f"{digest}  {path.name}\n".encode())
        return digest

    @classmethod
    def load(cls, path: Path | str, *, check_sidecar: bool = True) -> Manifest:
        """Read a manifest and refuse it if its content does not match its hash.

        The bytes are checked against ``<path>.sha256`` before anything is decoded; any
        decoding failure after that is reported as the same "corrupt manifest" error.

        Args:
            path: the Parquet file.
            check_sidecar: also compare the file bytes with ``<path>.sha256`` if present.

        Raises:
            ManifestError: a missing, unreadable or altered file, or a hash mismatch.
        """
        path = Path(path)
        if not path.is_file():
            raise ManifestError(f"manifest {path} does not exist")
        try:
            data = path.read_bytes()  # once: the bytes checked are the bytes decoded
        except OSError as exc:
            raise corrupt_manifest(path, f"it is unreadable: {describe(exc)}") from exc
        digest = hashlib.sha256(data).hexdigest()
        side = sidecar_path(path)
        if check_sidecar and side.is_file():
            _check_sidecar(path, side, digest)
        decoded = DECODED_MANIFESTS.get(digest)
        if decoded is None:
            try:
                decoded = cls._decode(data, path)
            except ManifestError:
                raise
            except Exception as exc:  # whatever the decoders raise, the file is damaged
                raise corrupt_manifest(path, describe(exc)) from exc
            DECODED_MANIFESTS.put(digest, decoded)
        manifest, built_with = decoded
        copy = cls(
            rows=manifest.rows, meta=json.loads(json.dumps(manifest.meta)), sha256=manifest.sha256
        )
        copy._episodes = list(manifest.episodes())
        copy.meta["built_with"] = built_with
        return copy

    @classmethod
    def _decode(cls, data: bytes, path: Path) -> tuple[Manifest, Any]:
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            table = pq.read_table(pa.BufferReader(data), page_checksum_verification=True)
            table.validate(full=True)
        except Exception as exc:
            raise corrupt_manifest(path, f"not a readable Parquet file: {describe(exc)}") from exc
        raw = (table.schema.metadata or {}).get(METADATA_KEY)
        if raw is None:
            raise corrupt_manifest(path, "no fewtrans-board manifest metadata")
        stored = json.loads(raw.decode("utf-8"))
        if not isinstance(stored, dict):
            raise corrupt_manifest(path, "its metadata is not a JSON object")
        if stored.get("schema_version") != SCHEMA_VERSION:
            raise ManifestError(
                f"manifest {path} has schema version {stored.get('schema_version')}; "
                f"this fewtrans-board reads version {SCHEMA_VERSION}"
            )
        missing = [c for c in COLUMNS if c not in table.column_names]
        if missing:
            raise corrupt_manifest(path, f"it lacks columns {missing}")
        expected = manifest_schema()
        wrong = [f.name for f in expected if not table.schema.field(f.name).type.equals(f.type)]
        if wrong:
            raise corrupt_manifest(path, f"columns {wrong} have unexpected types")
        rows = {name: _python_values(table.column(name)) for name in COLUMNS}
        unknown = sorted(set(rows["role"]) - set(ROLES))
        if unknown:
            raise corrupt_manifest(path, f"roles {unknown[:5]} are not {', '.join(ROLES)}")
        meta = {k: v for k, v in stored.items() if k not in UNHASHED_KEYS}
        manifest = cls(rows=rows, meta=meta, sha256=str(stored.get("sha256", "")))
        actual = manifest.compute_sha256()
        if actual != manifest.sha256:
            raise corrupt_manifest(
                path,
                f"its content does not match its sha256 (stored {manifest.sha256[:16]}..., "
                f"computed {actual[:16]}...): it was modified after it was built",
            )
        return manifest, stored.get("built_with")

    # --- views --------------------------------------------------------------------------

    @property
    def dataset(self) -> str:
        """Name of the dataset the episodes come from."""
        return str(self.meta["dataset"]["name"])

    @property
    def protocol(self) -> str:
        """Name of the sampling protocol."""
        return str(self.meta["protocol"]["name"])

    @property
    def preprocessing(self) -> str:
        """Name of the image preprocessing the protocol prescribes (``fewtrans`` by default)."""
        return str(self.meta["protocol"].get("preprocessing", "fewtrans"))

    def episodes(self) -> list[ManifestEpisode]:
        """Group rows into episodes (cached)."""
        if self._episodes is None:
            self._episodes = list(self._group())
        return self._episodes

    def _group(self) -> Iterator[ManifestEpisode]:
        current: dict[str, Any] | None = None
        columns = [self.rows[name] for name in COLUMNS]
        for _, episode, stream, role, item, label, cls_index, cls_id in zip(*columns, strict=True):
            if current is None or current["index"] != episode:
                if current is not None:
                    yield _finish(current)
                current = {
                    "index": episode,
                    "stream": stream,
                    "classes": {},
                    "novel_classes": {},
                    **{role: [] for role in ROLES},
                }
            current["novel_classes" if role == "novel" else "classes"][label] = (cls_index, cls_id)
            current[role].append((item, label))
        if current is not None:
            yield _finish(current)

    def summary(self) -> dict[str, Any]:
        """Episode count and way / shot / query histograms."""
        episodes = self.episodes()
        ways = collections.Counter(ep.ways for ep in episodes)
        shots = collections.Counter(s for ep in episodes for s in ep.shots())
        queries = collections.Counter(q for ep in episodes for q in ep.queries())
        support_sizes = [len(ep.support) for ep in episodes]
        return {
            "sha256": self.sha256,
            "dataset": self.dataset,
            "protocol": self.meta["protocol"],
            "seed": self.meta.get("seed"),
            "draw": self.meta.get("draw"),
            "episodes": len(episodes),
            "rows": len(self.rows["item"]),
            "way_histogram": dict(sorted(ways.items())),
            "shot_histogram": dict(sorted(shots.items())),
            "query_histogram": dict(sorted(queries.items())),
            "support_size": {
                "min": min(support_sizes, default=0),
                "max": max(support_sizes, default=0),
                "mean": sum(support_sizes) / max(len(support_sizes), 1),
            },
        }


def _finish(current: dict[str, Any]) -> ManifestEpisode:
    labels = sorted(current["classes"])
    novel = sorted(current["novel_classes"])
    if labels != list(range(len(labels))) or novel != list(range(len(novel))):
        raise ManifestError(
            f"episode {current['index']}: labels {labels} / novel labels {novel} are not 0..W-1"
        )
    return ManifestEpisode(
        index=current["index"],
        stream_index=current["stream"],
        classes=tuple(current["classes"][c][0] for c in labels),
        class_ids=tuple(current["classes"][c][1] for c in labels),
        support=tuple(current["support"]),
        query=tuple(current["query"]),
        novel_classes=tuple(current["novel_classes"][c][0] for c in novel),
        novel_class_ids=tuple(current["novel_classes"][c][1] for c in novel),
        novel_query=tuple(current["novel"]),
    )


def manifest_schema() -> Any:
    """The pyarrow schema of manifest files."""
    import pyarrow as pa

    return pa.schema(
        [
            pa.field("dataset", pa.dictionary(pa.int32(), pa.string())),
            pa.field("episode", pa.int32()),
            pa.field("stream_index", pa.int32()),
            pa.field("role", pa.dictionary(pa.int8(), pa.string())),
            pa.field("item", pa.string()),
            pa.field("label", pa.int16()),
            pa.field("class_index", pa.int32()),
            pa.field("class_id", pa.dictionary(pa.int32(), pa.string())),
        ]
    )


def corrupt_manifest(path: Path, reason: str) -> ManifestError:
    """The one error for a manifest whose bytes cannot be trusted."""
    return ManifestError(
        f"manifest {path} is corrupt ({reason}). Restore the frozen copy (e.g. git checkout) "
        "or rebuild it with 'fewtrans-board manifest build'."
    )


DECODED_MANIFESTS: DigestCache[tuple[Manifest, Any]] = DigestCache(max_entries=16)
"""Decoded manifests by the sha256 of their file's bytes (decoding is a function of the
bytes), so a build or a validation that reads one frozen manifest many times decodes it
once. Callers get their own :class:`Manifest` (own metadata; rows and episodes shared)."""


def _check_sidecar(path: Path, side: Path, digest: str) -> None:
    try:
        expected = side.read_bytes().decode("ascii").split()[0]
    except (OSError, UnicodeDecodeError, IndexError) as exc:
        raise corrupt_manifest(path, f"its checksum file {side.name} is unreadable") from exc
    if digest != expected:
        raise corrupt_manifest(path, f"its bytes do not match {side.name}: the file was modified")


def sidecar_path(path: Path) -> Path:
    """Return the ``<file>.sha256`` path next to a manifest."""
    return path.with_name(path.name + ".sha256")
