"""Adapters that break the rules in specific ways, for runner and validate tests."""

from __future__ import annotations

import inspect
import random
from dataclasses import dataclass

import torch

from fewtrans_board import Adapter, AdapterConfig, hookimpl, hparam


class _Logits:
    def __init__(self, fn):  # type: ignore[no-untyped-def]
        self.predict = fn


class _Base(Adapter):
    description = "test adapter"
    trains = "nothing (axes declared but unused)"
    frozen_backbone = True

    @dataclass(frozen=True)
    class Config(AdapterConfig):
        lr: float = hparam(0.1, "unused learning rate", hpe="lr")
        epochs: int = hparam(1, "unused epoch count", hpe="epochs")


class NaNOnThirdEpisode(_Base):
    """NaN logits on episode 3 of the frozen digits manifest only."""

    name = "nan-late"

    def fit(self, backbone, support, class_names, config):  # type: ignore[no-untyped-def]
        feats = support.images.features(backbone)
        centroids = torch.stack([feats[support.labels == c].mean(0) for c in range(support.n_way)])
        poison = len(support) == 7  # episode 3 of the frozen digits manifest has 7 support items

        def predict(query):  # type: ignore[no-untyped-def]
            logits = -torch.cdist(query.features(backbone), centroids)
            return logits * float("nan") if poison else logits

        return _Logits(predict)


class WrongShape(_Base):
    name = "wrong-shape"

    def fit(self, backbone, support, class_names, config):  # type: ignore[no-untyped-def]
        return _Logits(lambda q: torch.zeros(len(q), support.n_way + 1))


class Unseeded(_Base):
    """Uses Python's global random module, which the runner does not seed."""

    name = "unseeded"

    def fit(self, backbone, support, class_names, config):  # type: ignore[no-untyped-def]
        noise = random.random()
        return _Logits(
            lambda q: torch.full((len(q), support.n_way), noise) + torch.arange(support.n_way)
        )


class ReadsQueryLabels(_Base):
    """Cheats: finds the runner's hidden query labels on the call stack."""

    name = "peeks-labels"

    def fit(self, backbone, support, class_names, config):  # type: ignore[no-untyped-def]
        labels = None
        for frame in inspect.stack():
            inputs = frame.frame.f_locals.get("inputs")
            if inputs is not None and hasattr(inputs, "query_labels"):
                labels = torch.as_tensor(inputs.query_labels)
                break

        def predict(query):  # type: ignore[no-untyped-def]
            if labels is None:  # not under the runner (e.g. the toy contract check)
                return torch.zeros(len(query), support.n_way)
            return torch.nn.functional.one_hot(labels, support.n_way).float()

        return _Logits(predict)


ADAPTERS = (NaNOnThirdEpisode, WrongShape, Unseeded, ReadsQueryLabels)


@hookimpl
def register_adapters(register):  # type: ignore[no-untyped-def]
    """Register the misbehaving adapters."""
    for adapter in ADAPTERS:
        register(adapter)
