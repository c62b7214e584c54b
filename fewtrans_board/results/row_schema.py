"""Results schema v1 and the shard file format.

One row per (episode, configuration) with the query predictions and float16 logits, plus
one row per (episode, ensemble aggregation) derived from those stored logits. Logits are
stored after subtracting each query row's maximum and clamping to the float16 range: a
per-row shift changes neither the argmax, the softmax, nor the argmax of a logit average,
so every aggregation derived later is exact with respect to what is stored.
"""

from __future__ import annotations

from typing import Any

import numpy as np

SCHEMA_VERSION = 1
METADATA_KEY = b"fewtrans_board.results"
FLOAT16_MIN = float(np.finfo(np.float16).min)
CONFIG_KIND = "config"
ENSEMBLE_KIND = "ensemble"
ENSEMBLES = ("logit-mean", "vote")

SPLITS = ("base", "novel")
"""``novel`` rows exist for base-to-novel manifests: queries of unseen classes scored by name."""

COLUMNS = (
    "run_id",
    "dataset",
    "manifest_sha256",
    "episode",
    "stream_index",
    "split",
    "kind",
    "aggregation",
    "config_index",
    "config",
    "n_way",
    "n_query",
    "accuracy",
    "predictions",
    "logits",
    "seconds",
    "seed",
)


def arrow_schema() -> Any:
    """The pyarrow schema of result shards (:data:`COLUMNS`; text dictionary-encoded)."""
    import pyarrow as pa

    types = {
        "episode": pa.int32(),
        "stream_index": pa.int32(),
        "config_index": pa.int16(),
        "n_way": pa.int16(),
        "n_query": pa.int32(),
        "accuracy": pa.float64(),
        "predictions": pa.list_(pa.int16()),
        "logits": pa.list_(pa.float16()),
        "seconds": pa.float32(),
        "seed": pa.int64(),
    }
    text = pa.dictionary(pa.int32(), pa.string())
    return pa.schema([pa.field(name, types.get(name, text)) for name in COLUMNS])


def storable_logits(logits: np.ndarray) -> np.ndarray:
    """Shift each row to a maximum of 0 and clamp into float16: ``[Q, C]`` float16."""
    shifted = logits.astype(np.float64) - logits.max(axis=-1, keepdims=True)
    clipped: np.ndarray = np.clip(shifted, FLOAT16_MIN, 0.0).astype(np.float16)
    return clipped


def accuracy_percent(predictions: np.ndarray, labels: np.ndarray) -> float:
    """Share of correct predictions, in percent (FewTrans reports per-task percentages)."""
    return float((predictions == labels).mean() * 100.0)


def run_id_of(identity: dict[str, Any]) -> str:
    """Short hash naming a run (of its identity, as ``run.json`` records it)."""
    from fewtrans_board.core.canonical import canonical_json, sha256_text

    return sha256_text(canonical_json(identity))[:16]
