"""Which fusion a benchmark section's headline uses, and the other one beside it.

FewTrans's paper fuses the HPE configurations by averaging their logits (its Eq. 1); its
released code takes a majority vote. Each run stores both ensembles (``aggregation``
``logit-mean`` and ``vote`` rows), so a section states which one its headline is and shows
the other next to it: the two can differ by ten points on the same run (the demo's full
fine-tuning entry that the full-batch one superseded: 48.4 by vote, 59.8 by logit mean),
which decides its rank.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fewtrans_board.hpe.protocols import get_hpe_protocol

__all__ = ["FUSIONS", "fusion_line", "other_fusion", "other_fusion_mean"]

FUSIONS = {
    "logit-mean": "logit mean",
    "vote": "majority vote",
}
"""Display name of each stored ensemble."""


def other_fusion(protocol: str) -> str | None:
    """The stored ensemble a section's headline does not use (``None``: one configuration).

    A protocol with one configuration per episode has nothing to fuse: both ensembles equal it.
    """
    hpe = get_hpe_protocol(protocol)
    if hpe.epoch_rule == "centre-only":
        return None
    return "vote" if hpe.aggregation == "logit-mean" else "logit-mean"


def fusion_line(protocol: str) -> str:
    """One sentence: the headline's fusion, where it comes from, and where the other is."""
    other = other_fusion(protocol)
    if other is None:
        return "One configuration per episode: nothing is fused (both ensembles equal it)."
    if other == "logit-mean":
        return (
            "Headline fusion: majority vote of the configurations' predictions, as FewTrans's "
            "released code (ties to the lowest class index). The paper's Eq. 1 averages their "
            "logits instead; that logit mean is the column beside the headline's average."
        )
    return (
        "Headline fusion: the mean of the configurations' logits, FewTrans's Eq. 1. The "
        "released code's majority vote is the column beside the headline's average (and "
        "its own table below)."
    )


def other_fusion_mean(method: Any, protocol: str) -> float | None:
    """The entry's accuracy under the other fusion: mean over its columns of the episode means.

    Args:
        method: a site entry (``MethodView``: per column the per-episode accuracy of each
            aggregation).
        protocol: the section's HPE protocol.

    Returns:
        ``None`` where the protocol fuses nothing or a run lacks the ensemble.
    """
    other = other_fusion(protocol)
    if other is None:
        return None
    values = method.values(other)
    if not values or any(len(v) == 0 for v in values.values()):
        return None
    return float(np.mean([np.mean(v) for v in values.values()]))
