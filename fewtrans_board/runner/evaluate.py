"""Run every configuration of the grid on one episode and check what adapters return."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from fewtrans_board.adapters.base import Adapter, AdapterConfig
from fewtrans_board.errors import FewtransError
from fewtrans_board.models.backbone import Backbone
from fewtrans_board.runner.episodes import EpisodeInputs

Observer = Callable[[int, AdapterConfig, Any], None]
"""``observe(config index, config, predictor)``: an opt-in look at each fitted predictor.

Analyses that need adapted weights (``analyze delta-w``, ``analyze cka``) pass one for the
episodes they sample; normal runs pass none and keep nothing.
"""


class EvaluationError(FewtransError):
    """An adapter misbehaved on an episode; the message names episode and configuration."""


@dataclass
class ConfigOutcome:
    """Logits of one configuration on one episode."""

    index: int
    config: AdapterConfig
    seed: int
    logits: np.ndarray
    seconds: float
    novel_logits: np.ndarray | None = None
    record: dict[str, Any] | None = None


def predictor_record(predictor: Any) -> dict[str, Any] | None:
    """What a predictor asks to keep in the results' provenance (its ``record`` dict).

    Adapters whose fit makes data-dependent choices (IMS-f's layer selection) expose them as
    a JSON-friendly ``record`` attribute; the runner stores it per episode and configuration.
    """
    record = getattr(predictor, "record", None)
    return dict(record) if isinstance(record, dict) else None


def config_seed(manifest_sha256: str, episode: int, config: AdapterConfig) -> int:
    """Deterministic torch seed of an (episode, configuration) pair."""
    text = f"{manifest_sha256}:{episode}:{config.digest()}"
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") >> 1


def _checked(logits: Any, expected: tuple[int, int], where: str) -> np.ndarray:
    import torch

    if not isinstance(logits, torch.Tensor):
        raise EvaluationError(
            f"{where}: predict returned {type(logits).__name__}, expected a torch.Tensor"
        )
    if tuple(logits.shape) != expected:
        raise EvaluationError(
            f"{where}: adapter returned logits of shape {tuple(logits.shape)}, expected {expected} "
            "(queries x ways)"
        )
    array = logits.detach().float().cpu().numpy()
    if not np.isfinite(array).all():
        bad = int((~np.isfinite(array)).any(axis=1).sum())
        raise EvaluationError(
            f"{where}: adapter returned non-finite logits (NaN or inf) for {bad} queries"
        )
    return array


def _predict(
    predictor: Any, inputs: EpisodeInputs, where: str
) -> tuple[np.ndarray, np.ndarray | None]:
    """Base logits, and novel-class logits for base-to-novel episodes."""
    import torch

    with torch.no_grad():
        logits = _checked(
            predictor.predict(inputs.query), (len(inputs.query), inputs.episode.ways), where
        )
        if inputs.novel_query is None or inputs.novel_class_names is None:
            return logits, None
        if not hasattr(predictor, "predict_names"):
            raise EvaluationError(
                f"{where}: base-to-novel episodes need a predictor with predict_names(query, "
                "class_names) that scores unseen classes by name (CLIP-style adapters)"
            )
        novel = predictor.predict_names(inputs.novel_query, inputs.novel_class_names)
        expected = (len(inputs.novel_query), len(inputs.novel_class_names))
        return logits, _checked(novel, expected, f"{where} (novel classes)")


def evaluate_episode(
    adapter: Adapter,
    backbone: Backbone,
    inputs: EpisodeInputs,
    configs: list[AdapterConfig],
    manifest_sha256: str,
    observe: Observer | None = None,
) -> list[ConfigOutcome]:
    """Fit and predict every configuration on one episode.

    Each configuration is seeded from (manifest, episode, configuration), so results do
    not depend on order, sharding or resumption.

    Args:
        adapter: the adapter instance.
        backbone: the loaded backbone.
        inputs: the episode's support set, query images and hidden labels.
        configs: the HPE grid.
        manifest_sha256: the manifest's content hash (part of every seed).
        observe: called with each fitted predictor after it predicted (opt-in; it does not
            change what is computed).

    Raises:
        EvaluationError: wrong shape, wrong type or non-finite logits, naming the episode
            and configuration.
    """
    import torch

    episode = inputs.episode
    seeds = [config_seed(manifest_sha256, episode.index, c) for c in configs]

    def where(i: int) -> str:
        return (
            f"episode {episode.index} (stream {episode.stream_index}), configuration {i} "
            f"{configs[i].to_dict()}"
        )

    outcomes = []
    if adapter.overrides_fit_many():
        start = time.perf_counter()
        predictors = adapter.fit_many(backbone, inputs.support, inputs.class_names, configs, seeds)
        fit_seconds = (time.perf_counter() - start) / max(len(configs), 1)
        for i, predictor in enumerate(predictors):
            start = time.perf_counter()
            logits, novel = _predict(predictor, inputs, where(i))
            seconds = fit_seconds + time.perf_counter() - start
            record = predictor_record(predictor)
            outcomes.append(ConfigOutcome(i, configs[i], seeds[i], logits, seconds, novel, record))
            if observe is not None:
                observe(i, configs[i], predictor)
        return outcomes
    for i, (config, seed) in enumerate(zip(configs, seeds, strict=True)):
        start = time.perf_counter()
        torch.manual_seed(seed)
        try:
            predictor = adapter.fit(backbone, inputs.support, inputs.class_names, config)
            logits, novel = _predict(predictor, inputs, where(i))
        except EvaluationError:
            raise
        except FewtransError as exc:
            raise EvaluationError(f"{where(i)}: {exc}") from exc
        seconds = time.perf_counter() - start
        record = predictor_record(predictor)
        if observe is not None:
            observe(i, config, predictor)
        del predictor
        outcomes.append(ConfigOutcome(i, config, seed, logits, seconds, novel, record))
    return outcomes
