"""The inductiveness check: a query's logits must not depend on the other queries.

An inductive predictor gives every query the same logits whether it is predicted with the
whole query set, in another order, or with a random part of it. Probes are subsets of the
manifest's query indices; logits are compared after the per-row shift the results store
(a shift changes no prediction), relative to the logits' scale, with a tolerance for the
last bits batch composition changes in float kernels.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

INDUCTIVE_TOLERANCE = 5e-3
"""Largest relative logit change allowed between a query predicted in different batches."""


def inductive_probes(n_query: int, seed: int) -> list[np.ndarray]:
    """Subsets of ``range(n_query)`` to predict on their own.

    Args:
        n_query: number of queries.
        seed: seeds the random halves.

    Returns:
        The whole set reversed, a random half, the other half, and a single query.
    """
    order = np.random.default_rng(seed).permutation(n_query)
    half = max(1, n_query // 2)
    probes = [np.arange(n_query)[::-1].copy(), np.sort(order[:half]), np.sort(order[half:])]
    probes.append(order[:1])
    return [p for p in probes if len(p)]


def verification_probes(n_query: int, seed: int) -> list[np.ndarray]:
    """Subsets that never add up to the whole query set: a random half and one other query.

    Verification asks a plugin worker for these before it ever shows it all the queries,
    so a predictor that pools query statistics cannot answer them from the full set.
    """
    order = np.random.default_rng(seed).permutation(n_query)
    half = max(1, n_query // 2)
    probes = [np.sort(order[:half])]
    if n_query > half:
        probes.append(order[half : half + 1])
    return probes


def _shifted(logits: np.ndarray) -> np.ndarray:
    values = logits.astype(np.float64)
    shifted: np.ndarray = values - values.max(axis=-1, keepdims=True)
    return shifted


def relative_gap(a: np.ndarray, b: np.ndarray) -> float:
    """Largest difference of row-shifted logits ``a`` and ``b``, relative to their scale."""
    if a.size == 0:
        return 0.0
    x, y = _shifted(a), _shifted(b)
    scale = max(1.0, float(np.abs(x).max()), float(np.abs(y).max()))
    return float(np.abs(x - y).max() / scale)


def inductive_gap(
    full: np.ndarray, probes: Sequence[np.ndarray], probe_logits: Sequence[np.ndarray]
) -> float:
    """Largest :func:`relative_gap` between the full-set logits and each probe's.

    Args:
        full: logits of every query, manifest order ``[Q, C]``.
        probes: manifest query indices of each probe.
        probe_logits: the logits predicted for each probe on its own, in probe order.

    Returns:
        ``0.0`` for a perfectly inductive predictor.
    """
    gaps = [
        relative_gap(full[np.asarray(index)], logits)
        for index, logits in zip(probes, probe_logits, strict=True)
    ]
    return max(gaps, default=0.0)
