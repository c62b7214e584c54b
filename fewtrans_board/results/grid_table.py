"""Each configuration of the grid and the learning-rate ensemble (FewTrans Table III).

FewTrans Table III sets the ensemble beside every single configuration of a 3x3
learning-rate grid, labelled ``(i, j)``, their average ("Avg"), the "lr ensemble" (the
members that differ only in learning rate, fused) and the "lr+epoch ensemble" (every
member: the HPE headline). A run's grid is split here by its other varied axes (the
epochs of ``fewtrans-paper``; a fixed-epoch grid is one group). Per group: every
configuration's mean accuracy, labelled by its 1-based position on each learning-rate
axis in the protocol's axis order (learning-rate fields by name, e.g. ``lr_backbone``
then ``lr_head``), their average, and the group's lr ensemble fused with the run's own
rule (logit averaging, FewTrans Eq. 1; the vote of ``fewtrans-reference``).

The lr ensemble is recomputed from the stored member predictions (vote) or logits
(logit averaging, float16 as stored, averaged in float32 as at evaluate time), and
scored against the frozen manifest's query labels: result rows store accuracies, not
labels. Without the manifest (or without the logits of a stored entry whose blobs were
not fetched) it is ``None`` with the reason.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fewtrans_board.core.canonical import canonical_json
from fewtrans_board.hpe.aggregate import fuse
from fewtrans_board.results.load import RunResults
from fewtrans_board.results.row_schema import CONFIG_KIND, accuracy_percent

Labels = Mapping[int, np.ndarray]
"""Query labels of each episode (manifest order), by episode index."""
Axis = tuple[str, list[Any]]
"""A varied grid axis: its field and its distinct values, ascending."""


def manifest_labels(path: Path) -> tuple[str, dict[int, np.ndarray]]:
    """The sha256 of a frozen manifest and its query labels per episode.

    Args:
        path: the manifest file.

    Raises:
        ManifestError: an unreadable or damaged manifest.
    """
    from fewtrans_board.episodes.manifest import Manifest

    manifest = Manifest.load(path)
    labels = {
        e.index: np.array([label for _, label in e.query], dtype=np.int64)
        for e in manifest.episodes()
    }
    return manifest.sha256, labels


def labels_for(
    run: RunResults,
    candidates: Sequence[Path],
    read: dict[Path, tuple[str, dict[int, np.ndarray]]] | None = None,
) -> dict[int, np.ndarray] | None:
    """The query labels of ``run``'s manifest, from the first candidate with its sha256.

    Args:
        run: the loaded run.
        candidates: manifest files to try (missing ones are skipped).
        read: manifests read before (filled in), so runs sharing one read it once.
    """
    wanted = run.provenance.manifest.sha256
    read = {} if read is None else read
    for path in candidates:
        if path.is_file():
            if path not in read:
                read[path] = manifest_labels(path)
            sha, labels = read[path]
            if sha == wanted:
                return labels
    return None


def _varied_axes(
    grid: list[dict[str, Any]], roles: Mapping[str, str]
) -> tuple[list[Axis], list[Axis]]:
    """``(lr axes, other axes)``: ``[(field, sorted distinct values)]`` of varied fields."""
    lr: list[Axis] = []
    other: list[Axis] = []
    for name in sorted(grid[0]):
        values = {canonical_json(c[name]): c[name] for c in grid}
        if len(values) < 2:
            continue
        axis = (name, sorted(values.values(), key=_order))
        (lr if roles.get(name) == "lr" else other).append(axis)
    return lr, other


def _order(value: Any) -> tuple[int, Any]:
    """Numbers ascending, then everything else by its canonical text."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return (0, float(value))
    return (1, canonical_json(value))


def _position(config: dict[str, Any], axes: list[Axis]) -> list[int]:
    return [
        1 + [canonical_json(v) for v in values].index(canonical_json(config[name]))
        for name, values in axes
    ]


def grid_table(run: RunResults, labels: Labels | None = None) -> dict[str, Any] | None:
    """The run's configurations by learning-rate position, per group of its other axes.

    Args:
        run: the loaded run.
        labels: query labels per episode (:func:`labels_for`); without them the lr
            ensembles are ``None``.

    Returns:
        ``{aggregation, lr_axes, group_axes, groups, hpe, note}``: each group's ``values``
        (of the other axes), ``cells`` (``label`` like ``"(1,2)"``, ``position``,
        ``config_index``, ``mean``), ``average`` and ``lr_ensemble``; ``hpe`` the
        whole grid's headline mean (the lr+epoch ensemble). ``None`` for a run of one
        configuration.
    """
    record = run.provenance
    grid = [dict(c) for c in record.identity.grid]
    if len(grid) < 2:
        return None
    _, matrix, _ = run.config_matrix()
    means = np.nanmean(matrix, axis=0)
    lr_axes, other_axes = _varied_axes(grid, record.hpe.roles)
    groups: dict[str, dict[str, Any]] = {}
    for index, config in enumerate(grid):
        values = {name: config[name] for name, _ in other_axes}
        group = groups.setdefault(
            canonical_json(values), {"values": values, "cells": [], "members": []}
        )
        position = _position(config, lr_axes)
        group["cells"].append(
            {
                "label": "(" + ",".join(map(str, position)) + ")",
                "position": position,
                "config_index": index,
                "mean": float(means[index]),
            }
        )
        group["members"].append(index)
    aggregation = record.hpe.aggregation
    note = _unavailable(run, labels, aggregation, bool(lr_axes))
    table = []
    for group in groups.values():
        group["cells"].sort(key=lambda c: c["position"])
        members = group.pop("members")
        group["average"] = float(np.mean([c["mean"] for c in group["cells"]]))
        group["lr_ensemble"] = (
            None
            if note is not None or labels is None
            else float(np.mean(fused_accuracy(run, members, labels, aggregation)))
        )
        table.append(group)
    return {
        "aggregation": aggregation,
        "lr_axes": [{"field": n, "values": v} for n, v in lr_axes],
        "group_axes": [{"field": n, "values": v} for n, v in other_axes],
        "groups": table,
        "hpe": float(np.mean(run.aggregations()["hpe"])),
        "note": note,
    }


def _unavailable(
    run: RunResults, labels: Labels | None, aggregation: str, has_lr_axis: bool
) -> str | None:
    """Why the lr ensemble cannot be recomputed (``None``: it can)."""
    if not has_lr_axis:
        return "no learning-rate axis varies in this grid"
    if labels is None:
        return "needs the run's manifest (its query labels): pass --manifest"
    if aggregation == "logit-mean" and not run.logits_present:
        return "the stored logits were not fetched (their blobs): read the run with its logits"
    return None


def fused_accuracy(
    run: RunResults, members: Sequence[int], labels: Labels, aggregation: str
) -> np.ndarray:
    """Per episode (sorted), the accuracy of ``members`` fused by ``aggregation``.

    Args:
        run: the loaded run (base-split rows are read).
        members: configuration indices to fuse.
        labels: query labels per episode.
        aggregation: ``"logit-mean"`` or ``"vote"`` (:func:`~fewtrans_board.hpe.aggregate.fuse`).

    Raises:
        KeyError: an episode of the run has no labels (another manifest).
    """
    import pyarrow as pa

    mask = (
        (run.column("kind") == CONFIG_KIND)
        & (run.column("split") == "base")
        & np.isin(run.column("config_index"), list(members))
    )
    rows = run.table.filter(pa.array(mask)).select(
        ["episode", "config_index", "n_way", "predictions", "logits"]
    )
    by_episode: dict[int, dict[int, dict[str, Any]]] = {}
    for row in rows.to_pylist():
        by_episode.setdefault(int(row["episode"]), {})[int(row["config_index"])] = row
    accuracy = []
    for episode in sorted(by_episode):
        chosen = [by_episode[episode][m] for m in members]
        n_way = int(chosen[0]["n_way"])
        predictions = np.array([r["predictions"] for r in chosen], dtype=np.int64)
        logits = (
            np.array([r["logits"] for r in chosen], dtype=np.float16).reshape(
                len(chosen), predictions.shape[1], n_way
            )
            if aggregation == "logit-mean"
            else np.zeros((len(chosen), predictions.shape[1], n_way), dtype=np.float16)
        )
        fused, _ = fuse(aggregation, logits=logits, predictions=predictions, n_way=n_way)
        accuracy.append(accuracy_percent(fused, labels[episode]))
    return np.array(accuracy)
