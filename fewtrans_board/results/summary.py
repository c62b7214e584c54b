"""Summaries of runs: mean ± 95% CI per dataset and aggregation, HPE penalty, sensitivity.

:func:`summarize` is what the store's index, the site and ``results summary`` read;
:func:`paper_forms` adds what FewTrans prints beyond a mean and its CI (``results summary
--spread --grid --cost``): Fig. 1's single-task spread, Table III's configurations and lr
ensemble, Table IX's time per 600 tasks.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from fewtrans_board.results.collapse import run_collapse
from fewtrans_board.results.cost import run_cost
from fewtrans_board.results.documents import AdapterRef, ShardRef
from fewtrans_board.results.grid_table import Labels, grid_table
from fewtrans_board.results.load import RunResults
from fewtrans_board.results.per_shot import per_shot, shot_seed_pairs
from fewtrans_board.results.spread import spread_by_shots
from fewtrans_board.stats.base_novel import harmonic_mean, harmonic_mean_ci
from fewtrans_board.stats.intervals import mean_ci

__all__ = [
    "AGGREGATIONS",
    "adapter_configuration",
    "harmonic_mean",
    "paper_forms",
    "peak_memory",
    "summarize",
    "trainable_parameters",
]

AGGREGATIONS = ("hpe", "logit-mean", "vote", "oracle", "mean-single")


def adapter_configuration(adapter: AdapterRef) -> dict[str, Any]:
    """Non-axis hyperparameters of a run that differ from the adapter's registered defaults.

    Args:
        adapter: a run's adapter record (the centre and the schema recorded at evaluate time).

    Returns:
        ``{field: value}``; empty when the run records no schema or uses every default.
    """
    schema, centre = adapter.schema or {}, adapter.centre or {}
    return {
        f["name"]: centre[f["name"]]
        for f in schema.get("fields", [])
        if f.get("hpe") is None and f["name"] in centre and centre[f["name"]] != f.get("default")
    }


def _shard_refs(run: RunResults) -> list[ShardRef]:
    return [ShardRef.of(m["shard"]) for m in run.shard_meta if isinstance(m.get("shard"), dict)]


def peak_memory(run: RunResults) -> dict[str, Any] | None:
    """The largest peak memory any shard of the run recorded (FewTrans Table IX).

    Args:
        run: the loaded run.

    Returns:
        ``{bytes, mib, measure, device, baseline_bytes, growth_bytes, shards, shards_measured}``
        of the shard with the largest peak (``baseline_bytes``/``growth_bytes`` ``None``
        where its measure has no baseline); ``None`` when no shard recorded one (runs
        evaluated before peaks were measured).
    """
    peaks = [s.peak_memory for s in _shard_refs(run) if s.peak_memory is not None]
    if not peaks:
        return None
    top = max(peaks, key=lambda p: p.bytes)
    return {
        "bytes": top.bytes,
        "mib": top.bytes / 2**20,
        "measure": top.measure,
        "measures": sorted({p.measure for p in peaks}),
        "device": top.device,
        "baseline_bytes": top.baseline_bytes,
        "growth_bytes": top.growth_bytes,
        "shards": len(run.shard_meta),
        "shards_measured": len(peaks),
    }


def trainable_parameters(run: RunResults) -> dict[str, Any] | None:
    """Trainable parameters per fit over the shards that counted them (display only).

    Args:
        run: the loaded run.

    Returns:
        ``{measure, per_configuration, max, per_fit, largest, episodes, shards,
        shards_counted}``: per configuration (grid order) the mean count over the counted
        episodes and the largest; ``per_fit`` their mean over configurations and episodes,
        ``largest`` the largest of all. ``None`` when no shard counted (runs evaluated before
        counts were recorded). See :mod:`fewtrans_board.runner.worker.trainable`.
    """
    refs = _shard_refs(run)
    counts = [s.trainable_parameters for s in refs if s.trainable_parameters is not None]
    sizes = {len(c.total) for c in counts}
    if not counts or len(sizes) != 1:
        return None
    episodes = sum(c.episodes for c in counts)
    totals = [sum(c.total[i] for c in counts) for i in range(sizes.pop())]
    largest = [max(c.max[i] for c in counts) for i in range(len(totals))]
    return {
        "measure": counts[0].measure,
        "per_configuration": [t / episodes for t in totals],
        "max": largest,
        "per_fit": sum(totals) / (episodes * len(totals)),
        "largest": max(largest),
        "episodes": episodes,
        "shards": len(run.shard_meta),
        "shards_counted": len(counts),
    }


def summarize(
    run: RunResults, ddof: int = 1, manifest: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Summary of one run.

    Args:
        run: the loaded run.
        ddof: the CI's ddof (the sub-benchmark's).
        manifest: the frozen manifest's metadata, which fixes each k-shot episode's
            (K, seed); default the run's own record of its manifest.

    Returns:
        A dict with the run's labels, per-aggregation ``{mean, ci95, n, ddof}``, the HPE
        penalty (oracle minus HPE, points) and the sensitivity (standard deviation of the
        configurations' mean accuracies, points); base-to-novel runs add ``novel`` and
        ``harmonic_mean`` per aggregation, each ``{mean, ci95, n, ddof}``; k-shot (CLIP)
        runs add ``per_shot`` per aggregation: per K the seeds' accuracies, their mean and
        spread, and the average over shots (their headline). Runs that recorded
        their peak memory add ``peak_memory`` (:func:`peak_memory`), runs that counted
        their trainable parameters ``trainable_parameters`` (:func:`trainable_parameters`).
        ``collapse`` says on how many episodes the headline fusion's predictions fell on
        one class (:func:`~fewtrans_board.results.collapse.run_collapse`).
    """
    aggregations = run.aggregations()
    _, matrix, _ = run.config_matrix()
    config_means = np.nanmean(matrix, axis=0)
    stats = {name: mean_ci(aggregations[name], ddof=ddof).to_dict() for name in AGGREGATIONS}
    record = run.provenance
    summary: dict[str, Any] = {
        "run_id": record.run_id,
        "path": str(run.path),
        "model": record.model.name,
        "adapter": record.adapter.name,
        "dataset": run.dataset,
        "hpe_protocol": record.hpe.name,
        "headline": record.hpe.aggregation,
        "configurations": int(matrix.shape[1]),
        "episodes": int(matrix.shape[0]),
        "complete": run.complete,
        "transductive": record.adapter.transductive,
        "configuration": adapter_configuration(run.provenance.adapter),
        "aggregations": stats,
        "hpe_penalty": float(stats["oracle"]["mean"] - stats["hpe"]["mean"]),
        "sensitivity": float(np.std(config_means)) if len(config_means) > 1 else 0.0,
        "collapse": run_collapse(run).to_dict(),
    }
    peak = peak_memory(run)
    if peak is not None:  # runs from before peaks were measured keep the summary they had
        summary["peak_memory"] = peak
    trainable = trainable_parameters(run)
    if trainable is not None:  # the same for runs from before counts were recorded
        summary["trainable_parameters"] = trainable
    if run.has_novel:
        novel = run.aggregations("novel")
        summary["novel"] = {
            name: mean_ci(novel[name], ddof=ddof).to_dict() for name in AGGREGATIONS
        }
        summary["harmonic_mean"] = {
            name: harmonic_mean_ci(aggregations[name], novel[name], ddof=ddof).to_dict()
            for name in AGGREGATIONS
        }
    pairs = shot_seed_pairs(manifest if manifest is not None else record.manifest.to_json())
    if pairs is not None:
        episodes, _, _ = run.config_matrix()
        summary["per_shot"] = {
            name: per_shot(episodes, aggregations[name], pairs).to_dict() for name in AGGREGATIONS
        }
    return summary


def paper_forms(
    run: RunResults, ddof: int = 1, query_labels: Labels | None = None
) -> dict[str, Any]:
    """What FewTrans prints of a run beyond its mean ± CI (``results summary --spread ...``).

    Kept apart from :func:`summarize`, whose dict the store's index and the site record.

    Args:
        run: the loaded run.
        ddof: the standard deviation's ddof (the sub-benchmark's).
        query_labels: the manifest's query labels per episode, for the lr ensemble
            (:func:`~fewtrans_board.results.grid_table.labels_for`).

    Returns:
        ``single_task``: per shot count the single-task spread of the headline accuracy
        (Fig. 1, :func:`~fewtrans_board.results.spread.spread_by_shots`); ``cost``: the
        time of the run's tasks and of 600 (Table IX, :func:`~fewtrans_board.results.cost.run_cost`;
        the peak memory is :func:`summarize`'s ``peak_memory``); ``grid``: each configuration,
        their average and the lr ensemble (Table III,
        :func:`~fewtrans_board.results.grid_table.grid_table`; ``None`` for one configuration).
    """
    return {
        "single_task": [s.to_dict() for s in spread_by_shots(run, ddof=ddof)],
        "cost": run_cost(run).to_dict(),
        "grid": grid_table(run, query_labels),
    }
