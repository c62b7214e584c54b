"""The plugin worker: the only process of a verification that imports third-party plugins.

Started by :class:`fewtrans_board.runner.isolated.IsolatedAdapter` as
``python -m fewtrans_board.runner.worker`` (possibly in another environment holding the
submission's pinned plugins). It reads frames (:mod:`fewtrans_board.runner.frames`) on
stdin and answers on stdout:

- ``hello`` {model, adapter, weights, device, threads, allow}: load the plugins, model and
  adapter; answer the adapter's schema and the backbone's input size.
- ``fit`` {class_names, configs, seeds, novel_class_names, loop} with arrays ``support``,
  ``labels`` and query sets ``q0``, ``q1``, ... (and ``novel``): fit every configuration
  and answer logits ``c<i>.q<j>`` (and ``c<i>.novel``) per configuration and query set;
  ``loop`` fits each configuration with ``fit`` even where the adapter has ``fit_many``.
- ``bye``: exit.

The worker never sees item ids, labels of queries, episode indices or the order the
parent presented; it returns logits and the parent scores them.
"""

from __future__ import annotations

import os
import sys
import traceback
from typing import IO, Any

import numpy as np

from fewtrans_board.runner.frames import read_frame, write_frame


class TrainingTrapError(RuntimeError):
    """A ``training_free`` adapter called backward() or an optimiser step."""


def install_training_traps() -> None:
    """Make gradient steps raise, for adapters that declare ``training_free``."""
    import torch
    import torch._dynamo

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


class Worker:
    """State of one worker process: the loaded backbone and adapter."""

    def __init__(self) -> None:
        self.backbone: Any = None
        self.adapter: Any = None
        self.adapter_cls: Any = None
        self.lockstep: Any = None  # LockstepSettings once loaded (torch-free import here)

    def hello(self, request: dict[str, Any]) -> dict[str, Any]:
        """Report the installed pinned distributions, then load plugins, model and adapter."""
        import importlib.metadata

        installed: dict[str, str | None] = {}
        for distribution in request.get("pins") or []:
            try:
                installed[distribution] = importlib.metadata.version(distribution)
            except importlib.metadata.PackageNotFoundError:
                installed[distribution] = None
        try:
            loaded = self._load(request)
        except Exception as exc:  # the parent turns it into a submission error
            traceback.print_exc(file=sys.stderr)
            return {"installed": installed, "load_error": f"{type(exc).__name__}: {exc}"}
        return {"installed": installed, **loaded}

    def _load(self, request: dict[str, Any]) -> dict[str, Any]:
        import torch

        from fewtrans_board.adapters.lockstep import MemoryBudget, settings_for
        from fewtrans_board.plugins import get_plugin_manager
        from fewtrans_board.registry import Registry

        device = request.get("device", "cpu")
        self.lockstep = settings_for(request.get("batching", "auto"), device, MemoryBudget())
        if request.get("threads"):
            torch.set_num_threads(int(request["threads"]))
        if request.get("training_free"):
            install_training_traps()
        allow = request.get("allow")
        pm = get_plugin_manager(allow=allow) if allow is not None else get_plugin_manager()
        registry = Registry.from_plugin_manager(pm)
        self.adapter_cls = registry.adapters.get(request["adapter"]).obj
        self.adapter = self.adapter_cls()
        self.backbone = registry.load_model(request["model"], request.get("weights"), device)
        return {
            "schema": self.adapter_cls.schema(),
            "image_size": int(self.backbone.image_size),
            "weights_id": self.backbone.weights_id,
        }

    def fit(
        self, request: dict[str, Any], arrays: dict[str, np.ndarray]
    ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """Fit every configuration on the support set and predict each query set."""
        import torch

        from fewtrans_board.adapters.episode_data import ImageSet, SupportSet
        from fewtrans_board.adapters.lockstep import settings_in_force
        from fewtrans_board.runner.evaluate import fit_predictors, predict_logits

        n_way = len(request["class_names"])
        support = SupportSet(
            ImageSet(torch.from_numpy(arrays["support"].copy())),
            torch.from_numpy(arrays["labels"].astype(np.int64)),
            n_way,
        )
        sets = sorted((k for k in arrays if k.startswith("q")), key=lambda k: int(k[1:]))
        queries = {k: ImageSet(torch.from_numpy(arrays[k].copy())) for k in sets}
        novel = ImageSet(torch.from_numpy(arrays["novel"].copy())) if "novel" in arrays else None
        configs = [self.adapter_cls.Config.from_dict(c) for c in request["configs"]]
        out: dict[str, np.ndarray] = {}
        with settings_in_force(self.lockstep):
            fitted = fit_predictors(
                self.adapter,
                self.backbone,
                support,
                request["class_names"],
                configs,
                request["seeds"],
                lambda i: f"configuration {i}",
                loop=bool(request.get("loop")),
            )
        for i, predictor, _ in fitted:
            for key, query in queries.items():
                out[f"c{i}.{key}"] = predict_logits(predictor, query, n_way, f"configuration {i}")
            if novel is not None:
                out[f"c{i}.novel"] = predict_logits(
                    predictor, novel, 0, f"configuration {i}", request["novel_class_names"]
                )
        return {}, {k: v.astype(np.float32) for k, v in out.items()}


def serve(requests: IO[bytes], replies: IO[bytes]) -> None:
    """Answer requests until ``bye`` or the end of the input."""
    worker = Worker()
    while True:
        header, arrays = read_frame(requests)
        op = header.get("op")
        if op == "bye":
            return
        try:
            if op == "hello":
                write_frame(replies, {"ok": True, **worker.hello(header)})
            elif op == "fit":
                reply, out = worker.fit(header, arrays)
                write_frame(replies, {"ok": True, **reply}, out)
            else:
                write_frame(replies, {"ok": False, "error": f"unknown request {op!r}"})
        except Exception as exc:  # reported to the parent, which decides what it means
            traceback.print_exc(file=sys.stderr)
            write_frame(replies, {"ok": False, "error": f"{type(exc).__name__}: {exc}"})


def main() -> None:
    """Serve on stdin/stdout; whatever plugins print goes to stderr."""
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    serve(sys.stdin.buffer, replies)


if __name__ == "__main__":
    main()
