"""What a plugin worker may see and use: read-only paths, devices, resource limits.

The view is an allow-list. A worker sees the system libraries, its interpreter (and the
virtual environment around it), fewtrans-board's own package, the plugin folders and
files the caller names, and local model-hub caches; never the working folder, the
leaderboard store, manifests, bundles or dataset folders. A path the caller asks to bind
that contains one of the caller's ``forbidden`` paths is refused by name, so a careless
``--plugin-dir .`` cannot expose the store.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from fewtrans_board.core.errors import FewtransError

SYSTEM_PATHS = (
    *("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"),
    *("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives"),
    *("/etc/localtime", "/etc/passwd", "/etc/group"),
)
"""Read-only everywhere: shared libraries, the dynamic loader's cache, time zone, user names."""

PASSED_ENV_PREFIXES = ("OMP_", "MKL_", "KMP_", "OPENBLAS_", "CUDA_", "CUBLAS_", "NVIDIA_")
"""Environment variables that select numeric kernels or devices reach the worker unchanged
(evaluate and verification pass the same ones); every other variable is dropped."""

CUDA_DEVICES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset")

GIB = 1 << 30

SCRATCH_PLACES = ("/dev/shm",)
"""Private to each episode process (a fresh tmpfs would hide what a bind placed there), so
host paths under them are shown elsewhere (:func:`inside_path`). ``/tmp`` is private to
each episode process too, but host paths under it (a clone or virtualenv there) are bound
at their own place: an episode process binds them again, read-only, in its fresh ``/tmp``
(:func:`~fewtrans_board.core.sandbox.episode.isolate_episode_process`)."""
MOVED_ROOT = "/run/fewtrans"


def inside_path(path: str) -> str:
    """Where the sandbox shows host ``path``.

    The same place, or under ``/run/fewtrans`` for paths in ``/dev/shm`` (which episode
    processes replace by their own).
    """
    normal = os.path.normpath(path)
    for place in SCRATCH_PLACES:
        if normal == place or normal.startswith(place + "/"):
            return MOVED_ROOT + normal
    return normal


class Isolation(StrEnum):
    """How plugin code runs.

    ``sandbox``: a bubblewrap sandbox (the default wherever it can be made); ``process``: a
    plain worker process with a cleared environment (named unsafe for verification);
    ``inline``: in the calling process (analyses and debugging only, never verification).
    """

    SANDBOX = "sandbox"
    PROCESS = "process"
    INLINE = "inline"


def _physical_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def _env_bytes(name: str, default: int | None) -> int | None:
    value = os.environ.get(name)
    if not value:
        return default
    try:
        return int(float(value) * GIB)
    except ValueError as exc:
        raise FewtransError(f"${name} = {value!r} is not a number of GiB") from exc


@dataclass(frozen=True)
class Limits:
    """Resource limits of every episode process of a worker.

    Attributes:
        memory_bytes: address-space limit (``RLIMIT_AS``; CPU workers only, since CUDA maps
            more address space than it uses); ``None``: no limit.
        file_bytes: largest file an episode process may write (``RLIMIT_FSIZE``).
        scratch_bytes: size of each of its private ``/tmp`` and ``/dev/shm`` (and of the
            worker's own ``/tmp``).
        seconds: wall-clock limit of one request (the caller kills the worker past it).
    """

    memory_bytes: int | None = None
    file_bytes: int = 4 * GIB
    scratch_bytes: int = 4 * GIB
    seconds: float = 4 * 3600.0

    @classmethod
    def defaults(cls, device: str = "cpu") -> Limits:
        """The limits of a worker on ``device``.

        Memory: 90% of physical memory on CPU (``$FEWTRANS_BOARD_WORKER_MEMORY_GIB``); files:
        4 GiB (``$FEWTRANS_BOARD_WORKER_FILE_GIB``); time: 4 hours per request
        (``$FEWTRANS_BOARD_WORKER_TIMEOUT_S``).
        """
        memory = None
        if not device.startswith("cuda"):
            physical = _physical_memory()
            memory = _env_bytes(
                "FEWTRANS_BOARD_WORKER_MEMORY_GIB", int(physical * 0.9) if physical else None
            )
        seconds = float(os.environ.get("FEWTRANS_BOARD_WORKER_TIMEOUT_S") or cls.seconds)
        files = _env_bytes("FEWTRANS_BOARD_WORKER_FILE_GIB", cls.file_bytes) or cls.file_bytes
        return cls(memory_bytes=memory, file_bytes=files, seconds=seconds)

    def to_dict(self) -> dict[str, float | int | None]:
        """JSON-friendly form (sent to the worker, recorded in reports)."""
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class SandboxPolicy:
    """The view of one worker sandbox.

    Attributes:
        read_only: host paths bound read-only (at :func:`inside_path`).
        devices: device nodes bound read-write (CUDA).
        env: the worker's whole environment.
    """

    read_only: tuple[str, ...]
    devices: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)


def interpreter_paths(python: str) -> list[str]:
    """The interpreter's files without running it: its binary, its venv, its base prefix.

    Running the worker's interpreter outside the sandbox to ask would execute whatever
    ``.pth`` files its environment holds, so the layout is read from disk instead.
    """
    paths: list[str] = []
    binary = Path(python).absolute()
    paths += [str(binary), os.path.realpath(binary)]
    venv = binary.parent.parent
    config = venv / "pyvenv.cfg"
    if config.is_file():
        paths.append(str(venv))
        for line in config.read_text(encoding="utf-8", errors="replace").splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "home" and value.strip():
                paths.append(os.path.realpath(Path(value.strip()).parent))
    paths.append(str(Path(os.path.realpath(binary)).parent.parent))
    return paths


def own_package() -> str:
    """The folder of the fewtrans-board package this process runs."""
    return str(Path(__file__).resolve().parents[2])


def hub_caches() -> dict[str, str]:
    """Local model-hub caches, by the variable that points libraries at them."""
    home = Path.home()
    candidates = {
        "HF_HOME": os.environ.get("HF_HOME") or str(home / ".cache" / "huggingface"),
        "TORCH_HOME": os.environ.get("TORCH_HOME") or str(home / ".cache" / "torch"),
    }
    return {k: v for k, v in candidates.items() if Path(v).is_dir()}


def _inside(path: str, other: str) -> bool:
    return Path(other) == Path(path) or Path(path) in Path(other).parents


def _minimal(paths: Sequence[str]) -> tuple[str, ...]:
    """Unique existing paths, none inside another (binding the outer one covers it)."""
    unique = sorted({os.path.normpath(p) for p in paths if os.path.lexists(p)})
    kept: list[str] = []
    for path in unique:
        if not any(_inside(k, path) and k != path for k in kept):
            kept.append(path)
    return tuple(kept)


def worker_policy(
    python: str,
    *,
    plugin_paths: Sequence[Path] = (),
    files: Sequence[Path] = (),
    device: str = "cpu",
    forbidden: Sequence[Path] = (),
) -> SandboxPolicy:
    """The view of a plugin worker running ``python``.

    Args:
        python: the worker's interpreter.
        plugin_paths: folders of plugin code (``--plugin-dir`` and editable installs).
        files: single files the worker reads (a ``--weights`` checkpoint).
        device: the torch device (CUDA binds the GPU device nodes).
        forbidden: paths the worker must never see (store, bundle, dataset copies, the
            working folder).

    Raises:
        FewtransError: a path to bind contains a forbidden one.
    """
    requested = [str(Path(p).resolve()) for p in (*plugin_paths, *files)]
    caches = hub_caches()
    interpreter = interpreter_paths(python)
    for path in [*requested, *caches.values(), *interpreter, own_package()]:
        for secret in forbidden:
            if Path(secret).resolve() != Path("/") and _inside(path, str(Path(secret).resolve())):
                raise FewtransError(
                    f"the plugin worker would see {secret} through {path}; keep plugin folders "
                    "and weights outside the leaderboard store, bundles, dataset copies and "
                    "the working folder"
                )
    read_only = _minimal([*SYSTEM_PATHS, *interpreter, own_package(), *requested, *caches.values()])
    devices: tuple[str, ...] = ()
    if device.startswith("cuda"):
        numbered = [f"/dev/{n}" for n in os.listdir("/dev") if n[len("nvidia") :].isdigit()]
        devices = _minimal([*numbered, *CUDA_DEVICES])
        read_only = _minimal([*read_only, "/sys"])
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": "/tmp",
        "TMPDIR": "/tmp",
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONNOUSERSITE": "1",
        "HF_HUB_OFFLINE": "1",
        **caches,
        **{k: v for k, v in os.environ.items() if k.startswith(PASSED_ENV_PREFIXES)},
    }
    return SandboxPolicy(read_only=read_only, devices=devices, env=env)
