"""Tables of sub-benchmarks that are not summarised as one mean ± CI over episodes.

Base-to-novel tables show base, novel and their harmonic mean, each with a CI, ranked by
the harmonic mean of the cross-dataset averages (CoOp's summary). Per-shot (CLIP k-shot)
tables show, per K, the mean over seeds of the dataset-averaged accuracy with the seeds'
spread, ranked by the average over shots and datasets (the inductive-CLIP paper's headline).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from fewtrans_board.results.per_shot import PerShot, average_over_datasets
from fewtrans_board.stats.base_novel import harmonic_mean_average_ci, harmonic_mean_ci
from fewtrans_board.stats.bootstrap import average_ci
from fewtrans_board.stats.intervals import mean_ci
from fewtrans_board.website.model import BaseNovelCell, BaseNovelRow, ShotRow

BOOTSTRAP_SEED = 0
BOOTSTRAP_RESAMPLES = 2000


class _Method(Protocol):
    id: str

    def values(self, aggregation: str, split: str = "base") -> dict[str, np.ndarray]: ...


def base_novel_table(
    methods: Sequence[_Method], datasets: Sequence[str], aggregation: str, ddof: int
) -> list[BaseNovelRow]:
    """Rows ranked by the harmonic mean of the average base and novel accuracies.

    Args:
        methods: the benchmark's entries (each with base and novel values per dataset).
        datasets: the table's datasets.
        aggregation: which per-episode aggregation (``hpe``, ``vote``, ``oracle`` ...).
        ddof: the benchmark's CI ddof for the per-dataset cells.
    """
    rows = []
    for method in methods:
        base, novel = method.values(aggregation), method.values(aggregation, "novel")
        cells = {
            d: BaseNovelCell(
                mean_ci(base[d], ddof=ddof),
                mean_ci(novel[d], ddof=ddof),
                harmonic_mean_ci(base[d], novel[d], ddof=ddof),
            )
            for d in datasets
        }
        picked_base = {d: base[d] for d in datasets}
        picked_novel = {d: novel[d] for d in datasets}
        rows.append(
            BaseNovelRow(
                method,
                cells,
                average_ci(picked_base, BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED),
                average_ci(picked_novel, BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED),
                harmonic_mean_average_ci(
                    picked_base, picked_novel, BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED
                ),
            )
        )
    rows.sort(key=lambda r: (-r.harmonic.estimate, r.method.id))
    for row, (rank, tied) in zip(
        rows, shared_ranks([r.harmonic.estimate for r in rows]), strict=True
    ):
        row.rank, row.tied = rank, tied
    return rows


def shot_table(
    per_method: Sequence[tuple[Any, dict[str, PerShot]]], datasets: Sequence[str]
) -> list[ShotRow]:
    """Rows ranked by the average over shots and datasets.

    Args:
        per_method: each method with its per-dataset per-K results.
        datasets: the table's datasets (every method covers them).
    """
    rows = []
    for method, results in per_method:
        picked = {d: results[d] for d in datasets}
        rows.append(ShotRow(method, picked, average_over_datasets(picked)))
    rows.sort(key=lambda r: (-r.average.average, r.method.id))
    for row, (rank, tied) in zip(
        rows, shared_ranks([r.average.average for r in rows]), strict=True
    ):
        row.rank, row.tied = rank, tied
    return rows


def shared_ranks(scores: Sequence[float]) -> list[tuple[int, bool]]:
    """Competition ranks of scores sorted best first: equal scores share the first rank.

    ``[70, 65, 65, 60]`` -> ranks 1, 2, 2, 4, the middle two marked tied: a tie is shown as
    one, not broken by the method's name.
    """
    ranks: list[tuple[int, bool]] = []
    for index, score in enumerate(scores):
        same_as_previous = index > 0 and math.isclose(score, scores[index - 1], abs_tol=1e-9)
        rank = ranks[index - 1][0] if same_as_previous else index + 1
        ranks.append((rank, False))
    counts: dict[int, int] = {}
    for rank, _ in ranks:
        counts[rank] = counts.get(rank, 0) + 1
    return [(rank, counts[rank] > 1) for rank, _ in ranks]


def shots_of(table: Sequence[ShotRow]) -> list[int]:
    """The K values of a per-shot table (any dataset of any row), ascending."""
    results = [r for row in table for r in (row.average, *row.per_dataset.values())]
    return sorted({s.shots for r in results for s in r.shots})
