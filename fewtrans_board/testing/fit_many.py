"""The house judgement of ``fit_many`` against ``fit``: accuracy, paired, one-sided.

Preflight, verification and the contract check all ask the same question of a batched
fit: does it score significantly above fitting each configuration alone? Float rounding
makes the two paths differ in logits (by 0.2 after float32 training at lr 1.0 on real
data), so they are compared by accuracy, never by an absolute tolerance on logits.
"""

from __future__ import annotations

import numpy as np

from fewtrans_board.results.schema import accuracy_percent
from fewtrans_board.stats.bounds import lower_bound

FIT_MANY_MARGIN = 0.5
"""Accuracy points by which ``fit_many`` may exceed ``fit`` before the paired test flags it."""
FIT_MANY_CONFIDENCE = 0.99

Logits = list[list[np.ndarray]]
"""``logits[episode position][configuration]`` in manifest query order."""


def fit_many_gain(batched: Logits, looped: Logits, labels: list[np.ndarray]) -> tuple[float, float]:
    """Mean accuracy gain of ``fit_many`` over ``fit`` and its one-sided lower bound.

    Args:
        batched: logits of the batched fit, per episode and configuration.
        looped: logits of fitting each configuration alone.
        labels: query labels per episode.

    Returns:
        ``(mean gain, lower confidence bound)`` in accuracy points, paired by episode
        (each episode's gain averaged over its configurations).
    """
    gains = [
        float(
            np.mean(
                [
                    accuracy_percent(b.argmax(axis=1), y)
                    - accuracy_percent(alone.argmax(axis=1), y)
                    for b, alone in zip(bs, ls, strict=True)
                ]
            )
        )
        for bs, ls, y in zip(batched, looped, labels, strict=True)
    ]
    bound = lower_bound(gains, FIT_MANY_CONFIDENCE)
    return bound.mean, bound.bound
