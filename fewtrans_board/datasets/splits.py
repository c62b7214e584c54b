"""Class splits exactly as the reference code draws them."""

from __future__ import annotations

import functools

import numpy as np

from fewtrans_board.api.dataset_spec import ClassSplit

FEWTRANS_SPLIT_SEED = 22
"""FewTrans's ``dataset_spec.SEED`` ("exactly matching the original Meta-Dataset code")."""


@functools.cache
def fewtrans_split(n_classes: int, n_base: int) -> ClassSplit:
    """Draw the FewTrans base/novel split of a dataset (once per process: the draw is fixed).

    A fresh ``RandomState(22)`` draws ``choice(n_classes, n_base, replace=False)``; the base
    classes keep that random order (episode sampling depends on it) and the novel classes
    are the sorted remainder.

    Args:
        n_classes: number of classes in the canonical class list.
        n_base: number of base (evaluation) classes.
    """
    rng = np.random.RandomState(FEWTRANS_SPLIT_SEED)
    base = rng.choice(n_classes, n_base, replace=False)
    novel = np.setdiff1d(np.arange(n_classes), base)
    return ClassSplit(base=tuple(int(i) for i in base), novel=tuple(int(i) for i in novel))


def half_split(n_classes: int) -> ClassSplit:
    """CoOp's base-to-novel split: the first ``ceil(n/2)`` labels are base, the rest novel."""
    n_base = (n_classes + 1) // 2
    return ClassSplit(base=tuple(range(n_base)), novel=tuple(range(n_base, n_classes)))


def all_base(n_classes: int) -> ClassSplit:
    """Every class is an evaluation class (BSCD-FSL target datasets)."""
    return ClassSplit(base=tuple(range(n_classes)), novel=())
