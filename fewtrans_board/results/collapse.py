"""Collapsed predictions: a run whose headline predictions fall on one class on most episodes.

A method can score above zero without telling any class apart: when every class vector is
the same (e.g. CoOp on a CLIP whose class-name embeddings SSD unlearning drove to zero),
each query's logits tie and argmax picks class 0, so the run's "accuracy" is the share of
class 0 among the queries. This check reads the stored predictions of the run's headline
fusion (the ensemble rows of its protocol's aggregation) and says so.

Definitions (documented in README.md, "Collapsed predictions"):

- an episode is **collapsed** when one class receives at least :data:`COLLAPSE_SHARE` (95%)
  of its query predictions. Episodes of one way are not counted (one class is all there
  is). The query sets of every built-in sampler are close to balanced (no class holds 95% of
  an episode's queries), so a collapsed episode is one where the method ignored the image;
- a run is **collapsed** when more than :data:`MOST` (half) of its counted episodes are.

Predictions only are read, never labels, so the check is the same for every reader.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fewtrans_board.results.load import RunResults
from fewtrans_board.results.row_schema import ENSEMBLE_KIND

__all__ = ["COLLAPSE_SHARE", "MOST", "Collapse", "collapse_of", "run_collapse", "top_share"]

COLLAPSE_SHARE = 0.95
"""Share of an episode's query predictions one class must receive for the episode to collapse."""

MOST = 0.5
"""A run is marked when more than this share of its counted episodes collapsed."""


@dataclass(frozen=True)
class Collapse:
    """How many of a run's episodes collapsed to one predicted class.

    Attributes:
        episodes: episodes counted (those with at least two ways).
        collapsed: episodes where one class received at least ``threshold`` of the predictions.
        classes: ``{class index: collapsed episodes}`` of the class they collapsed to.
        threshold: the share that makes an episode collapsed (:data:`COLLAPSE_SHARE`).
        aggregation: the fusion whose predictions were read (the run's headline).
    """

    episodes: int
    collapsed: int
    classes: dict[int, int] = field(default_factory=dict)
    threshold: float = COLLAPSE_SHARE
    aggregation: str = ""

    @property
    def share(self) -> float:
        """Collapsed episodes over counted episodes (0 for a run with none counted)."""
        return self.collapsed / self.episodes if self.episodes else 0.0

    @property
    def marked(self) -> bool:
        """Whether most episodes collapsed (more than :data:`MOST` of them)."""
        return self.episodes > 0 and self.share > MOST

    @property
    def line(self) -> str:
        """``collapsed on 15/15 episodes (to class 0 on 15)`` for a marked run, else ``""``."""
        if not self.marked:
            return ""
        to = ", ".join(f"class {c} on {n}" for c, n in sorted(self.classes.items()))
        return f"collapsed on {self.collapsed}/{self.episodes} episodes ({to})"

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form (class indices as strings, with ``share``, ``marked``, ``line``)."""
        return {
            "episodes": self.episodes,
            "collapsed": self.collapsed,
            "classes": {str(c): n for c, n in sorted(self.classes.items())},
            "threshold": self.threshold,
            "aggregation": self.aggregation,
            "share": self.share,
            "marked": self.marked,
            "line": self.line,
        }


def top_share(predictions: Sequence[int] | np.ndarray) -> tuple[int, float]:
    """The most predicted class of one episode and the share of predictions it received.

    Ties between classes go to the lowest index. An empty episode gives ``(-1, 0.0)``.
    """
    values = np.asarray(predictions, dtype=np.int64)
    if values.size == 0:
        return -1, 0.0
    counts = np.bincount(values - values.min())
    top = int(np.argmax(counts))
    return top + int(values.min()), float(counts[top] / values.size)


def collapse_of(
    episodes: Iterable[tuple[int, Sequence[int] | np.ndarray]],
    threshold: float = COLLAPSE_SHARE,
    aggregation: str = "",
) -> Collapse:
    """Count the collapsed episodes among ``(n_way, predictions)`` pairs.

    Args:
        episodes: per episode its way count and its query predictions.
        threshold: the share one class must receive for an episode to collapse.
        aggregation: the fusion the predictions come from (recorded only).
    """
    counted, classes = 0, Counter[int]()
    for n_way, predictions in episodes:
        if n_way < 2:
            continue
        counted += 1
        top, share = top_share(predictions)
        if share >= threshold:
            classes[top] += 1
    return Collapse(counted, sum(classes.values()), dict(classes), threshold, aggregation)


def run_collapse(run: RunResults, aggregation: str | None = None, split: str = "base") -> Collapse:
    """The collapse check of a run, read from its stored fused predictions.

    Args:
        run: the loaded run (its ``predictions`` column; logits are not needed).
        aggregation: the ensemble to read (default: the run's headline fusion).
        split: ``base`` or ``novel``.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    name = aggregation or run.provenance.hpe.aggregation
    mask = (
        (run.column("kind") == ENSEMBLE_KIND)
        & (run.column("aggregation") == name)
        & (run.column("split") == split)
    )
    chosen = run.table.filter(pa.array(mask)).column("predictions")
    lengths = np.asarray(pc.list_value_length(chosen).to_numpy(zero_copy_only=False), dtype=int)
    flat = np.asarray(pc.list_flatten(chosen).to_numpy(zero_copy_only=False), dtype=np.int64)
    pieces = np.split(flat, np.cumsum(lengths)[:-1]) if len(lengths) else []
    ways = run.column("n_way")[mask]
    return collapse_of(zip(ways.tolist(), pieces, strict=True), aggregation=name)
