"""IMS's two-stage incremental layer selection by cross-validated loss on the support set.

BSCD-FSL (§5.2.2, Appendix Algorithm 1): stage 1 keeps, per model, the layer whose pooled
features give the lowest cross-validated cross-entropy of a linear classifier; stage 2 starts
from the best of those and adds each other one (in order of their stage-1 loss) if it lowers
the cross-validated loss of the concatenation. The paper cross-validates with five folds;
here folds are stratified per class (item ``j`` of a class goes to fold ``j mod k``, ``k =
min(5, smallest class size)``, so 5-shot episodes are leave-one-per-class). Episodes with a
one-shot class cannot be cross-validated and fall back to the training loss (recorded).
The CV classifier is an L2-regularised multinomial logistic regression (lbfgs) on
L2-normalised features, a deterministic stand-in for the paper's 20 SGD epochs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

MAX_FOLDS = 5
CV_C = 10.0
"""Inverse L2 strength of the CV classifier on unit-norm features."""


@dataclass(frozen=True)
class Candidate:
    """One candidate layer: ``(model index, layer index)`` and its support features."""

    model: int
    layer: int
    features: np.ndarray


def unit_rows(features: np.ndarray) -> np.ndarray:
    """L2-normalised rows (zero rows stay zero)."""
    norms = np.linalg.norm(features, axis=1, keepdims=True)
    out: np.ndarray = features / np.maximum(norms, 1e-12)
    return out


def concatenate(blocks: Sequence[np.ndarray]) -> np.ndarray:
    """Concatenate per-layer features, each L2-normalised, scaled to unit total norm."""
    joined: np.ndarray = np.concatenate([unit_rows(b) for b in blocks], axis=1)
    scaled: np.ndarray = joined / np.sqrt(len(blocks))
    return scaled


def folds_of(labels: np.ndarray) -> tuple[np.ndarray, str]:
    """Fold index per item and the CV scheme name (``"k-fold"`` or ``"resubstitution"``)."""
    counts = np.bincount(labels)
    k = int(min(MAX_FOLDS, counts[counts > 0].min()))
    if k < 2:
        return np.zeros(len(labels), dtype=np.int64), "resubstitution"
    folds = np.zeros(len(labels), dtype=np.int64)
    for c in np.unique(labels):
        members = np.flatnonzero(labels == c)
        folds[members] = np.arange(len(members)) % k
    return folds, f"{k}-fold"


def _fit(features: np.ndarray, labels: np.ndarray) -> Any:  # sklearn is untyped
    from sklearn.linear_model import LogisticRegression
    from threadpoolctl import threadpool_limits

    # Tiny problems: BLAS threads only contend (5x slower on a busy 2-core machine).
    with threadpool_limits(1):
        return LogisticRegression(C=CV_C, max_iter=500).fit(features, labels)


def _log_loss(model: Any, features: np.ndarray, labels: np.ndarray) -> float:
    probabilities = np.full((len(labels), int(labels.max()) + 1), 1e-15)
    probabilities[:, model.classes_] = np.clip(model.predict_proba(features), 1e-15, 1.0)
    return float(-np.log(probabilities[np.arange(len(labels)), labels]).mean())


def cv_loss(features: np.ndarray, labels: np.ndarray, folds: np.ndarray) -> float:
    """Mean held-out cross-entropy over folds (training loss when there is one fold)."""
    if len(np.unique(labels)) < 2:
        return 0.0
    if folds.max() == 0:
        return _log_loss(_fit(features, labels), features, labels)
    losses = []
    for fold in range(int(folds.max()) + 1):
        held = folds == fold
        train_labels = labels[~held]
        if len(np.unique(train_labels)) < 2:
            continue
        model = _fit(features[~held], train_labels)
        losses.append(_log_loss(model, features[held], labels[held]))
    return float(np.mean(losses))


def select_layers(
    candidates: Sequence[Sequence[np.ndarray]], labels: np.ndarray
) -> tuple[list[tuple[int, int]], dict[str, Any]]:
    """Two-stage incremental selection.

    Args:
        candidates: per model, the support features ``[N, D_l]`` of each of its layers.
        labels: support labels ``[N]``.

    Returns:
        ``(selected, record)``: the selected ``(model, layer)`` pairs in order of addition
        and a JSON-friendly record of both stages (losses, scheme).
    """
    folds, scheme = folds_of(labels)
    stage1: list[dict[str, Any]] = []
    for m, layers in enumerate(candidates):
        losses = [cv_loss(unit_rows(f), labels, folds) for f in layers]
        best = int(np.argmin(losses))
        stage1.append({"model": m, "layer": best, "cv_loss": losses[best], "layer_losses": losses})
    order = sorted(stage1, key=lambda s: (s["cv_loss"], s["model"]))
    chosen = [order[0]]
    best_loss = float(order[0]["cv_loss"])
    tried = []
    for entry in order[1:]:
        trial = [*chosen, entry]
        loss = cv_loss(
            concatenate([candidates[e["model"]][e["layer"]] for e in trial]), labels, folds
        )
        tried.append({"model": entry["model"], "layer": entry["layer"], "cv_loss": loss})
        if loss < best_loss:
            chosen, best_loss = trial, loss
    selected = [(int(e["model"]), int(e["layer"])) for e in chosen]
    record = {
        "cv": scheme,
        "stage1": stage1,
        "stage2": tried,
        "selected": [{"model": m, "layer": layer} for m, layer in selected],
        "cv_loss": best_loss,
    }
    return selected, record
