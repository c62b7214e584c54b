"""Decode once: a memory-mapped file of resized ``uint8`` images per manifest, transform, copy.

Every item of a manifest has a fixed row in one file, named by the hash of what defines
its content (manifest sha256, preprocessing, item list, the local copy the images are read
from), so any run, shard or worker process over the same manifest, transform and copy
reads the same file and decodes each image at most once; the operating system's page
cache shares the pages between processes.

Layout: a 4 KiB JSON header, one ``uint32`` CRC-32 per row, then the rows
``[N, 3, S, S]``. A row is valid when its stored CRC is non-zero and matches its bytes. A
writer stores the pixels before the CRC, so a reader never accepts a half-written row: a
row killed mid-write, or written concurrently by two workers (both write the same bytes),
is at worst decoded again. The file is created complete (sparse) under a temporary name
and linked into place, so two workers creating it at once end up sharing one file.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import uuid
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from fewtrans_board.core.errors import FewtransError

FORMAT = "fewtrans-decoded-images/1"
HEADER_BYTES = 4096
SUFFIX = ".u8img"

Decoder = Callable[[str], np.ndarray]
"""Decodes and resizes one item into ``uint8 [3, S, S]``."""


class DecodedCacheError(FewtransError):
    """The decoded-image file is not what its name promises (delete it to rebuild)."""


def decoded_key(
    manifest_sha256: str, preprocessing_digest: str, items: Sequence[str], source: str = ""
) -> str:
    """Content address of the cache of ``items`` under a manifest, a transform and a source.

    ``source`` names the local copy the images are decoded from: two copies of a dataset
    may hold different pixels under the same item names (a re-encoded or corrupted copy),
    and a shared ``--image-cache`` must never serve one copy's pixels to a run on another.
    """
    listing = hashlib.sha256("\n".join(items).encode()).hexdigest()
    text = f"{FORMAT}|{manifest_sha256}|{preprocessing_digest}|{listing}|{source}"
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def _data_offset(count: int) -> int:
    checksums = 4 * count
    return HEADER_BYTES + (checksums + HEADER_BYTES - 1) // HEADER_BYTES * HEADER_BYTES


class DecodedImages:
    """The decoded rows of a fixed, sorted item list, backed by one memory-mapped file.

    Args:
        folder: where the file lives (created if missing).
        manifest_sha256: the manifest the items come from.
        preprocessing_digest: digest of the transform (``Preprocessing.digest()``).
        items: every item the file holds (sorted and de-duplicated here).
        image_size: side ``S`` of the square images.
        source: the local copy the images are read from (see :func:`decoded_key`).

    Raises:
        DecodedCacheError: an existing file with this name has another header.
    """

    def __init__(
        self,
        folder: Path,
        manifest_sha256: str,
        preprocessing_digest: str,
        items: Sequence[str],
        image_size: int,
        source: str = "",
    ) -> None:
        self.items = sorted(set(items))
        self.row_of = {item: i for i, item in enumerate(self.items)}
        self.shape = (3, image_size, image_size)
        self.key = decoded_key(manifest_sha256, preprocessing_digest, self.items, source)
        self.path = Path(folder) / f"{self.key}{SUFFIX}"
        self.header = {
            "format": FORMAT,
            "key": self.key,
            "count": len(self.items),
            "shape": list(self.shape),
            "manifest_sha256": manifest_sha256,
            "preprocessing": preprocessing_digest,
        }
        self.decoded_here = 0  # rows this process decoded (for reports and tests)
        self._create()
        self._map()

    def __contains__(self, item: object) -> bool:
        return item in self.row_of

    @property
    def row_bytes(self) -> int:
        """Bytes of one image row."""
        return int(np.prod(self.shape))

    def _size(self) -> int:
        return _data_offset(len(self.items)) + len(self.items) * self.row_bytes

    def _create(self) -> None:
        if self.path.exists():
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
        try:
            with tmp.open("wb") as handle:
                handle.write(json.dumps(self.header).encode().ljust(HEADER_BYTES, b" "))
                handle.truncate(self._size())  # sparse: unwritten rows take no disk
            with contextlib.suppress(FileExistsError):  # another worker was first: share it
                os.link(tmp, self.path)  # atomic, never replaces
        finally:
            tmp.unlink(missing_ok=True)

    def _map(self) -> None:
        try:
            with self.path.open("rb") as handle:
                header = json.loads(handle.read(HEADER_BYTES).decode().strip())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise DecodedCacheError(f"{self.path}: unreadable header ({exc}); delete it") from exc
        if header != self.header or self.path.stat().st_size != self._size():
            raise DecodedCacheError(
                f"{self.path} does not hold the decoded images its name promises "
                "(truncated or written by another version); delete it to rebuild"
            )
        count = len(self.items)
        self._checksums = np.memmap(
            self.path, dtype=np.uint32, mode="r+", offset=HEADER_BYTES, shape=(count,)
        )
        self._rows = np.memmap(
            self.path,
            dtype=np.uint8,
            mode="r+",
            offset=_data_offset(count),
            shape=(count, *self.shape),
        )

    def _valid(self, row: int) -> bool:
        stored = int(self._checksums[row])
        return stored != 0 and stored == _crc(self._rows[row])

    def get(self, item: str, decode: Decoder) -> np.ndarray:
        """The ``uint8 [3, S, S]`` row of ``item``, decoding and storing it if missing.

        Args:
            item: an item of the file.
            decode: decodes and resizes the item when its row is not valid yet.

        Raises:
            KeyError: ``item`` is not one of the file's items.
            DecodedCacheError: the decoder returned another shape or type.
        """
        row = self.row_of[item]
        if not self._valid(row):
            image = np.ascontiguousarray(decode(item))
            if image.shape != self.shape or image.dtype != np.uint8:
                raise DecodedCacheError(
                    f"decoding {item!r} gave {image.dtype} {image.shape}, expected uint8 "
                    f"{self.shape}"
                )
            self._rows[row] = image
            self._checksums[row] = _crc(image) or 1  # 0 means "absent"; 1 fails verification
            self.decoded_here += 1
        return np.array(self._rows[row])

    def filled(self) -> int:
        """Number of valid rows (checks every row's CRC)."""
        return sum(self._valid(i) for i in range(len(self.items)))

    def flush(self) -> None:
        """Write dirty pages to disk (other processes see rows without it)."""
        self._rows.flush()
        self._checksums.flush()


def _crc(row: np.ndarray) -> int:
    return zlib.crc32(np.ascontiguousarray(row).tobytes())
