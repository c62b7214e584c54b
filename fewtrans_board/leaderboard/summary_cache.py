"""A build cache of per-entry summaries, keyed by the content they were derived from.

An entry's summary depends only on its files, the frozen manifests its runs name, the
benchmark's ``ddof`` and this code's summary format, so it is cached under a key that hashes
all of them (:func:`entry_key`; README.md says where the cache lives and how to move or
disable it). A build never writes into a store (a git checkout that a pull request must
change only by its entry), keys do not depend on where a store is, and each file records the
sha256 of its payload, checked on every read: a read never raises, anything wrong is a miss.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

SUMMARY_VERSION = 3
"""Version of what is cached: bump it whenever :func:`~fewtrans_board.results.summary.summarize`,
:class:`~fewtrans_board.results.digest.RunDigest` or the checks a stored run passes change
(every cached entry is then recomputed)."""

CACHE_ENV = "FEWTRANS_BUILD_CACHE"
"""Environment variable naming the cache folder (``off`` disables the cache)."""

MAGIC = b"fewtrans-build-cache 1\n"


def default_root() -> Path | None:
    """The build cache folder: ``$FEWTRANS_BUILD_CACHE``, else the user's cache folder.

    Returns:
        ``$FEWTRANS_BUILD_CACHE``, else ``$XDG_CACHE_HOME/fewtrans-board/build``, else
        ``~/.cache/fewtrans-board/build``; ``None`` when ``$FEWTRANS_BUILD_CACHE`` is ``off``.
    """
    configured = os.environ.get(CACHE_ENV, "").strip()
    if configured.lower() == "off":
        return None
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME", "").strip()
    return (Path(base) if base else Path.home() / ".cache") / "fewtrans-board" / "build"


def file_digest(path: Path) -> str:
    """The sha256 of a file's bytes."""
    if path.stat().st_size <= 1 << 23:  # a shard: one read, fewer calls than blocks
        return hashlib.sha256(path.read_bytes()).hexdigest()
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def entry_key(
    runs: Iterable[tuple[str, Path]], manifests: Iterable[str], ddof: int, *parts: str
) -> str:
    """The content key of an entry's summaries.

    Args:
        runs: ``(name, folder)`` of each run in the order they are summarised; every file
            under each folder is hashed (``run.json``, the shards with their seals).
        manifests: the sha256 of the frozen manifest each run names (its labels and
            metadata decide the checks and the per-shot pairs).
        ddof: the benchmark's CI ``ddof``.
        parts: anything else the summaries depend on.
    """
    digest = hashlib.sha256()

    def field(text: str) -> None:
        data = text.encode("utf-8")
        digest.update(len(data).to_bytes(8, "big") + data)

    field(f"summary-version={SUMMARY_VERSION}")
    field(f"ddof={ddof}")
    for part in parts:
        field(part)
    for sha in manifests:
        field(f"manifest={sha}")
    for name, folder in runs:
        field(f"run={name}")
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            field(path.relative_to(folder).as_posix())
            field(file_digest(path))
    return digest.hexdigest()


class SummaryCache:
    """Payloads by key in a folder, each checked against the hash stored with it.

    Args:
        root: the cache folder (created on the first write); ``None``: no cache (every
            lookup misses, nothing is written).
        folder: the sub-folder of this kind of payload (entry summaries by default).
    """

    def __init__(self, root: Path | None, folder: str = "entries") -> None:
        self.root = root
        self.folder = folder

    def sibling(self, folder: str) -> SummaryCache:
        """The cache of another kind of payload in the same folder."""
        return SummaryCache(self.root, folder)

    @property
    def enabled(self) -> bool:
        """Whether this cache reads and writes anything."""
        return self.root is not None

    def path(self, key: str) -> Path:
        """The file of ``key``."""
        if self.root is None:
            raise ValueError("the build cache is disabled")
        return self.root / self.folder / key[:2] / f"{key}.bin"

    def get(self, key: str) -> bytes | None:
        """The payload stored under ``key``; ``None`` if absent, damaged or tampered with."""
        if self.root is None:
            return None
        try:
            data = self.path(key).read_bytes()
        except OSError:
            return None
        header, sep, payload = data[len(MAGIC) :].partition(b"\n")
        if not data.startswith(MAGIC) or not sep:
            return None
        try:
            record = json.loads(header)
        except ValueError:
            return None
        if (
            not isinstance(record, dict)
            or record.get("key") != key
            or record.get("sha256") != hashlib.sha256(payload).hexdigest()
        ):
            return None
        return payload

    def put(self, key: str, payload: bytes) -> None:
        """Store ``payload`` under ``key`` (atomically; a cache that cannot be written is skipped)."""
        if self.root is None:
            return
        target = self.path(key)
        header = json.dumps({"key": key, "sha256": hashlib.sha256(payload).hexdigest()})
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            handle, temp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
            with os.fdopen(handle, "wb") as out:
                out.write(MAGIC + header.encode("ascii") + b"\n" + payload)
            os.replace(temp, target)
        except OSError:
            return
