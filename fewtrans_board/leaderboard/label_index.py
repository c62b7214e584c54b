"""A compact index of each frozen manifest's episodes, read once per build and cached.

A build needs of a frozen manifest its identity (sha256, dataset, metadata) and, per
episode, its ways, shots and query labels: not its item paths. :class:`LabelIndex` holds
exactly that as arrays; :func:`frozen_labels` builds it for every frozen manifest of a store,
reusing the build cache keyed by the manifest file's bytes (only a manifest never indexed
before is decoded whole).
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fewtrans_board.episodes.manifest import Manifest, sidecar_path
from fewtrans_board.leaderboard.summary_cache import SummaryCache, file_digest

LABEL_INDEX_VERSION = 1
"""Version of the cached label index (bump when its fields change)."""
_ARRAYS = ("index", "stream_index", "ways", "support", "queries", "labels")


@dataclass
class LabelIndex:
    """Per-episode ways, shots and labels of one frozen manifest.

    Attributes:
        sha256: the manifest's content sha256.
        meta: its metadata (as :meth:`Manifest.load` gives it).
        index: each episode's position in the manifest.
        stream_index: each episode's position in the sampler's stream.
        ways: classes per episode.
        support: support items per class, all episodes concatenated (``ways`` per episode).
        queries: query items per episode.
        labels: every query's label, all episodes concatenated (``queries`` per episode).
    """

    sha256: str
    meta: dict[str, Any]
    index: np.ndarray
    stream_index: np.ndarray
    ways: np.ndarray
    support: np.ndarray
    queries: np.ndarray
    labels: np.ndarray

    @property
    def dataset(self) -> str:
        """Name of the dataset the episodes come from."""
        return str(self.meta["dataset"]["name"])

    @classmethod
    def of(cls, manifest: Manifest) -> LabelIndex:
        """The index of a loaded manifest."""
        episodes = manifest.episodes()
        return cls(
            sha256=manifest.sha256,
            meta=json.loads(json.dumps(manifest.meta)),
            index=np.array([e.index for e in episodes], dtype=np.int64),
            stream_index=np.array([e.stream_index for e in episodes], dtype=np.int64),
            ways=np.array([e.ways for e in episodes], dtype=np.int64),
            support=np.array([n for e in episodes for n in e.shots()], dtype=np.int64),
            queries=np.array([len(e.query) for e in episodes], dtype=np.int64),
            labels=np.array([label for e in episodes for _, label in e.query], dtype=np.int64),
        )

    def shots(self) -> list[np.ndarray]:
        """Support items per class of each episode."""
        return np.split(self.support, np.cumsum(self.ways)[:-1])

    def query_labels(self) -> list[np.ndarray]:
        """Query labels of each episode."""
        return np.split(self.labels, np.cumsum(self.queries)[:-1])

    def to_bytes(self) -> bytes:
        """The index as an ``.npz`` payload."""
        buffer = io.BytesIO()
        head = json.dumps({"sha256": self.sha256, "meta": self.meta}).encode("utf-8")
        save: Any = np.savez  # its stubs type keyword arrays as its own options
        arrays = {name: getattr(self, name) for name in _ARRAYS}
        save(buffer, head=np.frombuffer(head, dtype=np.uint8), **arrays)
        return buffer.getvalue()

    @classmethod
    def from_bytes(cls, payload: bytes) -> LabelIndex:
        """Read :meth:`to_bytes` back.

        Raises:
            ValueError: not such a payload.
        """
        with np.load(io.BytesIO(payload), allow_pickle=False) as archive:
            arrays = {name: archive[name] for name in archive.files}
        head = json.loads(arrays.pop("head").tobytes().decode("utf-8"))
        return cls(sha256=str(head["sha256"]), meta=dict(head["meta"]), **arrays)


def label_index(path: Path, cache: SummaryCache | None = None) -> LabelIndex:
    """The label index of one frozen manifest file, from the cache when its bytes are known.

    The file's bytes are hashed (and checked against its ``.sha256`` sidecar, as
    :meth:`Manifest.load` does); a cached index of those bytes is used, otherwise the
    manifest is loaded and verified whole, indexed, and cached.

    Raises:
        ManifestError: a missing, damaged or altered manifest.
    """
    cache = (cache or SummaryCache(None)).sibling("labels")
    key = None
    if cache.enabled and path.is_file():
        digest = file_digest(path)
        side = sidecar_path(path)
        try:
            sidecar_ok = not side.is_file() or side.read_bytes().split()[:1] == [digest.encode()]
        except OSError:
            sidecar_ok = False  # Manifest.load names the problem
        key = f"labels-{LABEL_INDEX_VERSION}-{digest}" if sidecar_ok else None
    payload = cache.get(key) if key is not None else None
    if payload is not None:
        try:
            return LabelIndex.from_bytes(payload)
        except (ValueError, KeyError, TypeError, OSError):
            pass  # recomputed below
    index = LabelIndex.of(Manifest.load(path))
    if key is not None:
        cache.put(key, index.to_bytes())
    return index


def frozen_labels(
    manifests_dir: Path, cache: SummaryCache | None = None
) -> dict[str, tuple[str, LabelIndex]]:
    """Label indexes of a store's frozen manifests: ``{sha256: (file name, index)}``.

    Raises:
        ManifestError: a damaged or altered frozen manifest.
    """
    out: dict[str, tuple[str, LabelIndex]] = {}
    for path in sorted(manifests_dir.glob("*.parquet")):
        index = label_index(path, cache)
        out[index.sha256] = (path.name, index)
    return out
