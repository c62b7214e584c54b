"""Result rows of one episode: one per configuration, one per ensemble aggregation."""

from __future__ import annotations

from typing import Any

import numpy as np

from fewtrans_board.canonical import canonical_json
from fewtrans_board.hpe.aggregate import logit_mean, vote
from fewtrans_board.results.schema import (
    CONFIG_KIND,
    ENSEMBLE_KIND,
    accuracy_percent,
    storable_logits,
)
from fewtrans_board.runner.episodes import EpisodeInputs
from fewtrans_board.runner.evaluate import ConfigOutcome


def episode_rows(
    run_id: str,
    dataset: str,
    manifest_sha256: str,
    inputs: EpisodeInputs,
    outcomes: list[ConfigOutcome],
) -> list[dict[str, Any]]:
    """Rows of one episode; ensembles are computed from the stored float16 logits."""
    episode = inputs.episode
    labels = inputs.query_labels
    base = {
        "run_id": run_id,
        "dataset": dataset,
        "manifest_sha256": manifest_sha256,
        "episode": episode.index,
        "stream_index": episode.stream_index,
        "n_way": episode.ways,
        "n_query": len(labels),
    }
    rows = []
    stored = []
    for outcome in outcomes:
        logits16 = storable_logits(outcome.logits)
        stored.append(logits16)
        predictions = outcome.logits.argmax(axis=1)
        rows.append(
            {
                **base,
                "kind": CONFIG_KIND,
                "aggregation": "",
                "config_index": outcome.index,
                "config": canonical_json(outcome.config.to_dict()),
                "accuracy": accuracy_percent(predictions, labels),
                "predictions": predictions.astype(np.int16).tolist(),
                "logits": logits16.ravel().tolist(),
                "seconds": outcome.seconds,
                "seed": outcome.seed,
            }
        )
    members = np.stack(stored)
    mean_logits = logit_mean(members)
    ensembles = {
        "logit-mean": (mean_logits.argmax(axis=1), storable_logits(mean_logits).ravel().tolist()),
        "vote": (vote(np.stack([r["predictions"] for r in rows]), episode.ways), None),
    }
    for name, (predictions, logits) in ensembles.items():
        rows.append(
            {
                **base,
                "kind": ENSEMBLE_KIND,
                "aggregation": name,
                "config_index": -1,
                "config": "",
                "accuracy": accuracy_percent(predictions, labels),
                "predictions": np.asarray(predictions).astype(np.int16).tolist(),
                "logits": logits,
                "seconds": 0.0,
                "seed": 0,
            }
        )
    return rows
