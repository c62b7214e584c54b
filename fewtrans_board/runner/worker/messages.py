"""The messages between the caller and a plugin worker: settings, replies and errors.

:mod:`fewtrans_board.runner.worker.isolated` sends them; ``evaluate``, ``preflight`` and
verification build :class:`WorkerSettings` the same way, so a worker cannot tell them apart.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fewtrans_board.core.errors import FewtransError
from fewtrans_board.core.sandbox import Isolation, Limits
from fewtrans_board.core.sandbox.policy import inside_path


class WorkerError(FewtransError):
    """The plugin worker failed, refused a request or answered something malformed.

    Attributes:
        plugin_message: the user-facing error plugin code raised (a contract breach, a
            :class:`~fewtrans_board.core.plugin_calls.PluginCallError`), if that is what failed.
    """

    def __init__(self, message: str, plugin_message: str | None = None) -> None:
        super().__init__(message)
        self.plugin_message = plugin_message


@dataclass(frozen=True)
class WorkerSettings:
    """Everything that decides how a worker loads and runs plugins.

    The ``hello`` frame holds all but the adapter, which goes with each ``spawn``: one worker
    (its plugins, model and limits) serves every adapter it is asked for, so a run of
    another adapter on the same plugins and model reuses an idle worker instead of starting
    one (a Python process importing torch, seconds).

    Attributes:
        model: model name.
        adapter: adapter name.
        weights: local checkpoint for the model, if any (bound read-only).
        device: torch device of the episode processes.
        threads: torch threads of each episode process.
        plugins: ``{"allow": [...]}`` (distributions to load) or ``{"selection": ...}`` (the
            caller's pickled plugin selection, from ``evaluate`` only).
        training_free: trap gradient steps (the adapter is recorded as training-free).
        pins: distributions whose installed versions the worker reports.
        batching: the run's ``--batching`` mode.
        max_memory: the run's ``--max-memory`` for lockstep chunking.
        memoize: let image sets keep features computed from pixels.
        preload: libraries the worker imports before forking (the model family's).
        plugin_paths: folders appended to the worker's ``sys.path``.
        bind_paths: plugin code the sandbox shows read-only (package folders, files).
        isolation: ``sandbox`` or ``process``.
        python: the worker's interpreter (default: this one).
        forbidden: paths the worker must never see (refused if a bound path contains one).
        limits: resource limits of each episode process.
    """

    model: str
    adapter: str
    weights: str | None = None
    device: str = "cpu"
    threads: int | None = None
    plugins: dict[str, Any] = field(default_factory=lambda: {"allow": []})
    training_free: bool = False
    pins: tuple[str, ...] = ()
    batching: str = "auto"
    max_memory: str | None = None
    memoize: bool = True
    preload: tuple[str, ...] = ()
    plugin_paths: tuple[str, ...] = ()
    bind_paths: tuple[str, ...] = ()
    isolation: Isolation = Isolation.SANDBOX
    python: str | None = None
    forbidden: tuple[str, ...] = ()
    limits: Limits = field(default_factory=Limits)

    def hello(self) -> dict[str, Any]:
        """The worker's configuration frame (paths as the worker sees them, no episode data)."""
        moved = inside_path if self.isolation is Isolation.SANDBOX else os.path.normpath
        return {
            "op": "hello",
            "model": self.model,
            "weights": moved(self.weights) if self.weights else None,
            "device": self.device,
            "threads": self.threads,
            "plugins": self.plugins,
            "pins": list(self.pins),
            "batching": self.batching,
            "max_memory": self.max_memory,
            "preload": list(self.preload),
            "plugin_paths": [moved(p) for p in self.plugin_paths],
            "limits": self.limits.to_dict(),
        }

    def spawn(self) -> dict[str, Any]:
        """The frame that starts an episode process for this adapter."""
        return {"op": "spawn", "adapter": self.adapter, "training_free": self.training_free}


@dataclass(frozen=True)
class WorkerInfo:
    """What an episode process reported after loading the plugins.

    Attributes:
        installed: installed version of each pinned distribution (``None``: missing).
        load_error: why the model or adapter could not be loaded, if it could not.
        schema: the installed adapter's declarations (``Adapter.schema()``).
        image_size: the backbone's input size (the caller preprocesses images for it).
        weights_id: the loaded weights' identity.
        feature_dim: the backbone's feature dimension.
        model_info: the backbone's ``info`` (provenance).
        device: the backbone's device.
        isolation: how episode processes are kept apart (``namespaces``, or why not).
        batches: the adapter batches its configurations (overrides ``fit_many``).
        files: sha256 of the installed files of each pinned distribution, as the episode
            process sees them (``None``: not found; :mod:`fewtrans_board.registry.files`).
    """

    installed: dict[str, str | None]
    load_error: str | None
    schema: dict[str, Any] = field(default_factory=dict)
    image_size: int = 0
    weights_id: str = ""
    feature_dim: int = 0
    model_info: dict[str, Any] = field(default_factory=dict)
    device: str = "cpu"
    isolation: str = ""
    batches: bool = False
    files: dict[str, str | None] = field(default_factory=dict)


@dataclass
class FitRequest:
    """One episode as the worker sees it: tensors in presented order, no labels of queries.

    Attributes:
        support: support pixels ``[S, 3, H, W]`` or frozen features ``[S, D]``.
        labels: support labels ``[S]``.
        class_names: class names in label order.
        configs: configuration values, one dict each.
        seeds: one torch seed per configuration.
        query_sets: query sets (pixels or features like ``support``), each predicted alone.
        novel: novel-class queries (base-to-novel), if any.
        novel_class_names: their class names.
        loop: fit each configuration with ``fit``, never ``fit_many``.
        kind: ``pixels`` or ``features`` (what ``support`` and the queries hold).
        memoize: let image sets keep features computed from pixels.
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
    kind: str = "pixels"
    memoize: bool = True


@dataclass
class FitReply:
    """Logits per configuration: ``query[c][j]`` of query set ``j``, ``novel[c]``.

    Attributes:
        seconds: fit and predict seconds per configuration.
        records: what each predictor asked to keep (``predictor.record``), or ``None``.
        peak_bytes: the episode process's peak memory (CUDA allocator or resident set).
        trainable: each configuration's trainable parameter count as the episode process
            reported it (``None``: not reported or malformed); display-only provenance
            (:mod:`~fewtrans_board.runner.worker.trainable`).
    """

    query: list[list[np.ndarray]]
    novel: list[np.ndarray] | None
    seconds: list[float] = field(default_factory=list)
    records: list[dict[str, Any] | None] = field(default_factory=list)
    peak_bytes: int = 0
    trainable: list[int | None] = field(default_factory=list)
