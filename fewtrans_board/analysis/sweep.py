"""A hyperparameter sweep's report: FewTrans Table I and Fig. 2 (§IV-B1, IV-B2).

A sweep run (``fewtrans-board sweep``) scores every configuration of an explicit grid on
every episode of a manifest. From its stored rows:

- **Table I**, optimal hyperparameters vary from task to task: per episode, the
  configuration with the best query accuracy (ties: every tied configuration is listed,
  the lowest index is reported as *the* best);
- **Fig. 2**, performance is sensitive to hyperparameters: per configuration, the mean
  accuracy over episodes with its 95% CI (sample std, FewTrans's ``ddof=1``);
- the **average-optimal** configuration, the one with the best mean accuracy over all
  episodes (what a validation set of the whole dataset would pick; FewTrans Table II). It
  reads every episode's query labels, so it is an oracle, not a protocol.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from fewtrans_board.analysis.report import provenance
from fewtrans_board.core.errors import FewtransError
from fewtrans_board.figures.charts import layer_lines
from fewtrans_board.results.load import RunResults
from fewtrans_board.stats.intervals import mean_ci


def varied_fields(
    configs: Sequence[dict[str, Any]], order: Sequence[str] | None = None
) -> list[str]:
    """The fields whose value differs between configurations.

    Args:
        configs: the configurations.
        order: the sweep's axes, whose order the result follows (others come after, by name).
    """
    if not configs:
        return []
    varied = [name for name in configs[0] if len({json.dumps(c[name]) for c in configs}) > 1]
    first = [name for name in (order or []) if name in varied]
    return first + sorted(name for name in varied if name not in first)


def config_label(config: dict[str, Any], fields: Sequence[str]) -> str:
    """``field=value, ...`` of the varied fields (``centre`` when nothing varies)."""
    return ", ".join(f"{name}={config[name]}" for name in fields) or "centre"


def average_optimal(matrix: np.ndarray) -> int:
    """The configuration with the best mean accuracy over episodes (ties: lowest index)."""
    return int(np.nanargmax(np.nanmean(matrix, axis=0)))


def sweep_data(run: RunResults) -> dict[str, Any]:
    """Per-episode optima and per-configuration means of a run's configuration matrix.

    Args:
        run: a sweep run (or any run: its grid is read the same way).

    Returns:
        ``{configs, fields, per_config, per_episode, average_optimal, distinct_optima}``.

    Raises:
        FewtransError: the run has no configuration rows.
    """
    episodes, matrix, names = run.config_matrix()
    if matrix.size == 0:
        raise FewtransError(f"run {run.path} has no configuration rows")
    configs = [json.loads(name) for name in names]
    fields = varied_fields(configs, list(run.provenance.hpe.sweep_axes or {}))
    per_config = []
    for index, config in enumerate(configs):
        stats = mean_ci(matrix[:, index][np.isfinite(matrix[:, index])], ddof=1)
        per_config.append(
            {
                "index": index,
                "label": config_label(config, fields),
                "config": {name: config[name] for name in fields},
                **stats.to_dict(),
            }
        )
    per_episode = []
    for row, episode in enumerate(episodes):
        accuracy = matrix[row]
        best = float(np.nanmax(accuracy))
        tied = [int(i) for i in np.flatnonzero(accuracy == best)]
        per_episode.append(
            {
                "episode": int(episode),
                "best_index": tied[0],
                "best": {name: configs[tied[0]][name] for name in fields},
                "accuracy": best,
                "tied": tied,
                "worst_accuracy": float(np.nanmin(accuracy)),
            }
        )
    optimal = average_optimal(matrix)
    return {
        "configs": configs,
        "fields": fields,
        "per_config": per_config,
        "per_episode": per_episode,
        "average_optimal": {
            "index": optimal,
            "config": {name: configs[optimal][name] for name in fields},
            **per_config[optimal],
        },
        "distinct_optima": len({e["best_index"] for e in per_episode}),
    }


def sweep_report(run: RunResults) -> tuple[dict[str, Any], str]:
    """The JSON report and SVG figure of a sweep run.

    Raises:
        FewtransError: the run has no configuration rows.
    """
    record = run.provenance
    data = {
        "analysis": "sweep",
        "model": record.model.name,
        "adapter": record.adapter.name,
        "dataset": run.dataset,
        "run": str(run.path),
        "run_id": record.run_id,
        "protocol": record.hpe.name,
        "axes": record.hpe.sweep_axes,
        "centre": record.adapter.centre,
        "episodes": len(run.config_matrix()[0]),
        "complete": run.complete,
        **sweep_data(run),
        "paper": {
            "table": "FewTrans Table I (per-task optima) and Fig. 2 (sensitivity)",
            "claim": "optimal hyperparameters vary from task to task",
        },
        "provenance": provenance({"run": str(run.path), "run_id": record.run_id}),
    }
    rows = data["per_config"]
    means = [r["mean"] for r in rows]
    figure = layer_lines(
        {
            "mean": means,
            "mean - 95% CI": [r["mean"] - r["ci95"] for r in rows],
            "mean + 95% CI": [r["mean"] + r["ci95"] for r in rows],
        },
        x_labels=[f"c{r['index']}" for r in rows],
        x_title="configuration (" + ", ".join(data["fields"] or ["centre"]) + ")",
        y_title="query accuracy (%)",
        title=f"Sweep of {record.adapter.name} on {run.dataset}: mean accuracy per configuration",
    )
    return data, str(figure)
