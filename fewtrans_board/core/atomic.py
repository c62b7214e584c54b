"""Atomic file writes: temp file in the same folder, fsync, rename.

Readers never see a partial file: either the old content, or the complete new one.
Temporary files are named ``.<target name>.<pid>.<random>.tmp``: each process removes only
its own, and :func:`remove_stale_temps` clears the leftovers of killed writers once the
caller holds the lock that excludes every live writer of that target.
"""

from __future__ import annotations

import errno
import glob
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

TEMP_SUFFIX = ".tmp"


def temp_prefix(target: Path) -> str:
    """Prefix of the temporary files of ``target`` written by this process."""
    return f".{target.name}.{os.getpid()}."


def temp_files(target: Path) -> list[Path]:
    """Temporary files of ``target`` left in its folder by any process."""
    return sorted(target.parent.glob(f".{glob.escape(target.name)}.*{TEMP_SUFFIX}"))


def remove_stale_temps(target: Path) -> int:
    """Remove every temporary file of ``target``; call only while holding its writer lock.

    Returns:
        How many files were removed.
    """
    removed = 0
    for path in temp_files(target):
        try:
            path.unlink()
            removed += 1
        except FileNotFoundError:
            pass
    return removed


@contextmanager
def atomic_path(target: Path) -> Iterator[Path]:
    """Yield a temporary path next to ``target``; on success it replaces ``target``.

    The temporary file is fsynced before the rename and removed if the block raises.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(
        prefix=temp_prefix(target), suffix=TEMP_SUFFIX, dir=target.parent
    )
    os.close(fd)
    tmp = Path(tmp_name)
    # mkstemp creates 0600 files; published files get the usual umask-based mode.
    os.chmod(tmp, 0o666 & ~_current_umask())
    try:
        yield tmp
        _fsync_file(tmp)
        os.replace(tmp, target)
        _fsync_dir(target.parent)
    finally:
        if tmp.exists():
            tmp.unlink()


def _fsync_file(path: Path) -> None:
    with path.open("rb+") as handle:
        os.fsync(handle.fileno())


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_bytes_atomic(target: Path, data: bytes) -> None:
    """Write ``data`` to ``target`` atomically."""
    with atomic_path(target) as tmp:
        tmp.write_bytes(data)


def write_with(target: Path, writer: Callable[[Path], None]) -> None:
    """Call ``writer(tmp_path)`` and atomically move the result to ``target``."""
    with atomic_path(target) as tmp:
        writer(tmp)


def create_exclusive(target: Path, data: bytes) -> bool:
    """Publish ``data`` as ``target`` only if ``target`` does not exist yet.

    The complete file appears at once (a hard link of a fsynced temporary file), so a
    concurrent reader never sees it half-written. On file systems without hard links it
    falls back to ``O_CREAT | O_EXCL`` (still exclusive, written in place).

    Returns:
        ``True`` if this call created ``target``, ``False`` if it already existed.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(
        prefix=temp_prefix(target), suffix=TEMP_SUFFIX, dir=target.parent
    )
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o666 & ~_current_umask())
        try:
            os.link(tmp, target)
        except FileExistsError:
            return False
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV):
                raise
            return _create_in_place(target, data)
        _fsync_dir(target.parent)
        return True
    finally:
        tmp.unlink(missing_ok=True)


def _create_in_place(target: Path, data: bytes) -> bool:
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except FileExistsError:
        return False
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    return True
