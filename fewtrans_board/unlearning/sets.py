"""Which datasets the inductive-CLIP benchmark forgets, retains and validates on.

Facts from the paper (Kravets et al., ICCV 2025, Tab. 4(b)) and its released code: each
of the seven target datasets is unlearned with its own retain set; five validation
datasets, never forgotten nor retained, measure the knowledge lost elsewhere. Zero-shot
prompts and importances use one template per dataset (the released code's
``CUSTOM_TEMPLATES``). The embedded miniature forgets the digits 5-9 and retains 0-4.
"""

from __future__ import annotations

from fewtrans_board.core.errors import FewtransError

PAPER_RETAIN: dict[str, tuple[str, ...]] = {
    "clip-stanford-dogs": ("clip-caltech101", "clip-oxford-flowers", "clip-cub"),
    "clip-stanford-cars": ("clip-caltech101", "clip-cub", "clip-fgvc-aircraft"),
    "clip-caltech101": (
        "clip-stanford-dogs",
        "clip-oxford-flowers",
        "clip-ucf101",
        "clip-fgvc-aircraft",
    ),
    "clip-fgvc-aircraft": ("clip-stanford-cars", "clip-caltech101", "clip-oxford-flowers"),
    "clip-ucf101": ("clip-stanford-dogs", "clip-caltech101", "clip-cub"),
    "clip-oxford-flowers": ("clip-stanford-dogs", "clip-caltech101", "clip-cub"),
    "clip-cub": ("clip-caltech101", "clip-oxford-flowers", "clip-ucf101"),
}
"""Forget (target) dataset -> the retain datasets of the paper's released checkpoints."""

FORGET_DATASETS = tuple(PAPER_RETAIN)
"""The seven targets of the ``clip-inductive`` sub-benchmark."""

VALIDATION_DATASETS = ("clip-eurosat", "clip-sun397", "clip-food101", "clip-dtd", "clip-plantdoc")
"""Datasets only used to measure knowledge lost elsewhere (total knowledge loss)."""

MINIATURE_FORGET = "digits-5-9"
MINIATURE_RETAIN = ("digits-0-4",)
MINIATURE_VALIDATION = ("digits-0-4",)
"""Where the miniature measures knowledge loss: the test half of digits 0-4.

The embedded digits offer no third class set, so the miniature's validation dataset is its
retain dataset; importances read its train half only, knowledge loss its test half only
(disjoint images), but unlike the paper's five validation datasets it was retained."""

DEFAULT_VALIDATION: dict[str, tuple[str, ...]] = {
    **{forget: VALIDATION_DATASETS for forget in PAPER_RETAIN},
    MINIATURE_FORGET: MINIATURE_VALIDATION,
}
"""The validation datasets ``unlearn --knowledge-loss`` and ``tkl`` use when none are given."""

DEFAULT_RETAIN: dict[str, tuple[str, ...]] = {**PAPER_RETAIN, MINIATURE_FORGET: MINIATURE_RETAIN}
"""The retain set ``unlearn`` and ``tkl`` use when none is given."""

TEMPLATES: dict[str, str] = {
    "clip-oxford-flowers": "a photo of a {}, a type of flower.",
    "clip-fgvc-aircraft": "a photo of a {}, a type of aircraft.",
    "clip-dtd": "{} texture.",
    "clip-eurosat": "a centered satellite photo of {}.",
    "clip-food101": "a photo of {}, a type of food.",
    "clip-ucf101": "a photo of a person doing {}.",
    "clip-cub": "a photo of a {}, a type of bird.",
}
"""Zero-shot templates of the released unlearning code; other datasets use :data:`DEFAULT_TEMPLATE`."""

DEFAULT_TEMPLATE = "a photo of a {}."

ALPHA = 30.0
"""SSD selection weighting of the released CLIP unlearning (vanilla SSD uses 10 or 5)."""

LAMBDA = 1.0
"""SSD dampening constant of the released CLIP unlearning."""

IMPORTANCE_BATCH = 64
"""Mini-batch size of the importance estimate (the batch-level Fisher is batch-size sensitive)."""


def template_for(dataset: str) -> str:
    """The zero-shot template of ``dataset``."""
    return TEMPLATES.get(dataset, DEFAULT_TEMPLATE)


SEARCH_ALPHA_RANGE = (1e-3, 1e3)
"""Bounds of the strength searches (``alpha``; ``lambda = min(1, alpha)``)."""

KNOWLEDGE_LOSS_TOLERANCE = 0.02
"""A knowledge-loss search stops once it is within this (a fraction) below its target."""

ORACLE_GAP_TOLERANCE = 2.0
"""An oracle search stops once the probe accuracies differ by at most this (points)."""


def default_validation(forget: str) -> tuple[str, ...]:
    """The validation datasets for ``forget`` (the paper's five, or the miniature's).

    Raises:
        FewtransError: ``forget`` has no default; the caller must name them.
    """
    try:
        return DEFAULT_VALIDATION[forget]
    except KeyError:
        raise FewtransError(
            f"no default validation datasets for {forget!r}; pass --validation A,B,C"
        ) from None


def default_retain(forget: str) -> tuple[str, ...]:
    """The paper's retain set for ``forget``.

    Raises:
        FewtransError: ``forget`` has no default; the caller must name a retain set.
    """
    try:
        return DEFAULT_RETAIN[forget]
    except KeyError:
        raise FewtransError(
            f"no default retain set for {forget!r} (the paper's table covers "
            f"{', '.join(DEFAULT_RETAIN)}); pass --retain A,B,C"
        ) from None
