"""Keep the episode processes of one worker apart from each other.

A plugin worker forks one process per request (an episode, an embedding pass). Before any
plugin code runs there, :func:`isolate_episode_process` gives it a fresh user, mount and
IPC namespace with its own empty ``/dev/shm`` (and ``/tmp`` emptied by the worker before it
starts) and drops every capability, so nothing it writes, no shared-memory segment or
message queue it creates, outlives it; the read-only mounts it inherits are locked (a less
privileged namespace cannot remount them).
:func:`apply_limits` sets its resource limits. After it exits, the worker calls
:func:`end_descendants` so no process it started survives into the next episode.

Everything here is Linux system calls through ``ctypes``; nothing imports torch.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import resource
import signal
from pathlib import Path

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
MS_NOSUID, MS_NODEV = 0x2, 0x4
PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_SET_CHILD_SUBREAPER = 36
LINUX_CAPABILITY_VERSION_3 = 0x20080522
CAP_LAST = 63
SYS_CAPSET = 126  # x86_64; other architectures fall back to the bounding-set drop only
SCRATCH = ("/tmp", "/dev/shm")


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


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

    ``/dev/shm`` in a sandbox (the child of the sandbox's PID 1), whose ``/tmp`` holds the
    read-only binds of host paths there and is emptied by the worker between episodes;
    elsewhere only the worker's private ``$TMPDIR`` (``/tmp`` is the host's).
    """
    if os.getppid() == 1:
        return ("/dev/shm",)
    tmpdir = os.environ.get("TMPDIR")
    return (tmpdir,) if tmpdir and tmpdir not in ("/tmp", "/") else ()


def isolate_episode_process(scratch_bytes: int) -> str:
    """Put this (freshly forked) process in namespaces of its own, before plugin code runs.

    Args:
        scratch_bytes: size of the private scratch folders (:func:`scratch_places`).

    Returns:
        ``"namespaces"`` when the process has its own user, mount and IPC namespace and
        scratch; otherwise why not (the kernel refuses nested user namespaces), in which
        case the worker empties the shared scratch between episodes instead.
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
        for place in scratch_places():
            if os.path.isdir(place) and libc.mount(
                b"tmpfs", place.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, options
            ):
                raise OSError(ctypes.get_errno(), f"cannot mount a private {place}")
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
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        fields = line.split()
        if len(fields) > 4:
            point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
            if point.startswith(place.rstrip("/") + "/"):
                found.add(os.path.normpath(point))
    return found


def _prune(folder: Path, keep: set[str], ancestors: set[str]) -> None:
    import shutil

    for entry in folder.iterdir():
        name = str(entry)
        if name in keep:
            continue
        if name in ancestors and entry.is_dir() and not entry.is_symlink():
            _prune(entry, keep, ancestors)
        elif entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                entry.unlink()


def empty_scratch() -> None:
    """Delete everything an episode left in a sandboxed worker's scratch.

    Only as PID 1 of a sandbox, where ``/tmp`` is the sandbox's own (an unsandboxed
    worker's ``/tmp`` is the host's). The read-only binds of host paths under ``/tmp`` and
    the folders leading to them stay; everything else goes.
    """
    if os.getpid() != 1:
        return
    for place in SCRATCH:
        root = Path(place)
        if not root.is_dir() or not os.access(root, os.W_OK):
            continue
        keep = _mount_points(place)
        ancestors = {str(parent) for point in keep for parent in Path(point).parents}
        _prune(root, keep, ancestors)
