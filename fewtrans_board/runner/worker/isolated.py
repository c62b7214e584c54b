"""Drive a plugin worker (:mod:`fewtrans_board.runner.worker.serve`) from the calling process.

The caller (``evaluate``, ``preflight``, ``hpe search``, verification) never runs the
contestant's code: it sends episode tensors, receives logits in the pickle-free frame format
and checks every reply (shape, dtype, finiteness) before use; each request runs in a fresh
episode process. A bubblewrap sandbox by default, else (``Isolation.PROCESS``) a plain process
with a cleared environment; SECURITY.md, "Where plugin code runs", says what each keeps apart.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fewtrans_board.core.sandbox import Isolation, sandbox_argv, worker_policy
from fewtrans_board.models.unlearned_records import sidecar
from fewtrans_board.runner.worker.frames import FrameError, read_frame, write_frame
from fewtrans_board.runner.worker.messages import (
    FitReply,
    FitRequest,
    WorkerError,
    WorkerInfo,
    WorkerSettings,
)
from fewtrans_board.runner.worker.trainable import checked_counts

WORKER_MODULE = "fewtrans_board.runner.worker.serve"


@dataclass
class _Idle:
    """A started worker waiting for the next run with the same settings."""

    process: subprocess.Popen[bytes]
    scratch: str | None


IDLE_WORKERS = 4
"""Started workers kept for reuse by later runs of this process (each holds torch)."""
_IDLE: dict[str, list[_Idle]] = {}


def _take_idle(key: str) -> _Idle | None:
    """A live idle worker started with exactly these settings, if any."""
    idle = _IDLE.get(key, [])
    while idle:
        worker = idle.pop()
        if worker.process.poll() is None:
            return worker
        _stop(worker)
    return None


def _give_back(key: str, worker: _Idle) -> None:
    _IDLE.setdefault(key, []).append(worker)
    while sum(len(v) for v in _IDLE.values()) > IDLE_WORKERS:
        oldest = next(k for k, v in _IDLE.items() if v)
        _stop(_IDLE[oldest].pop(0))


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        process.kill()


def _stop(worker: _Idle) -> None:
    process = worker.process
    try:
        if process.stdin is not None and process.poll() is None:
            write_frame(process.stdin, {"op": "bye"})
            process.stdin.close()
        process.wait(timeout=30)
    except (OSError, FrameError, subprocess.TimeoutExpired):
        _kill_group(process)
        process.wait()
    if process.stdout is not None:
        process.stdout.close()
    if worker.scratch is not None:
        shutil.rmtree(worker.scratch, ignore_errors=True)


@atexit.register
def stop_idle_workers() -> None:
    """Stop every idle worker (at exit, or when a test wants a fresh one)."""
    for idle in _IDLE.values():
        while idle:
            _stop(idle.pop())


def weights_files(weights: str | None) -> list[Path]:
    """A ``--weights`` checkpoint and the record beside it (unlearned weights carry one)."""
    if not weights:
        return []
    checkpoint = Path(weights)
    record = sidecar(checkpoint)
    return [checkpoint, record] if record != checkpoint and record.is_file() else [checkpoint]


def _argv(settings: WorkerSettings, python: str) -> list[str]:
    command = [python, "-I", "-m", WORKER_MODULE]
    if settings.isolation is Isolation.SANDBOX:
        policy = worker_policy(
            python,
            plugin_paths=[Path(p) for p in settings.bind_paths],
            files=weights_files(settings.weights),
            device=settings.device,
            forbidden=[Path(p) for p in settings.forbidden],
        )
        return sandbox_argv(policy, command, settings.limits.scratch_bytes)
    return command


class PluginWorker:
    """A plugin worker process; each request runs in a fresh episode process inside it.

    Args:
        settings: how to load and run the plugins.
    """

    def __init__(self, settings: WorkerSettings) -> None:
        if settings.isolation is Isolation.INLINE:
            raise ValueError("an inline run has no worker process")
        self.settings = settings
        self.python = settings.python or sys.executable
        self.info: WorkerInfo | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._scratch: str | None = None
        self._timed_out = False
        self._healthy = False
        self._key = ""

    def __enter__(self) -> PluginWorker:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # --- process ------------------------------------------------------------------------

    def start(self) -> WorkerInfo:
        """Start the worker, or reuse an idle one started with the same settings; load the plugins.

        A worker never runs plugin code itself and keeps nothing of the episodes it served,
        so one started for an earlier run with identical settings is as fresh as a new one.
        """
        argv = _argv(self.settings, self.python)
        self._key = json.dumps([argv, self.settings.hello()], sort_keys=True)
        idle = _take_idle(self._key)
        if idle is None:
            self._launch(argv)
        else:
            self._process, self._scratch = idle.process, idle.scratch
        self._healthy = True
        self.info = self._info()
        return self.info

    def _launch(self, argv: list[str]) -> None:
        env: dict[str, str] | None = None
        cwd: str | None = None
        if self.settings.isolation is Isolation.PROCESS:
            # Same cleared environment as the sandbox, and a private working folder.
            from fewtrans_board.core.sandbox.policy import PASSED_ENV_PREFIXES, hub_caches

            self._scratch = cwd = tempfile.mkdtemp(prefix="fewtrans-worker-")
            env = {
                "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                "HOME": cwd,
                "TMPDIR": cwd,
                "LANG": "C.UTF-8",
                "PYTHONDONTWRITEBYTECODE": "1",
                "HF_HUB_OFFLINE": "1",
                **hub_caches(),
                **{k: v for k, v in os.environ.items() if k.startswith(PASSED_ENV_PREFIXES)},
            }
        try:
            self._process = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env=env,
                cwd=cwd,
                start_new_session=True,
            )
        except OSError as exc:
            raise WorkerError(f"cannot start the plugin worker {self.python}: {exc}") from exc
        self._send(self.settings.hello())
        ready, _ = self._read()
        if ready.get("ok") is not True:
            raise WorkerError(f"the plugin worker failed: {ready.get('error', '(no message)')}")
        if ready.get("op") != "ready":
            raise WorkerError(f"the plugin worker answered {ready.get('op')!r} to hello")

    def _info(self) -> WorkerInfo:
        header, _ = self._session({"op": "info"})

        def texts(key: str) -> dict[str, str | None]:
            return {
                str(k): None if v is None else str(v) for k, v in (header.get(key) or {}).items()
            }

        try:
            error = header.get("load_error")
            return WorkerInfo(
                installed=texts("installed"),
                load_error=None if error is None else str(error),
                schema=dict(header.get("schema") or {}),
                image_size=int(header.get("image_size") or 0),
                weights_id=str(header.get("weights_id") or ""),
                feature_dim=int(header.get("feature_dim") or 0),
                model_info=dict(header.get("model_info") or {}),
                device=str(header.get("device") or self.settings.device),
                isolation=str(header.get("isolation") or ""),
                batches=bool(header.get("batches")),
                files=texts("files"),
            )
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise WorkerError(f"the plugin worker's info is malformed: {exc}") from exc

    def _kill(self) -> None:
        if self._process is not None and self._process.poll() is None:
            _kill_group(self._process)

    def _abandon(self, message: str) -> WorkerError:
        """Stop a worker that broke the protocol; the error to raise."""
        self._healthy = False
        self._kill()
        return WorkerError(message)

    def _watchdog(self) -> threading.Timer:
        def expire() -> None:
            self._timed_out = True
            self._kill()

        timer = threading.Timer(self.settings.limits.seconds, expire)
        timer.daemon = True
        timer.start()
        return timer

    def _read(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        process = self._process
        assert process is not None and process.stdout is not None
        try:
            return read_frame(process.stdout)
        except (FrameError, OSError) as exc:
            raise self._failure(exc) from exc

    def _failure(self, exc: BaseException) -> WorkerError:
        self._healthy = False
        process = self._process
        code = None if process is None else process.poll()
        if self._timed_out:
            return WorkerError(
                f"the plugin worker took longer than {self.settings.limits.seconds:.0f} s on "
                "one request and was stopped; raise $FEWTRANS_BOARD_WORKER_TIMEOUT_S if it needs "
                "longer"
            )
        return WorkerError(
            f"the plugin worker stopped answering ({exc}; exit status {code}); its stderr "
            "above says why"
        )

    def _send(self, header: dict[str, Any], arrays: dict[str, np.ndarray] | None = None) -> None:
        process = self._process
        if process is None or process.stdin is None:
            raise WorkerError("the plugin worker is not running")
        try:
            write_frame(process.stdin, header, arrays)
        except (FrameError, BrokenPipeError, OSError) as exc:
            raise self._failure(exc) from exc

    # --- sessions -----------------------------------------------------------------------

    def _expect_reply(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """One reply of the episode process, or its end (``done``) if it died first."""
        reply, out = self._read()
        if reply.get("op") == "done":
            raise WorkerError(
                f"the episode process ended without answering ({reply.get('status')}); its "
                "stderr above says why"
            )
        if reply.get("ok") is not True:
            self._finish_session()
            message = str(reply.get("error", "(no message)"))
            raise WorkerError(
                f"the plugin worker failed: {message}",
                message if reply.get("kind") == "plugin" else None,
            )
        return reply, out

    def _finish_session(self) -> str:
        done, _ = self._read()
        if done.get("op") == "stopped":
            raise self._abandon(f"the plugin worker stopped: {done.get('error', '(no message)')}")
        if done.get("op") != "done":
            raise self._abandon(
                f"the plugin worker sent {done.get('op') or 'an extra message'!r} after its "
                "answer; the worker was stopped"
            )
        return str(done.get("status"))

    @contextlib.contextmanager
    def _episode(self) -> Iterator[None]:
        """Spawn an episode process for the block's requests, then read its end (timed)."""
        timer = self._watchdog()
        try:
            self._send(self.settings.spawn())
            yield
            self._finish_session()
        finally:
            timer.cancel()

    def _session(
        self, header: dict[str, Any], arrays: dict[str, np.ndarray] | None = None
    ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """Spawn an episode process, send it one request, read its reply and its end."""
        with self._episode():
            self._send(header, arrays)
            reply = self._expect_reply()
        return reply

    def embed(
        self,
        chunks: Sequence[np.ndarray],
        batch_size: int,
        progress: Callable[[int], None] | None = None,
    ) -> list[np.ndarray]:
        """Frozen features of each chunk of preprocessed pixels, in one episode process.

        Args:
            chunks: pixel arrays ``[N, 3, H, W]``.
            batch_size: the embedding batch size (part of the feature cache's key).
            progress: called with the number of images embedded after each chunk.
        """
        expected = self.info.feature_dim if self.info is not None else None
        out: list[np.ndarray] = []
        with self._episode():
            self._send({"op": "embed", "batch_size": batch_size})
            for chunk in chunks:
                self._send({"op": "chunk"}, {"pixels": chunk.astype(np.float32)})
                _, arrays = self._expect_reply()
                features = arrays.get("features")
                if (
                    features is None
                    or features.dtype != np.float32
                    or features.ndim != 2
                    or len(features) != len(chunk)
                    or (expected and features.shape[1] != expected)
                    or not np.isfinite(features).all()
                ):
                    got = "nothing" if features is None else f"{features.dtype} {features.shape}"
                    raise self._abandon(
                        f"the plugin worker answered {got} as features of {len(chunk)} images"
                    )
                out.append(features)
                if progress is not None:
                    progress(len(chunk))
            self._send({"op": "end"})
        return out

    def fit(self, request: FitRequest) -> FitReply:
        """Fit every configuration and predict each query set; checks every reply."""
        arrays: dict[str, np.ndarray] = {
            "support": request.support.astype(np.float32),
            "labels": request.labels.astype(np.int64),
        }
        arrays.update({f"q{j}": q.astype(np.float32) for j, q in enumerate(request.query_sets)})
        if request.novel is not None:
            arrays["novel"] = request.novel.astype(np.float32)
        header: dict[str, Any] = {
            "op": "fit",
            "class_names": list(request.class_names),
            "configs": request.configs,
            "seeds": list(request.seeds),
            "novel_class_names": request.novel_class_names,
            "loop": request.loop,
            "kind": request.kind,
            "memoize": request.memoize,
        }
        reply, out = self._session(header, arrays)
        n_way = len(request.class_names)
        n = len(request.configs)
        query = [
            [
                self._logits(out, f"c{c}.q{j}", (len(q), n_way))
                for j, q in enumerate(request.query_sets)
            ]
            for c in range(n)
        ]
        novel = None
        if request.novel is not None and request.novel_class_names is not None:
            shape = (len(request.novel), len(request.novel_class_names))
            novel = [self._logits(out, f"c{c}.novel", shape) for c in range(n)]
        seconds = reply.get("seconds")
        records = reply.get("records")
        if not (isinstance(seconds, list) and len(seconds) == n):
            seconds = [0.0] * n
        if not (isinstance(records, list) and len(records) == n):
            records = [None] * n
        return FitReply(
            query,
            novel,
            [float(s) if isinstance(s, int | float) else 0.0 for s in seconds],
            [r if isinstance(r, dict) else None for r in records],
            int(reply.get("peak_bytes") or 0),
            checked_counts(reply.get("trainable"), n),
        )

    @staticmethod
    def _logits(out: dict[str, np.ndarray], key: str, shape: tuple[int, int]) -> np.ndarray:
        values = out.get(key)
        if values is None or values.shape != shape or values.dtype != np.float32:
            got = "nothing" if values is None else f"{values.dtype} {values.shape}"
            raise WorkerError(f"the plugin worker answered {got} for {key}, expected {shape}")
        if not np.isfinite(values).all():
            raise WorkerError(f"the plugin worker answered non-finite logits for {key}")
        return values

    def close(self) -> None:
        """Hand the worker back for reuse if it is healthy; else stop it."""
        process, self._process = self._process, None
        scratch, self._scratch = self._scratch, None
        if process is None:
            return
        idle = _Idle(process, scratch)
        if self._healthy and process.poll() is None and self._key:
            _give_back(self._key, idle)
        else:
            _stop(idle)
