"""Fusing member predictions: logit averaging and majority vote (pinned tie rule)."""

from __future__ import annotations

import numpy as np


def vote(predictions: np.ndarray, n_way: int) -> np.ndarray:
    """Per-query majority vote over members' ``[M, Q]`` predicted labels.

    Ties go to the lowest class index among the most-voted classes (the value
    ``torch.mode`` returns on CPU for the reference implementation).

    Returns:
        ``[Q]`` labels.
    """
    counts = np.zeros((predictions.shape[1], n_way), dtype=np.int64)
    for member in predictions:
        counts[np.arange(len(member)), member] += 1
    winners: np.ndarray = counts.argmax(axis=1)  # argmax picks the first (lowest) of ties
    return winners


def fuse(
    aggregation: str, *, logits: np.ndarray, predictions: np.ndarray, n_way: int
) -> tuple[np.ndarray, np.ndarray | None]:
    """Fuse the members of one episode with an ensemble aggregation.

    Args:
        aggregation: ``"logit-mean"`` or ``"vote"``.
        logits: the members' ``[M, Q, C]`` logits (as stored, float16 after the row shift).
        predictions: the members' ``[M, Q]`` predicted labels.
        n_way: number of classes ``C``.

    Returns:
        ``(predictions [Q], fused logits [Q, C] or None)``; only ``logit-mean`` has logits.

    Raises:
        ValueError: an unknown aggregation.
    """
    if aggregation == "logit-mean":
        mean: np.ndarray = logits.astype(np.float32).mean(axis=0)
        fused: np.ndarray = mean.argmax(axis=1)
        return fused, mean
    if aggregation == "vote":
        return vote(predictions, n_way), None
    raise ValueError(f"unknown ensemble aggregation {aggregation!r}; known: logit-mean, vote")
