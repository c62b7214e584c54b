"""Fusing member predictions: logit averaging and majority vote (pinned tie rule)."""

from __future__ import annotations

import numpy as np


def logit_mean(logits: np.ndarray) -> np.ndarray:
    """Mean over members of ``[M, Q, C]`` logits, in float32: ``[Q, C]``."""
    mean: np.ndarray = logits.astype(np.float32).mean(axis=0)
    return mean


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
