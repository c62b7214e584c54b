"""Advisory file locks that name their holder.

A lock is an ``flock`` (``msvcrt.locking`` on Windows) on a small file; the holder writes
its PID, host and start time into it so a refused process can say who is in the way.
The operating system releases the lock when the holder exits, ``kill -9`` included, so a
lock file left behind by a dead process never blocks anyone.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path
from types import TracebackType

# Windows locks byte ranges; lock one far beyond the holder text so others can still read it.
_WINDOWS_LOCK_OFFSET = 1 << 20


class FileLock:
    """An exclusive advisory lock on ``path`` (created if missing).

    Args:
        path: the lock file.
        purpose: what the holder is doing, written into the lock file for others to read.
    """

    def __init__(self, path: Path, purpose: str = "") -> None:
        self.path = path
        self.purpose = purpose
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        """Whether this object holds the lock."""
        return self._fd is not None

    def acquire(self, blocking: bool = False) -> bool:
        """Take the lock.

        Args:
            blocking: wait until the lock is free instead of giving up at once.

        Returns:
            Whether the lock was taken (always ``True`` when ``blocking``).

        Raises:
            OSError: the lock file cannot be created (e.g. a read-only folder).
        """
        if self._fd is not None:
            return True
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            if not _lock(fd, blocking):
                os.close(fd)
                return False
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        holder = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "since": time.strftime("%Y-%m-%d %H:%M:%S"),
            "purpose": self.purpose,
        }
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, (json.dumps(holder) + "\n").encode())
        return True

    def release(self) -> None:
        """Release the lock (no-op when not held)."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            os.ftruncate(fd, 0)
            _unlock(fd)
        finally:
            os.close(fd)

    def holder(self) -> str:
        """Who holds the lock, as written by the holder (best effort)."""
        try:
            info = json.loads(self.path.read_text(encoding="utf-8"))
            text = f"PID {int(info['pid'])} on {info['host']} since {info['since']}"
        except (OSError, ValueError, KeyError, TypeError):
            return "another process (its PID is not readable yet)"
        return f"{text} ({info['purpose']})" if info.get("purpose") else text

    def __enter__(self) -> FileLock:
        self.acquire(blocking=True)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.release()


if sys.platform == "win32":  # pragma: no cover - exercised on Windows only
    import msvcrt

    def _lock(fd: int, blocking: bool) -> bool:
        os.lseek(fd, _WINDOWS_LOCK_OFFSET, os.SEEK_SET)
        while True:
            try:
                msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
                return True
            except OSError:
                if not blocking:
                    return False
                time.sleep(0.2)

    def _unlock(fd: int) -> None:
        os.lseek(fd, _WINDOWS_LOCK_OFFSET, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)

else:
    import fcntl

    def _lock(fd: int, blocking: bool) -> bool:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if blocking else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    def _unlock(fd: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_UN)
