"""A bounded, least-recently-used cache of what was decoded from a file, by its bytes' digest.

Decoding and checking a file (a manifest, a results shard) is a function of its bytes, so
a process that reads the same bytes again can reuse the result. Keys are sha256 digests
of the bytes actually read, never paths: a file changed on disk has another key.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Generic, TypeVar

Value = TypeVar("Value")


class DigestCache(Generic[Value]):
    """Values by content digest, the least recently used dropped beyond either limit.

    Thread-safe: evaluation threads and the site builder may read files concurrently.

    Args:
        max_bytes: the most bytes (as the caller counts them) held at once; a value larger
            than this on its own is not kept.
        max_entries: the most values held at once.
    """

    def __init__(self, *, max_bytes: int | None = None, max_entries: int | None = None) -> None:
        self.max_bytes = max_bytes
        self.max_entries = max_entries
        self._values: OrderedDict[str, tuple[Value, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, digest: str) -> Value | None:
        """The value kept for ``digest`` (now the most recently used), or ``None``."""
        with self._lock:
            kept = self._values.get(digest)
            if kept is None:
                return None
            self._values.move_to_end(digest)
            return kept[0]

    def put(self, digest: str, value: Value, size: int = 0) -> None:
        """Keep ``value`` for ``digest``, dropping the least recently used beyond the limits.

        Args:
            digest: the sha256 of the bytes ``value`` was decoded from.
            value: what to keep (shared with every later caller: immutable, or copied by
                them).
            size: its size in bytes, counted against ``max_bytes``.
        """
        if self.max_bytes is not None and size > self.max_bytes:
            return
        with self._lock:
            previous = self._values.pop(digest, None)
            if previous is not None:
                self._bytes -= previous[1]
            self._values[digest] = (value, size)
            self._bytes += size
            while self._values and (
                (self.max_bytes is not None and self._bytes > self.max_bytes)
                or (self.max_entries is not None and len(self._values) > self.max_entries)
            ):
                _, (_, dropped) = self._values.popitem(last=False)
                self._bytes -= dropped

    def clear(self) -> None:
        """Forget every value."""
        with self._lock:
            self._values.clear()
            self._bytes = 0

    def __len__(self) -> int:
        return len(self._values)

    @property
    def bytes(self) -> int:
        """The bytes held now (as counted by :meth:`put`)."""
        return self._bytes
