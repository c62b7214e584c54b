"""One episode process of the plugin worker: isolate, load the plugins, answer one session, exit.

A failure is answered, not raised: a plugin's own error travels as its message, anything else
with its type, each naming the resource limit it ran into.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import pickle
import sys
import time
import traceback
from typing import IO, Any

import numpy as np

from fewtrans_board.core.sandbox.episode import apply_limits, isolate_episode_process
from fewtrans_board.runner.worker.frames import read_frame, write_frame

EPISODE_MARK = "@episode@"
"""Stands for the episode in error messages; the caller, who knows which episode it sent,
puts ``episode N (stream S)`` there (the worker is never told)."""

PRELOADED: dict[str, Any] = {}
"""A built-in model the zygote loaded once (on CPU, one thread) for every episode process
(the zygote's set-up in :mod:`fewtrans_board.runner.worker.serve` fills it before any fork)."""


class TrainingTrapError(RuntimeError):
    """A ``training_free`` adapter called backward() or an optimiser step."""


def install_training_traps() -> None:
    """Make gradient steps raise, for adapters that declare ``training_free``."""
    import torch

    def trap(what: str) -> Any:
        def refuse(*_: Any, **__: Any) -> None:
            raise TrainingTrapError(
                f"the adapter declares training_free = True but called {what}; an adapter "
                "that trains must declare its learning-rate and epoch axes"
            )

        return refuse

    torch.Tensor.backward = trap("backward()")  # type: ignore[method-assign]
    torch.autograd.backward = trap("torch.autograd.backward()")
    torch.autograd.grad = trap("torch.autograd.grad()")
    torch.optim.Optimizer.step = trap("an optimiser step")  # type: ignore[method-assign]


class Session:
    """The loaded plugins, model and adapter of one episode process."""

    def __init__(self, settings: dict[str, Any]) -> None:
        self.settings = settings
        self.backbone: Any = None
        self.adapter: Any = None
        self.adapter_cls: Any = None
        self.options: Any = None
        self.installed: dict[str, str | None] = {}

    def _installed_pins(self) -> dict[str, str | None]:
        import importlib.metadata

        installed: dict[str, str | None] = {}
        for distribution in self.settings.get("pins") or []:
            try:
                installed[distribution] = importlib.metadata.version(distribution)
            except importlib.metadata.PackageNotFoundError:
                installed[distribution] = None
        return installed

    def _plugin_manager(self) -> Any:
        from fewtrans_board.registry.manager import get_plugin_manager, plugin_manager_for

        plugins = self.settings.get("plugins") or {}
        if "selection" in plugins:
            selection = pickle.loads(base64.b64decode(plugins["selection"]))
            return plugin_manager_for(selection)
        allow = plugins.get("allow")
        return get_plugin_manager(allow=allow) if allow is not None else get_plugin_manager()

    def load(self) -> None:
        """Load the plugins, the adapter and the model (raises what they raise)."""
        import torch

        from fewtrans_board.blocks.lockstep import FitOptions, parse_memory, settings_for
        from fewtrans_board.registry.lookup import Registry

        settings = self.settings
        device = settings.get("device", "cpu")
        self.options = FitOptions(
            settings_for(
                settings.get("batching", "auto"), device, parse_memory(settings.get("max_memory"))
            )
        )
        if settings.get("threads"):
            torch.set_num_threads(int(settings["threads"]))
        if settings.get("training_free"):
            install_training_traps()
        self.installed = self._installed_pins()
        registry = Registry.from_plugin_manager(self._plugin_manager())
        self.adapter_cls = registry.adapters.get(settings["adapter"]).obj
        self.adapter = self.adapter_cls()
        preloaded = PRELOADED.get("backbone")
        if preloaded is not None and registry.model(settings["model"]).source.builtin:
            self.backbone = preloaded
        else:
            self.backbone = registry.load_model(settings["model"], settings.get("weights"), device)

    def info(self) -> dict[str, Any]:
        """What the caller needs to know before it sends episodes."""
        from fewtrans_board.registry.files import files_sha256

        backbone = self.backbone
        return {
            "installed": self.installed,
            "files": {d: files_sha256(d) for d in self.settings.get("pins") or []},
            "schema": self.adapter_cls.schema(),
            "image_size": int(backbone.image_size),
            "weights_id": backbone.weights_id,
            "feature_dim": int(backbone.feature_dim),
            "model_info": dict(getattr(backbone, "info", {}) or {}),
            "device": str(backbone.device),
            "batches": bool(self.adapter_cls.overrides_fit_many()),
        }

    def embed(self, pixels: np.ndarray, batch_size: int) -> np.ndarray:
        """Frozen features of a chunk of preprocessed images."""
        import torch

        tensor = torch.from_numpy(pixels.copy()).to(self.backbone.device)
        with torch.no_grad():
            features = self.backbone.embed(tensor, batch_size)
        return np.ascontiguousarray(features.float().cpu().numpy(), dtype=np.float32)

    def fit(
        self, request: dict[str, Any], arrays: dict[str, np.ndarray]
    ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """Fit every configuration on the support set and predict each query set."""
        import torch

        from fewtrans_board.api.episode_data import ImageSet, SupportSet
        from fewtrans_board.runner.evaluate import fit_predictors, predict_logits, predictor_record
        from fewtrans_board.runner.worker.memory import folded_cuda_resets

        device = self.backbone.device
        memoize = bool(request.get("memoize", True))
        as_features = request.get("kind") == "features"

        def images(key: str) -> ImageSet:
            tensor = torch.from_numpy(arrays[key].copy()).to(device)
            if as_features:
                return ImageSet(features=tensor, memoize=memoize)
            return ImageSet(tensor, memoize=memoize)

        n_way = len(request["class_names"])
        support = SupportSet(
            images("support"), torch.from_numpy(arrays["labels"].astype(np.int64)), n_way
        )
        sets = sorted((k for k in arrays if k.startswith("q")), key=lambda k: int(k[1:]))
        queries = {k: images(k) for k in sets}
        novel = images("novel") if "novel" in arrays else None
        configs = [self.adapter_cls.Config.from_dict(c) for c in request["configs"]]
        name = getattr(self.adapter, "name", type(self.adapter).__name__)

        def where(i: int) -> str:
            return f"adapter {name!r}, {EPISODE_MARK}, configuration {i} {configs[i].to_dict()}"

        out: dict[str, np.ndarray] = {}
        seconds: list[float] = [0.0] * len(configs)
        records: list[dict[str, Any] | None] = [None] * len(configs)
        # Display-only provenance (runner/worker/trainable.py): nothing scores with it.
        trainable: list[int | None] = [None] * len(configs)
        fitted = fit_predictors(
            self.adapter,
            self.backbone,
            support,
            request["class_names"],
            configs,
            request["seeds"],
            where,
            loop=bool(request.get("loop")),
            options=self.options,
            trainable=trainable,
        )
        peaks = contextlib.ExitStack()
        # Lockstep's memory probe resets the CUDA peak: fold what came before it in.
        folded = (
            peaks.enter_context(folded_cuda_resets(str(device)))
            if str(device).startswith("cuda")
            else [0]
        )
        with peaks:
            for i, predictor, fit_seconds in fitted:
                start = time.perf_counter()
                for key, query in queries.items():
                    out[f"c{i}.{key}"] = predict_logits(predictor, query, n_way, where(i))
                if novel is not None:
                    out[f"c{i}.novel"] = predict_logits(
                        predictor, novel, 0, where(i), request["novel_class_names"]
                    )
                seconds[i] = fit_seconds + time.perf_counter() - start
                records[i] = predictor_record(predictor)
        peak = max(folded[0], _peak_bytes(device))
        reply = {"seconds": seconds, "records": records, "peak_bytes": peak, "trainable": trainable}
        return reply, {k: v.astype(np.float32) for k, v in out.items()}


def _peak_bytes(device: Any) -> int:
    """Peak memory of this episode process: the CUDA allocator's peak, else peak RSS."""
    import resource

    import torch

    if str(device).startswith("cuda"):
        return int(torch.cuda.max_memory_allocated(device))
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def _limit_hit(exc: BaseException, limits: dict[str, Any]) -> str | None:
    """Which resource limit an exception (or what caused it) ran into, in words."""
    seen: BaseException | None = exc
    while seen is not None:
        memory = limits.get("memory_bytes")
        if memory and (isinstance(seen, MemoryError) or "can't allocate memory" in str(seen)):
            return (
                f"the episode process reached its memory limit of {memory / (1 << 30):.1f} GiB; "
                "raise it with $FEWTRANS_BOARD_WORKER_MEMORY_GIB"
            )
        if isinstance(seen, OSError) and seen.errno == errno.EFBIG:
            return (
                "the episode process wrote a file larger than its limit of "
                f"{(limits.get('file_bytes') or 0) / (1 << 30):.2f} GiB; raise it with "
                "$FEWTRANS_BOARD_WORKER_FILE_GIB"
            )
        seen = seen.__cause__ or seen.__context__
    return None


def _error(exc: BaseException, settings: dict[str, Any]) -> dict[str, Any]:
    """The reply for a failed request; a user-facing error travels as its message alone."""
    from fewtrans_board.core.errors import FewtransError

    limit = _limit_hit(exc, settings.get("limits") or {})
    if isinstance(exc, FewtransError):
        text = str(exc) if limit is None else f"{limit}: {exc}"
        return {"ok": False, "error": text, "kind": "plugin"}
    traceback.print_exc(file=sys.stderr)
    text = f"{type(exc).__name__}: {exc}"
    return {"ok": False, "error": text if limit is None else f"{limit} ({text})"}


def _load_error(exc: BaseException, settings: dict[str, Any]) -> str:
    """Why loading failed; fewtrans-board's own errors already name the plugin at fault."""
    error = _error(exc, settings)
    if error.get("kind") == "plugin":
        return str(error["error"])
    return (
        f"loading model {settings['model']!r} and adapter {settings['adapter']!r} in the "
        f"plugin worker failed: {error['error']}"
    )


def run_session(requests: IO[bytes], replies: IO[bytes], settings: dict[str, Any]) -> None:
    """The life of one episode process: isolate, load, answer one session."""
    limits = settings.get("limits") or {}
    isolation = isolate_episode_process(int(limits.get("scratch_bytes") or (1 << 30)))
    apply_limits(limits.get("memory_bytes"), int(limits.get("file_bytes") or (4 << 30)))
    header, arrays = read_frame(requests)
    op = header.get("op")
    session = Session(settings)
    try:
        session.load()
    except Exception as exc:  # the caller turns it into a refusal naming the plugin
        error = _load_error(exc, settings) if op == "info" else None
        info = {"ok": True, "installed": session.installed, "load_error": error}
        write_frame(replies, info if op == "info" else _error(exc, settings))
        return
    try:
        if op == "info":
            write_frame(replies, {"ok": True, "isolation": isolation, **session.info()})
        elif op == "embed":
            batch_size = int(header.get("batch_size") or 256)
            while True:
                chunk, chunk_arrays = read_frame(requests)
                if chunk.get("op") != "chunk":
                    break
                features = session.embed(chunk_arrays["pixels"], batch_size)
                write_frame(replies, {"ok": True}, {"features": features})
        elif op == "fit":
            reply, out = session.fit(header, arrays)
            write_frame(replies, {"ok": True, **reply}, out)
        else:
            write_frame(replies, {"ok": False, "error": f"unknown session {op!r}"})
    except Exception as exc:  # reported to the caller, which decides what it means
        write_frame(replies, _error(exc, settings))
