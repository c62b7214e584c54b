"""Advisory file locks that name their holder.

The lock is :mod:`filelock`'s (``flock``, or ``msvcrt.locking`` on Windows), so the
operating system releases it when the holder exits, ``kill -9`` included. The holder writes
its PID, host and start time into ``<lock>.holder`` (the lock file belongs to
:mod:`filelock`, which may truncate it), so a refused process can say who is in the way.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

import filelock


class FileLock:
    """An exclusive advisory lock on ``path`` (created if missing).

    Args:
        path: the lock file.
        purpose: what the holder is doing, written into the holder note for others to read.
    """

    def __init__(self, path: Path, purpose: str = "") -> None:
        self.path = path
        self.purpose = purpose
        self._lock = filelock.FileLock(path, thread_local=False)

    @property
    def note(self) -> Path:
        """The holder note: who holds the lock (empty or absent while nobody does)."""
        return self.path.with_name(self.path.name + ".holder")

    @property
    def held(self) -> bool:
        """Whether this object holds the lock."""
        return bool(self._lock.is_locked)

    def acquire(self, blocking: bool = False) -> bool:
        """Take the lock.

        Args:
            blocking: wait until the lock is free instead of giving up at once.

        Returns:
            Whether the lock was taken (always ``True`` when ``blocking``).

        Raises:
            OSError: the lock file cannot be created (e.g. a read-only folder).
        """
        if self.held:
            return True
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._lock.acquire(timeout=-1 if blocking else 0, poll_interval=0.2)
        except filelock.Timeout:
            return False
        try:
            self._write_note()
        except BaseException:
            self._lock.release(force=True)
            raise
        return True

    def _write_note(self) -> None:
        holder = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "since": time.strftime("%Y-%m-%d %H:%M:%S"),
            "purpose": self.purpose,
        }
        self.note.write_text(json.dumps(holder) + "\n", encoding="utf-8")

    def release(self) -> None:
        """Release the lock (no-op when not held)."""
        if not self.held:
            return
        try:
            self.note.write_bytes(b"")
        finally:
            self._lock.release(force=True)

    def holder(self) -> str:
        """Who holds the lock, as written by the holder (best effort)."""
        try:
            info = json.loads(self.note.read_text(encoding="utf-8"))
            text = f"PID {int(info['pid'])} on {info['host']} since {info['since']}"
        except (OSError, ValueError, KeyError, TypeError):
            return "another process (its PID is not readable yet)"
        return f"{text} ({info['purpose']})" if info.get("purpose") else text

    def __enter__(self) -> FileLock:
        self.acquire(blocking=True)
        return self

    def __exit__(self, *_: object) -> None:
        self.release()
