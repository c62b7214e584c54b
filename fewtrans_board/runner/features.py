"""Feature cache for frozen-backbone adapters: each image is embedded once per dataset.

An entry is content-addressed: its file name hashes everything that determines the
features (:func:`cache_fields`), and the file repeats those fields next to sha256 checksums
of the item order and of the feature matrix. An entry that is unreadable, truncated,
reordered, or made for other inputs is ignored and recomputed (with a warning).

Entries are single ``.npz`` files written atomically, so parallel shard workers and
resumed runs reuse them; a writer holds ``<folder>/.lock`` while it replaces an entry
and clears temporary files that killed writers left behind.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from fewtrans_board.api.backbone import Backbone, Preprocessing
from fewtrans_board.core.atomic import TEMP_SUFFIX, write_bytes_atomic
from fewtrans_board.core.canonical import canonical_json
from fewtrans_board.core.errors import describe
from fewtrans_board.datasets.images import ImageStore
from fewtrans_board.runner.locks import FileLock

if TYPE_CHECKING:
    import torch

FORMAT = 2
LOG = logging.getLogger(__name__)
CHUNK = 256
"""Items embedded together: the fixed chunks of a run's sorted item universe."""


class Embedder(Protocol):
    """What computes frozen features: a loaded backbone, or a plugin worker's.

    Attributes:
        weights_id: the weights' identity.
        feature_dim: the feature dimension.
        device: the compute device (part of the cache key).
        threads: torch threads the features are computed with (part of the cache key).
    """

    weights_id: str
    feature_dim: int
    device: str
    threads: int

    def embed_batches(
        self, batches: Sequence[torch.Tensor], batch_size: int, progress: Callable[[int], None]
    ) -> list[np.ndarray]:
        """Float32 features ``[len(b), D]`` of each batch of pixels, in order."""
        ...


class BackboneEmbedder:
    """An :class:`Embedder` over a backbone loaded in this process."""

    def __init__(self, backbone: Backbone) -> None:
        import torch

        self.backbone = backbone
        self.weights_id = backbone.weights_id
        self.feature_dim = backbone.feature_dim
        self.device = str(backbone.device)
        self.threads = torch.get_num_threads()

    def embed_batches(
        self, batches: Sequence[torch.Tensor], batch_size: int, progress: Callable[[int], None]
    ) -> list[np.ndarray]:
        """Embed each batch with the backbone."""
        out = []
        for pixels in batches:
            out.append(self.backbone.embed(pixels, batch_size).cpu().numpy())
            progress(len(pixels))
        return out


def embedding_batches(
    wanted: Sequence[str], universe: Sequence[str], chunk_of: dict[str, int], size: int = CHUNK
) -> list[list[str]]:
    """The batches that embed ``wanted``, whatever run or shard asks first.

    Items outside the universe come in batches of ``size``, then every chunk of the
    universe (``size`` consecutive sorted items) they touch, whole.

    Args:
        wanted: the items to embed (unique).
        universe: the run's sorted item universe.
        chunk_of: each universe item's chunk number (its position // ``size``).
        size: the chunk size.
    """
    outside = [i for i in wanted if i not in chunk_of]
    batches = [outside[s : s + size] for s in range(0, len(outside), size)]
    for chunk in sorted({chunk_of[i] for i in wanted if i in chunk_of}):
        batches.append(list(universe[chunk * size : (chunk + 1) * size]))
    return batches


def chunk_index(universe: Sequence[str], size: int = CHUNK) -> dict[str, int]:
    """Each item of a sorted universe mapped to its chunk number."""
    return {item: i // size for i, item in enumerate(universe)}


def cache_fields(
    embedder: Embedder, preprocessing: Preprocessing, dataset: str = "", batch_size: int = CHUNK
) -> dict[str, Any]:
    """Everything that determines the cached features of an item."""
    return {
        "format": FORMAT,
        "weights_id": embedder.weights_id,
        "preprocessing": preprocessing.to_dict(),
        "dataset": dataset,
        "device": embedder.device,
        "batch_size": batch_size,
        "torch_threads": embedder.threads,
    }


def entry_key(fields: dict[str, Any]) -> str:
    """File name stem of the entry computed from ``fields`` (:func:`cache_fields`)."""
    return hashlib.sha256(canonical_json(fields).encode()).hexdigest()[:20]


def items_sha256(items: Sequence[str]) -> str:
    """Checksum of an ordered item list."""
    return hashlib.sha256(canonical_json(list(items)).encode()).hexdigest()


def matrix_sha256(matrix: np.ndarray) -> str:
    """Checksum of a float32 feature matrix (shape and little-endian bytes)."""
    digest = hashlib.sha256(repr(matrix.shape).encode())
    digest.update(np.ascontiguousarray(matrix, dtype="<f4").tobytes())
    return digest.hexdigest()


def encode_entry(fields: dict[str, Any], items: Sequence[str], matrix: np.ndarray) -> bytes:
    """The bytes of a cache entry (an uncompressed ``.npz``)."""
    header = {
        **fields,
        "items": len(items),
        "dim": int(matrix.shape[1]),
        "items_sha256": items_sha256(items),
        "features_sha256": matrix_sha256(matrix),
    }
    buffer = io.BytesIO()
    np.savez(
        buffer,
        header=np.array(canonical_json(header)),
        items=np.array(list(items), dtype=str),
        features=np.ascontiguousarray(matrix, dtype="<f4"),
    )
    return buffer.getvalue()


def decode_entry(
    data: bytes, fields: dict[str, Any], dim: int
) -> tuple[list[str], np.ndarray] | str:
    """Check and decode a cache entry.

    Args:
        data: the file's bytes.
        fields: what the entry must have been computed from (:func:`cache_fields`).
        dim: the feature dimension.

    Returns:
        ``(items, features)`` if every check passes, else the reason it was refused.
    """
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as archive:
            header = json.loads(str(archive["header"][()]))
            items = [str(i) for i in archive["items"].tolist()]
            matrix = np.asarray(archive["features"], dtype=np.float32)
    except Exception as exc:  # any decoder failure: the entry is damaged
        return f"unreadable ({describe(exc)})"
    if not isinstance(header, dict):
        return "its header is not a JSON object"
    differing = sorted(k for k in fields if header.get(k) != fields[k])
    if differing:
        return f"computed with other inputs ({', '.join(differing)})"
    if matrix.ndim != 2 or matrix.shape != (len(items), dim) or header.get("items") != len(items):
        return f"features of shape {matrix.shape} for {len(items)} items of dimension {dim}"
    if len(set(items)) != len(items):
        return "repeated items"
    if header.get("items_sha256") != items_sha256(items):
        return "the item list does not match its checksum"
    if header.get("features_sha256") != matrix_sha256(matrix):
        return "the features do not match their checksum"
    return items, matrix


class FeatureCache:
    """Frozen features of dataset items under one backbone and preprocessing.

    Args:
        backbone: the frozen backbone, or an :class:`Embedder` (a plugin worker's).
        images: the image store of the dataset.
        folder: where to persist features (``None`` keeps them in memory only).
        batch_size: embedding batch size.
        universe: every item the run may need. Items are embedded in fixed chunks of this
            sorted list, so an item's features never depend on which shard asked first
            (batch composition can change the last bits of CPU kernels).
    """

    def __init__(
        self,
        backbone: Backbone | Embedder,
        images: ImageStore,
        folder: Path | None = None,
        batch_size: int = CHUNK,
        universe: Sequence[str] = (),
    ) -> None:
        # A worker's features come back to this process (CPU); a backbone's stay on its device.
        if isinstance(backbone, Backbone):
            self.embedder: Embedder = BackboneEmbedder(backbone)
            self.device = str(backbone.device)
        else:
            self.embedder, self.device = backbone, "cpu"
        self.images = images
        self.batch_size = batch_size
        self._universe = sorted(set(universe))
        self._chunk_of = chunk_index(self._universe, batch_size)
        # The chunks an item is embedded in change its last bits on CPU: an entry shared
        # across runs (--feature-cache-dir) serves only runs with the same item universe.
        self.fields = {
            **cache_fields(self.embedder, images.preprocessing, images.spec.name, batch_size),
            "universe_sha256": items_sha256(self._universe),
        }
        self.key = entry_key(self.fields)
        self.path = folder / f"{self.key}.npz" if folder is not None else None
        self._rows: dict[str, int] = {}
        self._matrix = np.zeros((0, self.embedder.feature_dim), dtype=np.float32)
        if self.path is not None:
            self._locked_write(None)
            if self.path.is_file():
                self._load()

    def _load(self) -> None:
        assert self.path is not None
        try:
            data = self.path.read_bytes()
        except OSError as exc:
            LOG.warning(
                "feature cache %s is unreadable (%s); recomputing it", self.path, describe(exc)
            )
            return
        entry = decode_entry(data, self.fields, self.embedder.feature_dim)
        if isinstance(entry, str):
            LOG.warning("feature cache %s is not trusted: %s; recomputing it", self.path, entry)
            return
        items, self._matrix = entry
        self._rows = {item: i for i, item in enumerate(items)}

    def ensure(self, items: Sequence[str], progress: bool = False) -> None:
        """Embed every item not cached yet, in batches, and persist the cache.

        ``progress``: a bar on a terminal, else a line every 30 s (``core.progress``).
        """
        from fewtrans_board.core.progress import progress_meter

        wanted = [i for i in dict.fromkeys(items) if i not in self._rows]
        if not wanted:
            return
        batches = embedding_batches(wanted, self._universe, self._chunk_of, self.batch_size)
        missing = [i for batch in batches for i in batch]
        bar = progress_meter(len(missing), "embedding", "img", enabled=progress)
        chunks = self.embedder.embed_batches(
            [self.images.pixels(batch) for batch in batches], self.batch_size, bar.update
        )
        bar.close()
        offset = len(self._rows)
        self._matrix = np.concatenate([self._matrix, *chunks]).astype(np.float32)
        self._rows.update({item: offset + i for i, item in enumerate(missing)})
        self._save()

    def _save(self) -> None:
        if self.path is None:
            return
        order = sorted(self._rows, key=self._rows.__getitem__)
        # Rows re-embedded with their whole chunk leave stale copies in memory; save each once.
        data = encode_entry(self.fields, order, self._matrix[[self._rows[i] for i in order]])
        self._locked_write(data)

    def _locked_write(self, data: bytes | None) -> None:
        """Under the folder's writer lock, clear dead writers' temp files and write ``data``."""
        assert self.path is not None
        try:
            with FileLock(self.path.parent / ".lock", "writing the feature cache"):
                # Every writer holds the lock, so temporary files seen now are from dead ones.
                for stale in self.path.parent.glob(f".*{TEMP_SUFFIX}"):
                    stale.unlink(missing_ok=True)
                if data is not None:
                    write_bytes_atomic(self.path, data)
        except OSError as exc:  # the run goes on with the features in memory
            LOG.warning(
                "cannot write feature cache %s (%s); features stay in memory",
                self.path,
                describe(exc),
            )

    def features(self, items: Sequence[str]) -> torch.Tensor:
        """Features ``[N, D]`` of ``items`` on the backbone's device (CPU when a worker embeds)."""
        import torch

        self.ensure(items)
        rows = [self._rows[i] for i in items]
        return torch.from_numpy(self._matrix[rows]).to(self.device)
