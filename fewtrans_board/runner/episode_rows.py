"""Result rows of one episode: one per configuration, one per ensemble aggregation."""

from __future__ import annotations

from typing import Any

import numpy as np

from fewtrans_board.core.canonical import canonical_json
from fewtrans_board.hpe.aggregate import fuse
from fewtrans_board.results.row_schema import (
    CONFIG_KIND,
    ENSEMBLE_KIND,
    ENSEMBLES,
    accuracy_percent,
    storable_logits,
)
from fewtrans_board.runner.evaluate import ConfigOutcome
from fewtrans_board.runner.presentation import EpisodeInputs


def episode_rows(
    run_id: str,
    dataset: str,
    manifest_sha256: str,
    inputs: EpisodeInputs,
    outcomes: list[ConfigOutcome],
) -> list[dict[str, Any]]:
    """Rows of one episode (and, for base-to-novel, of its novel queries).

    Ensembles are computed from the stored float16 logits.
    """
    episode = inputs.episode
    base = {
        "run_id": run_id,
        "dataset": dataset,
        "manifest_sha256": manifest_sha256,
        "episode": episode.index,
        "stream_index": episode.stream_index,
    }
    rows = _split_rows(
        base, "base", inputs.query_labels, episode.ways, [(o, o.logits) for o in outcomes]
    )
    if inputs.novel_labels is not None and inputs.novel_class_names is not None:
        novel = [(o, o.novel_logits) for o in outcomes if o.novel_logits is not None]
        rows += _split_rows(
            base, "novel", inputs.novel_labels, len(inputs.novel_class_names), novel
        )
    return rows


def _split_rows(
    base: dict[str, Any],
    split: str,
    labels: np.ndarray,
    n_way: int,
    members: list[tuple[ConfigOutcome, np.ndarray]],
) -> list[dict[str, Any]]:
    common = {**base, "split": split, "n_way": n_way, "n_query": len(labels)}
    stored = [storable_logits(logits) for _, logits in members]
    member_predictions = [logits.argmax(axis=1) for _, logits in members]
    rows = [
        {
            **common,
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
        for (outcome, _), logits16, predictions in zip(
            members, stored, member_predictions, strict=True
        )
    ]
    stacked_logits, stacked_predictions = np.stack(stored), np.stack(member_predictions)
    for name in ENSEMBLES:
        predictions, fused_logits = fuse(
            name, logits=stacked_logits, predictions=stacked_predictions, n_way=n_way
        )
        rows.append(
            {
                **common,
                "kind": ENSEMBLE_KIND,
                "aggregation": name,
                "config_index": -1,
                "config": "",
                "accuracy": accuracy_percent(predictions, labels),
                "predictions": predictions.astype(np.int16).tolist(),
                "logits": None
                if fused_logits is None
                else storable_logits(fused_logits).ravel().tolist(),
                "seconds": 0.0,
                "seed": 0,
            }
        )
    return rows
