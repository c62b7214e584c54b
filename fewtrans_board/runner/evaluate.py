"""Run every configuration of the grid on one episode and check what adapters return."""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from fewtrans_board.adapters.base import Adapter, AdapterConfig
from fewtrans_board.errors import FewtransError
from fewtrans_board.models.backbone import Backbone
from fewtrans_board.runner.episodes import EpisodeInputs


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
) -> list[ConfigOutcome]:
    """Fit and predict every configuration on one episode.

    Each configuration is seeded from (manifest, episode, configuration), so results do
    not depend on order, sharding or resumption.

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
            outcomes.append(ConfigOutcome(i, configs[i], seeds[i], logits, seconds, novel))
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
        del predictor
        outcomes.append(ConfigOutcome(i, config, seed, logits, time.perf_counter() - start, novel))
    return outcomes
