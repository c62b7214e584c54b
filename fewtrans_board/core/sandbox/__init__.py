"""OS-level isolation of plugin workers: what a worker sees, and how its episodes stay apart.

Two layers, both Linux namespaces (SECURITY.md, "Where plugin code runs", describes them):
:mod:`~fewtrans_board.core.sandbox.bwrap` starts a plugin worker inside bubblewrap with the
read-only view of :mod:`~fewtrans_board.core.sandbox.policy`, and
:mod:`~fewtrans_board.core.sandbox.episode` isolates each episode process the worker forks.
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
