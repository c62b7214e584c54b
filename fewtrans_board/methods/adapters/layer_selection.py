"""IMS's two-stage incremental layer selection by cross-validated loss on the support set.

BSCD-FSL (§5.2.2, Appendix Algorithm 1): stage 1 keeps, per model, the layer whose pooled
features give the lowest cross-validated cross-entropy of a linear classifier; stage 2 starts
from the best of those and adds each other one (in order of their stage-1 loss) if it lowers
the cross-validated loss of the concatenation. The paper cross-validates with five folds;
here folds are stratified per class (item ``j`` of a class goes to fold ``j mod k``, ``k =
min(5, smallest class size)``, so 5-shot episodes are leave-one-per-class). Episodes with a
one-shot class cannot be cross-validated and fall back to the training loss (recorded).
By default the CV classifier is an L2-regularised multinomial logistic regression (lbfgs)
on L2-normalised features, a deterministic stand-in for the paper's 20 SGD epochs; a
:class:`HeadClassifier` trains the final head's way instead (BSCD-FSL's recipe: torch's
``nn.Linear`` on the raw features, SGD lr 0.01 with momentum 0.9, dampening 0.9 and weight
decay 1e-3, batch 4, 20 epochs, as ``multi_model_selection.py``'s
``train_loss_cross_validation``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

MAX_FOLDS = 5
CV_C = 10.0
"""Inverse L2 strength of the CV classifier on unit-norm features."""


def unit_rows(features: np.ndarray) -> np.ndarray:
    """L2-normalised rows (zero rows stay zero)."""
    norms = np.linalg.norm(features, axis=1, keepdims=True)
    out: np.ndarray = features / np.maximum(norms, 1e-12)
    return out


def concatenate(blocks: Sequence[np.ndarray], normalize: bool = True) -> np.ndarray:
    """Concatenate per-layer features, each L2-normalised, scaled to unit total norm.

    Args:
        blocks: per-layer features ``[N, D_l]``.
        normalize: ``False`` joins the raw features (BSCD-FSL's ``torch.cat``).
    """
    if not normalize:
        return np.concatenate(list(blocks), axis=1)
    joined = np.concatenate([unit_rows(b) for b in blocks], axis=1)
    scaled: np.ndarray = joined / np.sqrt(len(blocks))
    return scaled


FoldLoss = Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray], float]
"""``(train features, train labels, held-out features, held-out labels) -> held-out mean
cross-entropy`` of a classifier trained on the first pair."""


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


@functools.cache
def _thread_pools() -> Any:  # threadpoolctl is untyped
    """The process's BLAS and OpenMP thread pools, found once.

    Finding them scans every loaded library (2.6 ms a call, as long as a small fit);
    limiting them afterwards takes 0.02 ms (measured).
    """
    from sklearn.linear_model import LogisticRegression  # noqa: F401  (load its libraries first)
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


def _fit(features: np.ndarray, labels: np.ndarray) -> Any:  # sklearn is untyped
    from sklearn.linear_model import LogisticRegression

    # Tiny problems: BLAS threads only contend (5x slower on a busy 2-core machine).
    with _thread_pools().limit(limits=1):
        return LogisticRegression(C=CV_C, max_iter=500).fit(features, labels)


def _log_loss(model: Any, features: np.ndarray, labels: np.ndarray) -> float:
    probabilities = np.full((len(labels), int(labels.max()) + 1), 1e-15)
    probabilities[:, model.classes_] = np.clip(model.predict_proba(features), 1e-15, 1.0)
    return float(-np.log(probabilities[np.arange(len(labels)), labels]).mean())


def lbfgs_loss(
    train: np.ndarray, train_labels: np.ndarray, held: np.ndarray, held_labels: np.ndarray
) -> float:
    """:data:`FoldLoss` of the L2-regularised logistic regression (the default)."""
    return _log_loss(_fit(train, train_labels), held, held_labels)


class HeadClassifier:
    """:data:`FoldLoss` of a linear head trained as a configuration trains its head.

    :func:`~fewtrans_board.blocks.training.train_linear_head` for ``epochs`` epochs on the
    features as given; random draws (torch's ``nn.Linear`` initialisation) come from torch's
    global generator.

    Args:
        config: the adapter's configuration.
        epochs: passes over the training folds (BSCD-FSL: 20).
        n_way: number of classes (the head's outputs).
    """

    def __init__(self, config: Any, epochs: int, n_way: int) -> None:
        self.config, self.epochs, self.n_way = config, epochs, n_way

    def __call__(
        self, train: np.ndarray, train_labels: np.ndarray, held: np.ndarray, held_labels: np.ndarray
    ) -> float:
        """Train on ``train``, return the mean cross-entropy on ``held``."""
        import torch
        import torch.nn.functional as F

        from fewtrans_board.blocks.training import train_linear_head

        x = torch.as_tensor(train).to(torch.get_default_dtype())
        y = torch.as_tensor(train_labels)
        head = train_linear_head(x, y, self.n_way, self.config, self.epochs)
        with torch.no_grad():
            held_x = torch.as_tensor(held).to(x.dtype)
            return float(F.cross_entropy(head(held_x), torch.as_tensor(held_labels)))


def cv_loss(
    features: np.ndarray, labels: np.ndarray, folds: np.ndarray, fold_loss: FoldLoss = lbfgs_loss
) -> float:
    """Mean held-out cross-entropy over folds (training loss when there is one fold)."""
    if len(np.unique(labels)) < 2:
        return 0.0
    if folds.max() == 0:
        return fold_loss(features, labels, features, labels)
    losses = []
    for fold in range(int(folds.max()) + 1):
        held = folds == fold
        train_labels = labels[~held]
        if len(np.unique(train_labels)) < 2:
            continue
        losses.append(fold_loss(features[~held], train_labels, features[held], labels[held]))
    return float(np.mean(losses))


def select_layers(
    candidates: Sequence[Sequence[np.ndarray]],
    labels: np.ndarray,
    fold_loss: FoldLoss = lbfgs_loss,
    normalize: bool = True,
) -> tuple[list[tuple[int, int]], dict[str, Any]]:
    """Two-stage incremental selection.

    Args:
        candidates: per model, the support features ``[N, D_l]`` of each of its layers.
        labels: support labels ``[N]``.
        fold_loss: the CV classifier (default: lbfgs logistic regression).
        normalize: L2-normalise each layer's features (and scale concatenations to unit
            norm, :func:`concatenate`); ``False``: the raw features (BSCD-FSL).

    Returns:
        ``(selected, record)``: the selected ``(model, layer)`` pairs in order of addition
        and a JSON-friendly record of both stages (losses, scheme).
    """
    folds, scheme = folds_of(labels)
    stage1: list[dict[str, Any]] = []
    for m, layers in enumerate(candidates):
        losses = [
            cv_loss(unit_rows(f) if normalize else f, labels, folds, fold_loss) for f in layers
        ]
        best = int(np.argmin(losses))
        stage1.append({"model": m, "layer": best, "cv_loss": losses[best], "layer_losses": losses})
    order = sorted(stage1, key=lambda s: (s["cv_loss"], s["model"]))
    chosen = [order[0]]
    best_loss = float(order[0]["cv_loss"])
    tried = []
    for entry in order[1:]:
        trial = [*chosen, entry]
        loss = cv_loss(
            concatenate([candidates[e["model"]][e["layer"]] for e in trial], normalize),
            labels,
            folds,
            fold_loss,
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
