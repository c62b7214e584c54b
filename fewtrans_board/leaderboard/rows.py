"""Recompute what a run's rows claim: every episode once, predictions, accuracies, ensembles.

Rows are checked against the frozen manifest's labels and the protocol's grid, never against
anything else the bundle says: a stored accuracy must equal the one its predictions give, a
configuration's predictions must be the argmax of its logits, a stored ensemble prediction
the fusion of the stored members (vote: their predictions; logit-mean: their logits).

A stored entry read without its logits blobs (``RunResults.blobs`` not empty) is checked
for everything but what needs logits: accuracies, completeness, the grid and the vote
ensembles; its logit-mean rows are rechecked when the blobs are fetched.

Every check first runs on all groups at once (:mod:`~fewtrans_board.leaderboard.row_arrays`);
only a run that fails there (or has a form only the group checks handle) is checked group
by group, which names the first fault.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fewtrans_board.core.canonical import canonical_json
from fewtrans_board.core.errors import SubmissionError
from fewtrans_board.episodes.manifest import Manifest, ManifestEpisode
from fewtrans_board.hpe.aggregate import fuse
from fewtrans_board.leaderboard.row_arrays import RowArrays, all_rows_pass
from fewtrans_board.results.load import RunResults
from fewtrans_board.results.row_schema import (
    CONFIG_KIND,
    ENSEMBLE_KIND,
    ENSEMBLES,
    accuracy_percent,
)


def check_rows(run: RunResults, manifest: Manifest, grid: list[dict[str, Any]]) -> bool:
    """Check every (episode, split) group of a run against the manifest and the grid.

    Returns:
        Whether the logits were checked too (``False``: a stored run read without its
        blobs, whose logit-mean fusions were not recomputed).

    Raises:
        SubmissionError: ``incomplete``, ``duplicate-episode``, ``bad-predictions``,
            ``accuracy-mismatch``, ``grid-mismatch``, ``bad-logits``,
            ``prediction-mismatch``, ``ensemble-mismatch`` or ``bad-rows`` (a stream index
            that is not the manifest's), naming the episode and row.
    """
    with_logits = run.logits_present
    arrays = RowArrays.of(run)
    episodes = manifest.episodes()
    expected_configs = [canonical_json(c) for c in grid]
    if not all_rows_pass(arrays, episodes, expected_configs, with_logits):
        _check_each_group(run.dataset, arrays, episodes, expected_configs, with_logits)
    return with_logits


def _check_each_group(
    dataset: str,
    columns: RowArrays,
    episodes: list[ManifestEpisode],
    expected_configs: list[str],
    with_logits: bool,
) -> None:
    """The group checks one (episode, split) group at a time, raising at the first fault."""
    rows = columns.rows
    groups: dict[tuple[int, str], list[int]] = {}
    for i, (e, split) in enumerate(zip(rows["episode"], rows["split"], strict=True)):
        groups.setdefault((int(e), str(split)), []).append(i)
    expected_groups = {(i, "base") for i in range(len(episodes))}
    expected_groups |= {(i, "novel") for i, ep in enumerate(episodes) if ep.novel_query}
    missing = sorted(expected_groups - set(groups))
    extra = sorted(set(groups) - expected_groups)
    if missing or extra:
        raise SubmissionError(
            "incomplete",
            f"{dataset}: (episode, split) groups missing {missing[:10]} or unknown {extra[:10]}; "
            "every episode of the manifest must appear exactly once",
        )
    stream = rows["stream_index"]
    for (index, split), row_ids in sorted(groups.items()):
        episode = episodes[index]
        if (stream[row_ids] != episode.stream_index).any():
            raise SubmissionError(
                "bad-rows",
                f"{dataset}: episode {index} ({split}) rows give stream index "
                f"{sorted(set(stream[row_ids].tolist()))[:3]}, the manifest's is "
                f"{episode.stream_index}",
            )
        pairs = episode.novel_query if split == "novel" else episode.query
        labels = np.array([label for _, label in pairs])
        ways = len(episode.novel_classes) if split == "novel" else episode.ways
        name = f"{dataset}: episode {index} ({split})"
        _check_group(name, columns, row_ids, labels, ways, expected_configs, with_logits)


def _check_group(
    name: str,
    columns: RowArrays,
    row_ids: list[int],
    labels: np.ndarray,
    ways: int,
    expected_configs: list[str],
    with_logits: bool = True,
) -> None:
    """Check one episode's rows of one split: completeness, predictions, accuracies, ensembles.

    Without logits (``with_logits=False``) the logit checks and the logit-mean fusion are
    left out.
    """
    rows = columns.rows
    config_rows = [i for i in row_ids if rows["kind"][i] == CONFIG_KIND]
    ensemble_ids = [i for i in row_ids if rows["kind"][i] == ENSEMBLE_KIND]
    ensemble_rows = {str(rows["aggregation"][i]): i for i in ensemble_ids}
    indices = sorted(int(rows["config_index"][i]) for i in config_rows)
    if len(indices) != len(set(indices)) or len(ensemble_ids) != len(ensemble_rows):
        raise SubmissionError("duplicate-episode", f"{name} appears more than once")
    if indices != list(range(len(expected_configs))) or set(ensemble_rows) != set(ENSEMBLES):
        raise SubmissionError(
            "incomplete",
            f"{name} has configurations {indices[:5]}..., ensembles "
            f"{sorted(ensemble_rows)}; expected all {len(expected_configs)} and "
            f"{', '.join(ENSEMBLES)}",
        )
    q, w = len(labels), ways
    member_logits: list[np.ndarray] = [np.zeros(0)] * len(expected_configs)
    member_predictions: list[np.ndarray] = [np.zeros(0)] * len(expected_configs)
    for i in [*config_rows, *ensemble_rows.values()]:
        where = f"{name}, row {rows['kind'][i]} {rows['aggregation'][i] or rows['config_index'][i]}"
        pred = _checked_predictions(columns, i, where, labels, w)
        if rows["kind"][i] != CONFIG_KIND:
            continue
        c = int(rows["config_index"][i])
        if str(rows["config"][i]) != expected_configs[c]:
            raise SubmissionError(
                "grid-mismatch",
                f"{where}: configuration {rows['config'][i]} is not grid point {c} {expected_configs[c]}",
            )
        member_predictions[c] = pred
        if with_logits:
            member_logits[c] = _checked_logits(columns, i, where, pred, w)
    stacked_predictions = np.stack(member_predictions)
    stacked_logits = np.stack(member_logits) if with_logits else np.zeros((0, q, w))
    for aggregation in ENSEMBLES if with_logits else ("vote",):
        recomputed, _ = fuse(
            aggregation, logits=stacked_logits, predictions=stacked_predictions, n_way=w
        )
        if not np.array_equal(columns.prediction(ensemble_rows[aggregation]), recomputed):
            raise SubmissionError(
                "ensemble-mismatch",
                f"{name}, {aggregation} predictions differ from the ones recomputed "
                f"from the stored member {'logits' if aggregation == 'logit-mean' else 'predictions'}",
            )


def _checked_predictions(
    columns: RowArrays, i: int, where: str, labels: np.ndarray, w: int
) -> np.ndarray:
    """Row ``i``'s predictions: the manifest's shape, labels in range, its stored accuracy."""
    rows, q = columns.rows, len(labels)
    if int(rows["n_way"][i]) != w or int(rows["n_query"][i]) != q:
        raise SubmissionError(
            "bad-predictions",
            f"{where}: n_way/n_query {rows['n_way'][i]}/{rows['n_query'][i]} disagree "
            f"with the manifest ({w}/{q})",
        )
    pred = columns.prediction(i)
    if len(pred) != q or (pred < 0).any() or (pred >= w).any():
        raise SubmissionError(
            "bad-predictions",
            f"{where}: {len(pred)} predictions with values {sorted(set(pred.tolist()))[:8]}, "
            f"expected {q} labels in [0, {w})",
        )
    accuracy = accuracy_percent(pred, labels)
    if abs(accuracy - float(rows["accuracy"][i])) > 1e-9:
        raise SubmissionError(
            "accuracy-mismatch",
            f"{where}: stored accuracy {rows['accuracy'][i]:.4f} but predictions against the "
            f"manifest labels give {accuracy:.4f}",
        )
    return pred


def _checked_logits(columns: RowArrays, i: int, where: str, pred: np.ndarray, w: int) -> np.ndarray:
    """Row ``i``'s logits as ``[Q, W]``: finite, of the manifest's shape, argmax its predictions."""
    q = len(pred)
    values = columns.logit(i)
    if not columns.logit_valid[i] or len(values) != q * w or not np.isfinite(values).all():
        raise SubmissionError(
            "bad-logits", f"{where}: {len(values)} logits (expected {q}x{w} finite values)"
        )
    logits = values.reshape(q, w)
    # The runner predicts the argmax of the logits before storing them as float16; the
    # rounding is monotone, so a stored prediction is among the stored row's maxima.
    if (logits[np.arange(q), pred] != logits.max(axis=1)).any():
        raise SubmissionError(
            "prediction-mismatch",
            f"{where}: stored predictions are not the argmax of the stored logits",
        )
    return logits
