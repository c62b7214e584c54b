"""Start a command inside a bubblewrap sandbox (Debian/Ubuntu package ``bubblewrap``).

Every namespace unshared, an unprivileged uid without capabilities, its own ``/proc``, a
minimal ``/dev``, empty ``/tmp`` and ``/dev/shm`` tmpfs as the only writable places (root
and ``/dev`` are remounted read-only last: :data:`READ_ONLY_LAST`), and the command as PID 1
of its PID namespace, so it reaps (and can kill) every process started inside. SECURITY.md
("Where plugin code runs") lists what the sandbox shows and why.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
from collections.abc import Sequence

from fewtrans_board.core.errors import FewtransError
from fewtrans_board.core.sandbox.policy import SandboxPolicy, inside_path

SANDBOX_UID = 1000
"""The uid inside the sandbox (unprivileged, whoever starts it)."""

INSTALL_HINT = "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap)"

READ_ONLY_LAST = ("--remount-ro", "/dev", "--remount-ro", "/")
"""Closes the sandbox's command line options, after every bind, tmpfs and device (bubblewrap
applies its options in order, and each makes its mount point in ``/`` or ``/dev``): the
sandbox's root and ``/dev`` become read-only (not recursively: ``/tmp``, ``/dev/shm`` and
the device nodes are mounts of their own and keep their flags)."""


class SandboxUnavailable(FewtransError):
    """No sandbox can be made on this machine (no bubblewrap, or namespaces are off)."""


def _base_args(bwrap: str, scratch_bytes: int | None = None) -> list[str]:
    size = [] if scratch_bytes is None else ["--size", str(scratch_bytes)]
    isolation = (
        f"--unshare-all --unshare-user --uid {SANDBOX_UID} --gid {SANDBOX_UID} --cap-drop ALL "
        "--die-with-parent --new-session --as-pid-1 --proc /proc --dev /dev"
    )
    scratch = "--tmpfs /tmp --tmpfs /dev/shm --chdir /tmp --clearenv"
    return [bwrap, *isolation.split(), *size, *scratch.split()]


@functools.lru_cache(maxsize=1)
def sandbox_problem() -> str | None:
    """Why no sandbox can be made here (``None``: it can); checked once per process."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return f"bwrap is not installed; {INSTALL_HINT}"
    argv = [*_base_args(bwrap), "--ro-bind", "/", "/", *READ_ONLY_LAST, "--", "/bin/true"]
    try:
        done = subprocess.run(argv, capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap cannot start ({exc})"
    if done.returncode != 0:
        detail = done.stderr.decode(errors="replace").strip() or f"exit status {done.returncode}"
        return (
            f"bwrap cannot create namespaces here ({detail}); enable unprivileged user "
            "namespaces (sysctl kernel.unprivileged_userns_clone=1 or the distribution's "
            "bwrap AppArmor profile)"
        )
    return None


def sandbox_argv(
    policy: SandboxPolicy, argv: Sequence[str], scratch_bytes: int | None = None
) -> list[str]:
    """The bwrap command line that runs ``argv`` inside ``policy``'s view.

    Raises:
        SandboxUnavailable: bubblewrap is missing or cannot create namespaces here.
    """
    problem = sandbox_problem()
    if problem is not None:
        raise SandboxUnavailable(problem)
    bwrap = shutil.which("bwrap")
    assert bwrap is not None
    args = _base_args(bwrap, scratch_bytes)
    for path in policy.read_only:
        args += ["--ro-bind-try", path, inside_path(path)]
    for device in policy.devices:
        args += ["--dev-bind-try", device, device]
    for key, value in sorted(policy.env.items()):
        args += ["--setenv", key, value]
    return [*args, *READ_ONLY_LAST, "--", *argv]
