"""Cheating adapters. Each tries one way to a higher number than its method earns.

Registered through a fake distribution (``fewtrans-redteam``) so that evaluate records a
pinned plugin and a verification worker can load the same code.
"""

from __future__ import annotations

import gc
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from fewtrans_board import Adapter, AdapterConfig, hookimpl, hparam


class _Predictor:
    def __init__(self, predict: Callable[[Any], torch.Tensor]) -> None:
        self.predict = predict


def centroid_logits(backbone: Any, support: Any, query: Any) -> torch.Tensor:
    feats = support.images.features(backbone)
    centroids = torch.stack([feats[support.labels == c].mean(0) for c in range(support.n_way)])
    return -torch.cdist(query.features(backbone), centroids)


class _TrainingFree(Adapter):
    description = "red-team adapter"
    trains = "nothing"
    frozen_backbone = True
    training_free = True

    @dataclass(frozen=True)
    class Config(AdapterConfig):
        pass


class PositionOracle(_TrainingFree):
    """Reads the label from the query's position (manifests group queries by class)."""

    name = "redteam-position"

    def fit(self, backbone, support, class_names, config):  # type: ignore[no-untyped-def]
        n_way = support.n_way

        def predict(query):  # type: ignore[no-untyped-def]
            per_class = max(1, len(query) // n_way)
            labels = torch.clamp(torch.arange(len(query)) // per_class, max=n_way - 1)
            return torch.nn.functional.one_hot(labels, n_way).float()

        return _Predictor(predict)


class PathPeeker(_TrainingFree):
    """Searches everything reachable from its inputs for item ids or paths."""

    name = "redteam-peek"
    found: ClassVar[list[str]] = []

    def fit(self, backbone, support, class_names, config):  # type: ignore[no-untyped-def]
        def reachable_strings(root: object) -> list[str]:
            seen: set[int] = set()
            stack, strings = [root], []
            while stack:
                obj = stack.pop()
                if id(obj) in seen or isinstance(obj, type) or inspect.ismodule(obj):
                    continue
                seen.add(id(obj))
                if isinstance(obj, str):
                    if "/" in obj or obj.endswith(".png"):
                        strings.append(obj)
                    continue
                if isinstance(obj, torch.Tensor) or obj is backbone:
                    continue
                stack.extend(gc.get_referents(obj))
                for cell in getattr(obj, "__closure__", None) or ():
                    stack.append(cell.cell_contents)
            return strings

        PathPeeker.found.extend(reachable_strings(support))

        def predict(query):  # type: ignore[no-untyped-def]
            PathPeeker.found.extend(reachable_strings(query))
            return centroid_logits(backbone, support, query)

        return _Predictor(predict)


class StackPeeker(_TrainingFree):
    """Finds the hidden query labels in its callers' frames (only possible in-process)."""

    name = "redteam-stack"

    def fit(self, backbone, support, class_names, config):  # type: ignore[no-untyped-def]
        def predict(query):  # type: ignore[no-untyped-def]
            frame = inspect.currentframe()
            while frame is not None:
                inputs = frame.f_locals.get("inputs")
                if hasattr(inputs, "query_labels") and len(inputs.query_labels) == len(query):
                    labels = torch.as_tensor(inputs.query_labels[inputs.query_order])
                    return torch.nn.functional.one_hot(labels, support.n_way).float()
                frame = frame.f_back
            return centroid_logits(backbone, support, query)

        return _Predictor(predict)


class BalancedAssignment(_TrainingFree):
    """Transductive without saying so: balances class assignments over the query batch."""

    name = "redteam-balanced"

    def fit(self, backbone, support, class_names, config):  # type: ignore[no-untyped-def]
        def predict(query):  # type: ignore[no-untyped-def]
            logits = centroid_logits(backbone, support, query)
            plan = torch.softmax(logits, dim=1)
            for _ in range(10):  # Sinkhorn: equal mass per class across the queries
                plan = plan / plan.sum(dim=0, keepdim=True)
                plan = plan / plan.sum(dim=1, keepdim=True)
            return torch.log(plan + 1e-9)

        return _Predictor(predict)


class FitManyBooster(_TrainingFree):
    """Its batched fit_many returns better predictors than fit would."""

    name = "redteam-fitmany"

    def fit(self, backbone, support, class_names, config):  # type: ignore[no-untyped-def]
        noise = torch.randn(support.n_way) * 5.0
        return _Predictor(lambda q: centroid_logits(backbone, support, q) + noise)

    def fit_many(self, backbone, support, class_names, configs, seeds):  # type: ignore[no-untyped-def]
        return [_Predictor(lambda q: centroid_logits(backbone, support, q)) for _ in configs]


def _train_head(backbone: Any, support: Any, lr: float, epochs: int) -> _Predictor:
    feats = support.images.features(backbone)
    head = torch.nn.Linear(feats.shape[1], support.n_way)
    optimiser = torch.optim.Adam(head.parameters(), lr=lr)
    for _ in range(epochs):
        optimiser.zero_grad()
        torch.nn.functional.cross_entropy(head(feats), support.labels).backward()
        optimiser.step()
    return _Predictor(lambda q: head(q.features(backbone)))


class NoAxisTrainer(Adapter):
    """Trains a head with its own learning rate but declares no HPE axis."""

    name = "redteam-noaxis"
    description = "red-team adapter"
    trains = "linear head"
    frozen_backbone = True

    @dataclass(frozen=True)
    class Config(AdapterConfig):
        lr: float = hparam(0.05, "learning rate (not declared as an axis)")
        epochs: int = hparam(20, "epochs (not declared as an axis)")

    def fit(self, backbone, support, class_names, config):  # type: ignore[no-untyped-def]
        return _train_head(backbone, support, config.lr, config.epochs)


class TrainingFreeLiar(NoAxisTrainer):
    """The same trainer, claiming to train nothing."""

    name = "redteam-liar"
    training_free = True


CHEATERS: tuple[type[Adapter], ...] = (
    PositionOracle,
    PathPeeker,
    StackPeeker,
    BalancedAssignment,
    FitManyBooster,
    NoAxisTrainer,
    TrainingFreeLiar,
)


@hookimpl
def register_adapters(register: Callable[[type[Adapter]], None]) -> None:
    """Register every cheater."""
    for adapter in CHEATERS:
        register(adapter)
