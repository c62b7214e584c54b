"""OS-level isolation of plugin workers: what a worker sees, and how its episodes stay apart.

Two layers, both built from Linux namespaces:

- :mod:`~fewtrans_board.core.sandbox.bwrap` starts a plugin worker inside bubblewrap: its own PID,
  network, IPC, UTS, user and mount namespaces, no capabilities, a read-only view of only the
  system libraries, the interpreter, fewtrans-board and the plugin folders
  (:mod:`~fewtrans_board.core.sandbox.policy`), a private ``/proc``, empty scratch ``/tmp`` and
  ``/dev/shm``, and a read-only root and ``/dev``.
- :mod:`~fewtrans_board.core.sandbox.episode` isolates each episode process the worker forks: a
  fresh user, mount and IPC namespace with its own empty ``/tmp`` and ``/dev/shm`` (fresh tmpfs
  that die with it; the read-only binds under ``/tmp`` bound again at their paths), so that
  every place it can write dies with it; resource limits; and, after it exits, no process of
  it left alive.

Nothing here imports torch; the worker and the judge both use it.
"""

from fewtrans_board.core.sandbox.bwrap import SandboxUnavailable, sandbox_argv, sandbox_problem
from fewtrans_board.core.sandbox.policy import Isolation, Limits, SandboxPolicy, worker_policy

__all__ = [
    "Isolation",
    "Limits",
    "SandboxPolicy",
    "SandboxUnavailable",
    "sandbox_argv",
    "sandbox_problem",
    "worker_policy",
]
