"""The plugin worker: the only kind of process that runs a contestant's model or adapter.

Started by :class:`~fewtrans_board.runner.worker.isolated.PluginWorker` as ``python -I -m
fewtrans_board.runner.worker.serve``, the same way for every command, so a plugin cannot tell
a verification from an evaluation. It is a *zygote* that imports trusted code only and forks
an *episode process* per request (:mod:`fewtrans_board.runner.worker.episode_process`), then
ends whatever that left running; it reads only the small ``spawn`` frames, never episode data
(SECURITY.md, "Where plugin code runs").

Frames (:mod:`fewtrans_board.runner.worker.frames`) on stdin, answers on stdout:

- ``hello`` {settings}: configure the zygote; answer ``ready``.
- ``spawn`` {adapter, training_free}: fork an episode process for that adapter (one zygote
  serves every adapter of its plugins and model), which reads one session:
  - ``info``: answer the installed pins, the adapter schema and the backbone's facts;
  - ``embed`` {batch_size} then ``chunk`` frames with ``pixels`` and a final ``end``:
    answer ``features`` for each chunk (frozen features for the caller's cache);
  - ``fit`` {class_names, configs, seeds, loop, kind, novel_class_names} with arrays
    ``support``, ``labels``, ``q0``, ``q1``, ... (and ``novel``): fit every configuration
    and answer logits ``c<i>.q<j>`` (and ``c<i>.novel``), seconds and records;
  then the zygote answers ``done`` with the episode process's exit status.
- ``bye``: exit.

The worker never sees item ids, query labels, episode indices or the presentation order;
it returns logits and the caller scores them.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
import sys
import traceback
from typing import IO, TYPE_CHECKING, Any

from fewtrans_board.core.sandbox.episode import empty_scratch, end_descendants, guard_worker_process
from fewtrans_board.runner.worker.episode_process import PRELOADED, run_session
from fewtrans_board.runner.worker.frames import FrameError, read_frame, write_frame

if TYPE_CHECKING:
    from fewtrans_board.registry.lookup import Registry

TRUSTED_PRELOAD = (
    "torch",
    "torch.optim",
    "PIL.Image",
    "fewtrans_board.runner.evaluate",
    "fewtrans_board.api.episode_data",
    "fewtrans_board.blocks.lockstep",
    "fewtrans_board.registry.lookup",
    "fewtrans_board.registry.manager",
    "fewtrans_board.default_plugins",
)
"""Imported by the zygote before any fork (never a third-party plugin)."""

TRAINING_ONLY = ("torch._dynamo",)
"""Imported by the zygote before it forks the first episode process of an adapter that
trains: torch.optim imports torch._dynamo at an optimiser's first step, 1.6 s in every
forked episode process, 0.01 s once the zygote has it (measured). A ``training_free``
adapter's optimiser step is trapped before it could, so a zygote that serves only those
never spends the 1.2-2.5 s."""

PRELOAD_ALLOWED = ("timm", "open_clip", "peft", "torchvision")
"""Libraries the caller may ask the zygote to import ahead (a model family's)."""


def describe_status(status: int) -> str:
    """How an episode process ended, in words (signals named, with their usual cause)."""
    import signal

    if os.WIFEXITED(status):
        return f"exit status {os.WEXITSTATUS(status)}"
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = f"signal {number}"
        causes = {
            "SIGKILL": "killed, e.g. by the kernel when memory ran out",
            "SIGXFSZ": "wrote a file larger than the worker's file-size limit",
            "SIGXCPU": "used more CPU time than allowed",
            "SIGSEGV": "crashed (segmentation fault)",
        }
        return f"{name}: {causes.get(name, 'terminated by a signal')}"
    return f"status {status}"


def _preload_builtin_model(settings: dict[str, Any]) -> None:
    """Load a built-in (trusted) model once in the zygote, for episode processes to copy.

    Single-threaded (a fork after a multi-threaded OpenMP region hangs the children) and on
    CPU only (CUDA cannot survive a fork).
    """
    import torch

    if settings.get("device", "cpu") != "cpu":
        return
    try:
        registry = _builtin_registry()
        if not registry.model(settings["model"]).source.builtin:
            return
        torch.set_num_threads(1)
        PRELOADED["backbone"] = registry.load_model(
            settings["model"], settings.get("weights"), "cpu"
        )
    except Exception:
        return  # episode process loads it itself and reports what fails


def _configure(settings: dict[str, Any]) -> None:
    """Zygote set-up: plugin folders on the path, trusted libraries imported, guards on."""
    for path in settings.get("plugin_paths") or []:
        if path not in sys.path:
            sys.path.append(path)  # after site-packages: a plugin cannot shadow a library
    import torch

    torch.set_num_threads(1)  # the zygote computes nothing; children choose their own count
    for name in (
        *TRUSTED_PRELOAD,
        *(m for m in settings.get("preload") or [] if m in PRELOAD_ALLOWED),
    ):
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    _preload_builtin_model(settings)
    guard_worker_process()


def _prepare_adapter(session: dict[str, Any]) -> None:
    """Zygote set-up for the adapter of the next episode process (trusted imports only).

    An adapter that trains gets :data:`TRAINING_ONLY`; a built-in adapter's modules are
    imported once, for every episode process of it to copy.
    """
    if not session["training_free"]:
        for name in TRAINING_ONLY:
            with contextlib.suppress(ImportError):
                importlib.import_module(name)
    _import_builtin_adapter(session["adapter"])


@functools.cache
def _builtin_registry() -> Registry:
    """The built-in plugins only (trusted code: the zygote never imports a third party's)."""
    from fewtrans_board.registry.lookup import Registry
    from fewtrans_board.registry.manager import get_plugin_manager

    return Registry.from_plugin_manager(get_plugin_manager(entry_points=False))


@functools.cache
def _import_builtin_adapter(adapter: str) -> None:
    """Import a built-in adapter's modules once (a plugin's adapter is not in this registry)."""
    try:
        registry = _builtin_registry()
        if adapter in registry.adapters:
            registry.adapters.get(adapter).obj.schema()
    except Exception:
        return  # the episode process loads it itself and reports what fails


def _check_request_pipe(requests: IO[bytes]) -> None:
    """Raise ``RuntimeError`` if an episode process left bytes in the request pipe.

    The next request comes only after ``done`` and an episode process reads its whole request,
    so bytes here were written into the pipe (``/proc/self/fd/0``) for the next episode.
    """
    import array
    import fcntl
    import termios

    count = array.array("i", [0])
    fcntl.ioctl(requests.fileno(), termios.FIONREAD, count, True)
    if count[0]:
        raise RuntimeError(
            f"the episode process left {count[0]} bytes in its request pipe, which the next "
            "episode would read; episodes may not pass anything to each other"
        )


def serve(requests: IO[bytes], replies: IO[bytes]) -> None:
    """Answer ``hello``, then fork an episode process per ``spawn``, until ``bye``."""
    header, _ = read_frame(requests)
    if header.get("op") != "hello":
        write_frame(replies, {"ok": False, "error": "the first request must be hello"})
        return
    settings = dict(header)
    _configure(settings)
    write_frame(replies, {"ok": True, "op": "ready", "pid": os.getpid()})
    while True:
        try:
            header, _ = read_frame(requests)
        except FrameError:  # the caller went away: nothing left to do
            return
        op = header.get("op")
        if op == "bye":
            return
        if op != "spawn" or not isinstance(header.get("adapter"), str):
            error = f"unknown request {op!r}" if op != "spawn" else "spawn names no adapter"
            write_frame(replies, {"ok": False, "error": error})
            return
        session = {
            **settings,
            "adapter": header["adapter"],
            "training_free": bool(header.get("training_free")),
        }
        _prepare_adapter(session)
        replies.flush()
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                run_session(requests, replies, session)
            except BaseException:
                traceback.print_exc(file=sys.stderr)
                code = 1
            finally:
                try:
                    replies.flush()
                finally:
                    os._exit(code)
        _, status = os.waitpid(pid, 0)
        end_descendants()
        try:
            # Episode processes have scratch of their own; this covers kernels without
            # nested namespaces, where they share the sandbox's.
            empty_scratch()
            _check_request_pipe(requests)
        except (RuntimeError, OSError) as exc:
            print(f"the plugin worker stops: {exc}", file=sys.stderr, flush=True)
            write_frame(replies, {"ok": False, "op": "stopped", "error": str(exc)})
            raise SystemExit(3) from exc
        write_frame(replies, {"ok": True, "op": "done", "status": describe_status(status)})


def main() -> None:
    """Serve on stdin/stdout; whatever plugins print goes to stderr."""
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    # Unbuffered: the zygote reads exactly its own frames and never an episode's bytes.
    requests = os.fdopen(os.dup(sys.stdin.fileno()), "rb", buffering=0)
    serve(requests, replies)


if __name__ == "__main__":
    main()
