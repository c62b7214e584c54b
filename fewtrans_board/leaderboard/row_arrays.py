"""A result table as flat arrays, and every row check on all (episode, split) groups at once.

:func:`all_rows_pass` asks what :func:`~fewtrans_board.leaderboard.rows.check_rows` asks of
each group (every group of the manifest present once with every grid point and ensemble,
the manifest's stream indices, shapes and label ranges, accuracies recomputed from the
frozen labels, configurations equal to the grid's, logits finite with the predictions among
their maxima, ensembles recomputed with :func:`~fewtrans_board.hpe.aggregate.fuse`) as a few
operations on whole arrays. It answers ``True`` only where every group check would pass;
``False`` sends the run through the group checks, which name the first fault. A run of 600
episodes holds tens of thousands of rows: checking them one by one in Python took most of
the time of building an index from stored entries.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from fewtrans_board.hpe.aggregate import fuse
from fewtrans_board.results.row_schema import CONFIG_KIND, ENSEMBLE_KIND, ENSEMBLES

if TYPE_CHECKING:
    from fewtrans_board.episodes.manifest import ManifestEpisode
    from fewtrans_board.results.load import RunResults

ROW_COLUMNS = (
    "episode", "stream_index", "split", "kind", "aggregation", "config_index", "config",
    "n_way", "n_query", "accuracy",
)  # fmt: skip
"""The scalar columns the checks read (as arrays)."""
INTEGER_COLUMNS = ("episode", "stream_index", "config_index", "n_way", "n_query")
TEXT_COLUMNS = ("split", "kind", "aggregation", "config")


@dataclass
class RowArrays:
    """The result table as arrays (one pass, no Python objects per logit)."""

    rows: dict[str, np.ndarray]
    predictions: np.ndarray
    pred_offsets: np.ndarray
    logits: np.ndarray
    logit_offsets: np.ndarray
    logit_valid: np.ndarray

    @classmethod
    def of(cls, run: RunResults) -> RowArrays:
        """The arrays of a loaded run (its cached scalar columns, its flattened lists)."""
        predictions = run.table.column("predictions").combine_chunks()
        logits = run.table.column("logits").combine_chunks()
        return cls(
            rows={name: run.column(name) for name in ROW_COLUMNS},
            predictions=predictions.flatten().to_numpy(zero_copy_only=False),
            pred_offsets=predictions.offsets.to_numpy(),
            logits=logits.flatten().to_numpy(zero_copy_only=False),
            logit_offsets=logits.offsets.to_numpy(),
            logit_valid=~logits.is_null().to_numpy(zero_copy_only=False),
        )

    def prediction(self, i: int) -> np.ndarray:
        """Row ``i``'s predictions."""
        return self.predictions[self.pred_offsets[i] : self.pred_offsets[i + 1]]

    def logit(self, i: int) -> np.ndarray:
        """Row ``i``'s logits, flat."""
        return self.logits[self.logit_offsets[i] : self.logit_offsets[i + 1]]


@dataclass(frozen=True)
class _Groups:
    """What the manifest asks of each (episode, split) group, at key ``2 * episode + novel``."""

    present: np.ndarray
    queries: np.ndarray
    ways: np.ndarray
    stream: np.ndarray
    label_offsets: np.ndarray
    labels: np.ndarray

    @classmethod
    def of(cls, episodes: Sequence[ManifestEpisode]) -> _Groups:
        size = 2 * len(episodes)
        present, queries = np.zeros(size, dtype=bool), np.zeros(size, dtype=np.int64)
        ways, stream = np.zeros(size, dtype=np.int64), np.zeros(size, dtype=np.int64)
        labels: list[int] = []
        for i, episode in enumerate(episodes):
            present[2 * i], present[2 * i + 1] = True, bool(episode.novel_query)
            parts = (
                (episode.query, episode.ways),
                (episode.novel_query, len(episode.novel_classes)),
            )
            for key, (pairs, count) in enumerate(parts, start=2 * i):
                queries[key], ways[key], stream[key] = len(pairs), count, episode.stream_index
                labels.extend(label for _, label in pairs)
        offsets = np.zeros(size + 1, dtype=np.int64)
        np.cumsum(queries, out=offsets[1:])
        return cls(present, queries, ways, stream, offsets, np.asarray(labels, dtype=np.int64))


def all_rows_pass(
    arrays: RowArrays,
    episodes: Sequence[ManifestEpisode],
    expected_configs: list[str],
    with_logits: bool,
) -> bool:
    """Whether every (episode, split) group of the rows passes the group checks.

    Args:
        arrays: the run's rows.
        episodes: the frozen manifest's episodes.
        expected_configs: the grid's configurations as canonical JSON, in grid order.
        with_logits: check the logits and the logit-mean ensembles too.

    Returns:
        ``True`` only if :func:`~fewtrans_board.leaderboard.rows.check_rows`'s group checks
        all pass; ``False`` if one would fail (or the table has a form only they handle:
        nulls, no rows, an empty grid).
    """
    rows = arrays.rows
    if not expected_configs or len(rows["episode"]) == 0 or not _plain(arrays):
        return False
    groups = _Groups.of(episodes)
    keys = _group_keys(rows, groups.present)
    if keys is None:
        return False
    is_config = rows["kind"] == CONFIG_KIND
    if not _every_group_complete(rows, keys, is_config, len(expected_configs)):
        return False
    queries, ways = groups.queries[keys], groups.ways[keys]
    if not _shapes_agree(arrays, groups, keys, queries, ways):
        return False
    if not _accuracies_agree(arrays, groups, keys, queries, ways):
        return False
    config_index = rows["config_index"][is_config]
    if not (rows["config"][is_config] == np.asarray(expected_configs)[config_index]).all():
        return False
    rows_of = np.flatnonzero(is_config)
    rows_of = rows_of[np.lexsort((keys[rows_of], config_index, ways[rows_of]))]
    members = _Members.of(arrays, rows_of, queries[rows_of], ways[rows_of], with_logits)
    if members is None or not members.predictions_at_maxima():
        return False
    return _ensembles_agree(arrays, keys, queries, ways, members, len(expected_configs))


def _plain(arrays: RowArrays) -> bool:
    """Integer, text and float columns without nulls (the form every writer produces)."""
    rows = arrays.rows
    return (
        all(rows[name].dtype.kind == "i" for name in INTEGER_COLUMNS)
        and all(rows[name].dtype.kind == "U" for name in TEXT_COLUMNS)
        and rows["accuracy"].dtype.kind == "f"
        and arrays.predictions.dtype.kind == "i"
        and arrays.pred_offsets.size == len(rows["episode"]) + 1
        and arrays.logit_offsets.size == len(rows["episode"]) + 1
    )


def _group_keys(rows: dict[str, np.ndarray], present: np.ndarray) -> np.ndarray | None:
    """Each row's group key, or ``None`` unless the groups are exactly the manifest's."""
    episode, split = rows["episode"], rows["split"]
    novel = split == "novel"
    if not (novel | (split == "base")).all():
        return None
    if episode.min() < 0 or episode.max() >= len(present) // 2:
        return None
    keys: np.ndarray = 2 * episode + novel
    seen = np.zeros(len(present), dtype=bool)
    seen[keys] = True
    return keys if np.array_equal(seen, present) else None


def _every_group_complete(
    rows: dict[str, np.ndarray], keys: np.ndarray, is_config: np.ndarray, configs: int
) -> bool:
    """Every group holds each grid point and each ensemble exactly once, and nothing else."""
    is_ensemble = rows["kind"] == ENSEMBLE_KIND
    if not (is_config | is_ensemble).all():
        return False
    groups = np.unique(keys).size
    config_index = rows["config_index"][is_config]
    if config_index.min(initial=0) < 0 or config_index.max(initial=0) >= configs:
        return False
    aggregation = rows["aggregation"][is_ensemble]
    known = np.sort(np.asarray(ENSEMBLES))
    ensemble_index = np.searchsorted(known, aggregation)
    ensemble_index[ensemble_index == len(known)] = 0
    if not (known[ensemble_index] == aggregation).all():
        return False
    for index, group_keys, count in (
        (config_index, keys[is_config], configs),
        (ensemble_index, keys[is_ensemble], len(known)),
    ):
        pairs = group_keys * count + index
        if pairs.size != groups * count or np.unique(pairs).size != pairs.size:
            return False
    return True


def _spans_fit(offsets: np.ndarray, rows: np.ndarray, lengths: np.ndarray, size: int) -> bool:
    """Rows ``rows`` span exactly ``lengths`` values, inside an array of ``size`` values."""
    starts, ends = offsets[rows], offsets[rows + 1]
    return bool(((ends - starts) == lengths).all() and starts.min() >= 0 and ends.max() <= size)


def _shapes_agree(
    arrays: RowArrays, groups: _Groups, keys: np.ndarray, queries: np.ndarray, ways: np.ndarray
) -> bool:
    """Stream indices, ``n_way``/``n_query`` and prediction counts are the manifest's."""
    rows = arrays.rows
    return bool(
        (queries > 0).all()
        and (rows["stream_index"] == groups.stream[keys]).all()
        and (rows["n_way"] == ways).all()
        and (rows["n_query"] == queries).all()
        and _spans_fit(arrays.pred_offsets, np.arange(len(keys)), queries, arrays.predictions.size)
    )


def _gather(values: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """``values[starts[i] : starts[i] + lengths[i]]`` for every ``i``, concatenated."""
    before = np.cumsum(lengths) - lengths
    gathered: np.ndarray = values[np.repeat(starts - before, lengths) + np.arange(lengths.sum())]
    return gathered


def _accuracies_agree(
    arrays: RowArrays, groups: _Groups, keys: np.ndarray, queries: np.ndarray, ways: np.ndarray
) -> bool:
    """Predictions are labels of the episode's ways; accuracies are theirs on its labels."""
    predictions = _gather(arrays.predictions, arrays.pred_offsets[:-1], queries)
    if (predictions < 0).any() or (predictions >= np.repeat(ways, queries)).any():
        return False
    labels = _gather(groups.labels, groups.label_offsets[keys], queries)
    row_of = np.repeat(np.arange(len(keys)), queries)
    correct = np.bincount(row_of, weights=predictions == labels, minlength=len(keys))
    # As accuracy_percent computes it: the mean of the matches (float64), times 100.
    accuracy = correct / queries * 100.0
    return not (np.abs(accuracy - arrays.rows["accuracy"]) > 1e-9).any()


@dataclass(frozen=True)
class _Members:
    """The grid-point rows' values laid end to end, rows ordered by (ways, grid point, group).

    Predictions ``[sum Q]`` and, where checked, logits ``[sum Q x W]``.
    """

    queries: np.ndarray
    ways: np.ndarray
    predictions: np.ndarray
    logits: np.ndarray | None

    @classmethod
    def of(
        cls,
        arrays: RowArrays,
        rows: np.ndarray,
        queries: np.ndarray,
        ways: np.ndarray,
        with_logits: bool,
    ) -> _Members | None:
        """``None`` unless every grid point's logits are present, ``[Q, W]`` and finite."""
        predictions = _gather(arrays.predictions, arrays.pred_offsets[rows], queries)
        if not with_logits:
            return cls(queries, ways, predictions, None)
        sizes = queries * ways
        if not arrays.logit_valid[rows].all():
            return None
        if not _spans_fit(arrays.logit_offsets, rows, sizes, arrays.logits.size):
            return None
        logits = _gather(arrays.logits, arrays.logit_offsets[rows], sizes)
        return cls(queries, ways, predictions, logits) if np.isfinite(logits).all() else None

    def predictions_at_maxima(self) -> bool:
        """Each grid point's predictions are among its logits' maxima (``True`` unchecked)."""
        if self.logits is None:
            return True
        sizes = self.queries * self.ways
        starts = _query_starts(np.cumsum(sizes) - sizes, self.queries, self.ways)
        maxima = np.maximum.reduceat(self.logits, starts)
        return bool((self.logits[starts + self.predictions] == maxima).all())


def _query_starts(row_starts: np.ndarray, queries: np.ndarray, ways: np.ndarray) -> np.ndarray:
    """Where each query's ``ways`` logits start in rows laid end to end."""
    within = np.arange(queries.sum()) - np.repeat(np.cumsum(queries) - queries, queries)
    starts: np.ndarray = np.repeat(row_starts, queries) + within * np.repeat(ways, queries)
    return starts


def _ensembles_agree(
    arrays: RowArrays,
    keys: np.ndarray,
    queries: np.ndarray,
    ways: np.ndarray,
    members: _Members,
    configs: int,
) -> bool:
    """Stored ensembles equal the fusion of the stored members, recomputed per way count.

    The members' rows of one way count stack into the ``[M, Q, W]`` (and ``[M, Q]``) arrays
    ``fuse`` takes, with the groups' queries laid end to end; fusion is per query, so this
    equals fusing each group alone. Without logits only the vote is recomputed.
    """
    rows = arrays.rows
    stored = {}
    for aggregation in ENSEMBLES if members.logits is not None else ("vote",):
        fused = np.flatnonzero(
            (rows["kind"] == ENSEMBLE_KIND) & (rows["aggregation"] == aggregation)
        )
        fused = fused[np.lexsort((keys[fused], ways[fused]))]
        stored[aggregation] = _gather(
            arrays.predictions, arrays.pred_offsets[fused], queries[fused]
        )
    at_prediction = at_logit = at_query = 0
    for way_count in np.unique(members.ways):
        count = int(members.queries[members.ways == way_count].sum()) // configs
        block = members.predictions[at_prediction : at_prediction + configs * count]
        logits = np.zeros((0, count, int(way_count)))
        if members.logits is not None:
            size = configs * count * int(way_count)
            logits = members.logits[at_logit : at_logit + size].reshape(configs, count, -1)
            at_logit += size
        for aggregation, predictions in stored.items():
            recomputed, _ = fuse(
                aggregation,
                logits=logits,
                predictions=block.reshape(configs, count),
                n_way=int(way_count),
            )
            if not np.array_equal(predictions[at_query : at_query + count], recomputed):
                return False
        at_prediction += configs * count
        at_query += count
    return True
