"""Run an adapter in a separate worker process; the caller never imports plugin code.

The scoring process (submission verification) starts :mod:`fewtrans_board.runner.worker`,
sends it episode tensors and configurations, and receives logits through a pickle-free
frame format. Every reply is checked (shape, dtype, finiteness) before it is used.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fewtrans_board.errors import FewtransError
from fewtrans_board.runner.frames import FrameError, read_frame, write_frame


class WorkerError(FewtransError):
    """The plugin worker failed, refused a request or answered something malformed."""


@dataclass(frozen=True)
class WorkerInfo:
    """What the worker reported after loading the plugins.

    Attributes:
        installed: installed version of each pinned distribution (``None``: missing).
        load_error: why the model or adapter could not be loaded, if it could not.
        schema: the installed adapter's declarations (``Adapter.schema()``).
        image_size: the backbone's input size (the parent preprocesses images for it).
        weights_id: the loaded weights' identity.
    """

    installed: dict[str, str | None]
    load_error: str | None
    schema: dict[str, Any]
    image_size: int
    weights_id: str


@dataclass
class FitRequest:
    """One episode as the worker sees it: tensors in presented order, no labels of queries.

    Attributes:
        support: support pixels ``[S, 3, H, W]``.
        labels: support labels ``[S]``.
        class_names: class names in label order.
        configs: configuration values, one dict each.
        seeds: one torch seed per configuration.
        query_sets: query pixel sets, each predicted on its own.
        novel: novel-class query pixels (base-to-novel), if any.
        novel_class_names: their class names.
        loop: fit each configuration with ``fit``, never ``fit_many``.
    """

    support: np.ndarray
    labels: np.ndarray
    class_names: list[str]
    configs: list[dict[str, Any]]
    seeds: list[int]
    query_sets: list[np.ndarray]
    novel: np.ndarray | None = None
    novel_class_names: list[str] | None = None
    loop: bool = False


@dataclass
class FitReply:
    """Logits per configuration: ``query[c][j]`` of query set ``j``, ``novel[c]``."""

    query: list[list[np.ndarray]]
    novel: list[np.ndarray] | None


class IsolatedAdapter:
    """A plugin worker process holding one loaded model and adapter.

    Args:
        model: model name.
        adapter: adapter name.
        weights: local checkpoint for the model, if any.
        device: torch device in the worker.
        threads: torch threads in the worker (``None``: torch's default).
        allow: third-party plugins the worker may load (``None``: every installed one).
        training_free: trap gradient steps (the adapter is recorded as training-free).
        python: interpreter of the worker, e.g. an environment holding the pinned plugins.
        pins: distributions whose installed versions the worker reports.
        batching: the run's ``--batching`` mode, which the worker's fits follow.
    """

    def __init__(
        self,
        model: str,
        adapter: str,
        *,
        weights: str | None = None,
        device: str = "cpu",
        threads: int | None = None,
        allow: Sequence[str] | None = None,
        training_free: bool = False,
        python: str | None = None,
        pins: Sequence[str] = (),
        batching: str = "auto",
    ) -> None:
        self.hello = {
            "op": "hello",
            "model": model,
            "adapter": adapter,
            "weights": weights,
            "device": device,
            "threads": threads,
            "allow": list(allow) if allow is not None else None,
            "training_free": training_free,
            "pins": list(pins),
            "batching": batching,
        }
        self.python = python or sys.executable
        self._process: subprocess.Popen[bytes] | None = None
        self.info: WorkerInfo | None = None

    def __enter__(self) -> IsolatedAdapter:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def start(self) -> WorkerInfo:
        """Start the worker and load the plugins in it."""
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        try:
            self._process = subprocess.Popen(
                [self.python, "-m", "fewtrans_board.runner.worker"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env=env,
            )
        except OSError as exc:
            raise WorkerError(f"cannot start the plugin worker {self.python}: {exc}") from exc
        header, _ = self._ask(self.hello, {})
        try:
            installed = {
                str(k): None if v is None else str(v) for k, v in header["installed"].items()
            }
            error = header.get("load_error")
            self.info = WorkerInfo(
                installed=installed,
                load_error=None if error is None else str(error),
                schema=dict(header.get("schema") or {}),
                image_size=int(header.get("image_size") or 0),
                weights_id=str(header.get("weights_id") or ""),
            )
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise WorkerError(f"the plugin worker's hello is malformed: {exc}") from exc
        return self.info

    def _ask(
        self, header: dict[str, Any], arrays: dict[str, np.ndarray]
    ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        process = self._process
        if process is None or process.stdin is None or process.stdout is None:
            raise WorkerError("the plugin worker is not running")
        try:
            write_frame(process.stdin, header, arrays)
            reply, out = read_frame(process.stdout)
        except (FrameError, BrokenPipeError, OSError) as exc:
            code = process.poll()
            raise WorkerError(
                f"the plugin worker stopped answering ({exc}; exit status {code}); its "
                "stderr above says why"
            ) from exc
        if reply.get("ok") is not True:
            raise WorkerError(f"the plugin worker failed: {reply.get('error', '(no message)')}")
        return reply, out

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
        }
        _, out = self._ask(header, arrays)
        n_way = len(request.class_names)
        query = [
            [
                self._logits(out, f"c{c}.q{j}", (len(q), n_way))
                for j, q in enumerate(request.query_sets)
            ]
            for c in range(len(request.configs))
        ]
        novel = None
        if request.novel is not None and request.novel_class_names is not None:
            shape = (len(request.novel), len(request.novel_class_names))
            novel = [self._logits(out, f"c{c}.novel", shape) for c in range(len(request.configs))]
        return FitReply(query, novel)

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
        """Ask the worker to exit (killing it if it does not)."""
        process, self._process = self._process, None
        if process is None:
            return
        try:
            if process.stdin is not None:
                write_frame(process.stdin, {"op": "bye"})
                process.stdin.close()
            process.wait(timeout=30)
        except (OSError, FrameError, subprocess.TimeoutExpired):
            process.kill()
            process.wait()
