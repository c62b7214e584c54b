"""Keep the episode processes of one worker apart from each other.

A plugin worker forks one process per request (an episode, an embedding pass). Before any
plugin code runs there, :func:`isolate_episode_process` gives it fresh namespaces and its own
empty scratch, so nothing it writes or creates outlives it, whatever it does to permissions;
:func:`apply_limits` sets its resource limits. After it exits, the worker calls
:func:`end_descendants` and, where the kernel refuses nested namespaces (the episode
processes then share the sandbox's ``/tmp``), :func:`empty_scratch`. SECURITY.md ("Where
plugin code runs") describes the whole; everything here is Linux system calls through
``ctypes``, and nothing imports torch.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import re
import resource
import signal
import stat
from pathlib import Path

CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWUSER = 0x00020000, 0x08000000, 0x10000000
MS_RDONLY, MS_NOSUID, MS_NODEV = 0x1, 0x2, 0x4
MS_REMOUNT, MS_BIND, MS_REC, MS_RELATIME = 0x20, 0x1000, 0x4000, 0x200000
PR_SET_DUMPABLE, PR_CAPBSET_DROP, PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS = 4, 24, 36, 38
LINUX_CAPABILITY_VERSION_3 = 0x20080522
CAP_LAST = 63
SYS_CAPSET = 126  # x86_64; other architectures fall back to the bounding-set drop only
SCRATCH = ("/tmp", "/dev/shm")


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint32) for name in ("effective", "permitted", "inheritable")]


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _drop_capabilities(libc: ctypes.CDLL) -> None:
    for cap in range(CAP_LAST + 1):
        libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)  # EINVAL past the kernel's last: ignored
    header = _CapHeader(LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    if os.uname().machine == "x86_64" and libc.syscall(SYS_CAPSET, ctypes.byref(header), data):
        raise OSError(ctypes.get_errno(), "capset failed")


def scratch_places() -> tuple[str, ...]:
    """Where an episode process gets a fresh private tmpfs.

    ``/tmp`` and ``/dev/shm`` in a sandbox (the child of the sandbox's PID 1), where both are
    the sandbox's own and every other place is read-only; elsewhere only the worker's
    private ``$TMPDIR`` (``/tmp`` is the host's).
    """
    if os.getppid() == 1:
        return ("/tmp", "/dev/shm")
    tmpdir = os.environ.get("TMPDIR")
    return (tmpdir,) if tmpdir and tmpdir not in ("/tmp", "/") else ()


def _outermost(points: set[str]) -> list[str]:
    """The mount points not below another one (binding one again brings those below)."""
    return sorted(p for p in points if not any(p.startswith(o + "/") for o in points))


def _bind_again(libc: ctypes.CDLL, fd: int, point: str) -> None:
    """Bind what ``fd`` (``O_PATH``) shows at ``point`` (in a fresh tmpfs), read-only."""
    directory = stat.S_ISDIR(os.fstat(fd).st_mode)
    os.makedirs(point if directory else os.path.dirname(point), exist_ok=True)
    if not directory:
        os.close(os.open(point, os.O_CREAT | os.O_WRONLY, 0o600))
    # Recursive: the inherited mounts are locked, and a locked mount may only be bound with
    # whatever is mounted below it.
    if libc.mount(f"/proc/self/fd/{fd}".encode(), point.encode(), None, MS_BIND | MS_REC, None):
        raise OSError(ctypes.get_errno(), f"cannot bind {point} again")
    now = os.statvfs(point).f_flag
    if not now & os.ST_RDONLY:
        # Keep the flags it has (a locked flag cannot be cleared): same bits in ST_ and MS_.
        kept = now & (os.ST_NOSUID | os.ST_NODEV | os.ST_NOEXEC | os.ST_NOATIME | os.ST_NODIRATIME)
        flags = (
            MS_REMOUNT | MS_BIND | MS_RDONLY | kept | (MS_RELATIME if now & os.ST_RELATIME else 0)
        )
        if libc.mount(None, point.encode(), None, flags, None):
            raise OSError(ctypes.get_errno(), f"cannot make {point} read-only")
    seen, shown = os.fstat(fd), os.stat(point)
    if not os.statvfs(point).f_flag & os.ST_RDONLY or (seen.st_dev, seen.st_ino) != (
        shown.st_dev,
        shown.st_ino,
    ):
        raise OSError(errno.EPERM, f"{point} is not the read-only bind it was")


def _fresh_tmpfs(libc: ctypes.CDLL, place: str, options: bytes) -> None:
    """Mount an empty tmpfs on ``place``, with the mounts that were below it bound again.

    The old contents, and whatever an earlier episode left there (even behind a mode-000
    folder), are hidden under the new tmpfs; the read-only binds of host paths below
    ``place`` (a clone or a virtualenv in ``/tmp``) stay visible at their paths.
    """
    points = _outermost(_mount_points(place))
    fds = [os.open(point, os.O_PATH | os.O_CLOEXEC) for point in points]
    try:
        if libc.mount(b"tmpfs", place.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, options):
            raise OSError(ctypes.get_errno(), f"cannot mount a private {place}")
        for fd, point in zip(fds, points, strict=True):
            _bind_again(libc, fd, point)
    finally:
        for fd in fds:
            os.close(fd)


def isolate_episode_process(scratch_bytes: int) -> str:
    """Put this (freshly forked) process in namespaces of its own, before plugin code runs.

    Args:
        scratch_bytes: size of the private scratch folders (:func:`scratch_places`).

    Returns:
        ``"namespaces"`` when the process has its own user, mount and IPC namespace and
        scratch; otherwise why not (the kernel refuses nested user namespaces), in which
        case the worker empties the shared scratch between episodes instead.

    Raises:
        RuntimeError: the namespaces were made but the private scratch was not (the caller
            must not run plugin code in a half-isolated process).
    """
    libc = _libc()
    uid, gid = os.getuid(), os.getgid()
    libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    # The worker is non-dumpable (its memory unreadable); this process must own its /proc
    # files to write its namespace maps.
    libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)
    if libc.unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWIPC) != 0:
        return f"no nested namespaces ({os.strerror(ctypes.get_errno())})"
    try:
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"{uid} {uid} 1")
        _write("/proc/self/gid_map", f"{gid} {gid} 1")
        options = f"size={scratch_bytes},mode=1777".encode()
        cwd = os.getcwd()
        for place in scratch_places():
            if os.path.isdir(place):
                _fresh_tmpfs(libc, place, options)
                # The working folder, if in the old scratch, would still reach it.
                if cwd == place or cwd.startswith(place.rstrip("/") + "/"):
                    os.chdir(place)
        _drop_capabilities(libc)
    except OSError as exc:
        # Half-isolated is not isolated: the caller must not run plugin code here.
        raise RuntimeError(f"isolating the episode process failed: {exc}") from exc
    return "namespaces"


def apply_limits(memory_bytes: int | None, file_bytes: int) -> None:
    """Resource limits of this process: address space, file size, no core dumps."""
    if memory_bytes:
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    resource.setrlimit(resource.RLIMIT_FSIZE, (file_bytes, file_bytes))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def guard_worker_process() -> None:
    """Make the worker itself unreadable to its episode processes and their reaper.

    Non-dumpable: an episode process (same uid) cannot read the worker's memory through
    ``/proc``. Child subreaper: orphans of an episode process are re-parented to the
    worker, which ends them (:func:`end_descendants`).
    """
    libc = _libc()
    libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _children_of(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rpartition(")")[2].split()
        if len(fields) > 1 and int(fields[1]) == pid:
            found.append(int(entry.name))
    return found


def end_descendants(rounds: int = 50) -> int:
    """Kill every process this one started, directly or not; return how many were left.

    As PID 1 of a sandbox's PID namespace one ``kill(-1)`` reaches them all. Elsewhere
    (an unsandboxed worker) the worker is a child subreaper, so orphans become its
    children; its children are killed until none is left.
    """
    killed = 0
    if os.getpid() == 1:
        try:
            os.kill(-1, signal.SIGKILL)
            killed = 1
        except ProcessLookupError:
            pass
    else:
        for _ in range(rounds):
            children = _children_of(os.getpid())
            if not children:
                break
            for pid in children:
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed += 1
                except ProcessLookupError:
                    pass
            _reap()
    _reap()
    return killed


def _reap() -> None:
    """Wait for every child of this process (all of them were sent SIGKILL)."""
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return
        except InterruptedError:  # pragma: no cover
            continue


def _mount_points(place: str) -> set[str]:
    """Mount points below ``place`` (the read-only binds a sandbox put there)."""
    found: set[str] = set()
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        if len(fields) > 4:
            point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
            if point.startswith(place.rstrip("/") + "/"):
                found.add(os.path.normpath(point))
    return found


def _remove(path: str) -> None:
    """Delete ``path`` and everything below it, whatever modes an episode gave them."""
    if os.path.islink(path) or not os.path.isdir(path):
        with contextlib.suppress(OSError):
            os.unlink(path)
        return
    # Each folder once, emptied before it is removed; no recursion (an episode may nest
    # folders deeper than Python can recurse).
    stack = [(path, False)]
    while stack:
        folder, emptied = stack.pop()
        if emptied:
            with contextlib.suppress(OSError):
                os.rmdir(folder)
            continue
        with contextlib.suppress(OSError):
            os.chmod(folder, 0o700)  # a folder made unreadable or unwritable
        stack.append((folder, True))
        try:
            with os.scandir(folder) as found:
                entries = [(e.path, e.is_dir(follow_symlinks=False)) for e in found]
        except OSError:
            continue
        for entry, is_folder in entries:
            if is_folder:
                stack.append((entry, False))
            else:
                with contextlib.suppress(OSError):
                    os.unlink(entry)


def _prune(folder: Path, keep: set[str], ancestors: set[str]) -> None:
    """Delete everything below ``folder`` but the paths in ``keep`` and their ``ancestors``."""
    with contextlib.suppress(OSError):
        os.chmod(folder, 0o755)  # an ancestor of a bind an episode made unreadable
    try:
        entries = list(folder.iterdir())
    except OSError:
        return  # what is left is found by _leftovers
    for entry in entries:
        name = str(entry)
        if name in keep:
            continue
        if name in ancestors and entry.is_dir() and not entry.is_symlink():
            _prune(entry, keep, ancestors)
        else:
            _remove(name)


def _leftovers(folder: Path, keep: set[str], ancestors: set[str]) -> list[str]:
    """What is below ``folder`` besides ``keep`` and the folders leading to it."""
    try:
        entries = list(folder.iterdir())
    except OSError as exc:
        return [f"{folder} ({exc.strerror})"]
    found = []
    for entry in entries:
        name = str(entry)
        if name in keep:
            continue
        if name in ancestors and entry.is_dir() and not entry.is_symlink():
            found += _leftovers(entry, keep, ancestors)
        else:
            found.append(name)
    return found


def empty_scratch() -> None:
    """Delete everything an episode left in a sandboxed worker's scratch.

    Only as PID 1 of a sandbox, where ``/tmp`` is the sandbox's own (an unsandboxed
    worker's ``/tmp`` is the host's). The read-only binds of host paths under ``/tmp`` and
    the folders leading to them stay; everything else goes, whatever its modes. Episode
    processes write only to their own tmpfs where the kernel allows nested namespaces, so
    this matters only where it does not.

    Raises:
        RuntimeError: something could not be removed (the next episode would find it); the
            worker must stop rather than serve another episode.
    """
    if os.getpid() != 1:
        return
    for place in SCRATCH:
        root = Path(place)
        if not root.is_dir():
            continue
        keep = _mount_points(place)
        ancestors = {str(parent) for point in keep for parent in Path(point).parents}
        _prune(root, keep, ancestors)
        left = _leftovers(root, keep, ancestors)
        if left:
            raise RuntimeError(
                f"an episode left {', '.join(sorted(left)[:5])} in the worker's {place}, which "
                "cannot be removed; the worker stops rather than start the next episode on it"
            )
