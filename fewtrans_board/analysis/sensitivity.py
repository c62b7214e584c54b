"""Hyperparameter sensitivity vs HPE penalty across runs (FewTrans §IV, Fig. 4 left).

For each run: *sensitivity* is the standard deviation of the configurations' mean accuracies
over the HPE grid, *penalty* is oracle-best minus HPE accuracy (points). Across runs
(method x dataset entries), FewTrans reports a positive Pearson correlation (r = 0.38):
volatile methods are pulled down by their poor configurations.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fewtrans_board.analysis.report import provenance
from fewtrans_board.core.errors import FewtransError
from fewtrans_board.figures.charts import scatter
from fewtrans_board.results.load import RunResults
from fewtrans_board.results.summary import summarize
from fewtrans_board.stats.correlation import pearson

PAPER_R = 0.38


def sensitivity_points(
    runs: Sequence[RunResults], summaries: Sequence[Mapping[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """One point per run with more than one configuration (single-config runs have no spread).

    Args:
        runs: the loaded runs.
        summaries: each run's :func:`~fewtrans_board.results.summary.summarize`, aligned
            with ``runs``, when the caller already has them (the site build does); the
            fields used here do not depend on the summary's ``ddof``. Default: summarise.

    Returns:
        ``{run_id, path, model, adapter, dataset, configurations, sensitivity, penalty}``
        per run, in input order.
    """
    if summaries is None:
        summaries = [summarize(run) for run in runs]
    elif len(summaries) != len(runs):
        raise ValueError(f"{len(summaries)} summaries for {len(runs)} runs")
    points = []
    for summary in summaries:
        if summary["configurations"] < 2:
            continue
        points.append(
            {
                "run_id": summary["run_id"],
                "path": summary["path"],
                "model": summary["model"],
                "adapter": summary["adapter"],
                "dataset": summary["dataset"],
                "configurations": summary["configurations"],
                "sensitivity": summary["sensitivity"],
                "penalty": summary["hpe_penalty"],
            }
        )
    return points


def sensitivity_report(
    runs: Sequence[RunResults], summaries: Sequence[Mapping[str, Any]] | None = None
) -> tuple[dict[str, Any], str]:
    """Pearson correlation of sensitivity and HPE penalty across runs, with its figure.

    Args:
        runs: the loaded runs.
        summaries: their summaries when the caller has them (see :func:`sensitivity_points`).

    Raises:
        FewtransError: fewer than three runs with an HPE grid (no correlation to report).
    """
    points = sensitivity_points(runs, summaries)
    if len(points) < 3:
        raise FewtransError(
            f"sensitivity needs at least 3 runs with an HPE grid (more than one configuration); "
            f"got {len(points)} of {len(runs)} runs. Evaluate more method x dataset entries."
        )
    correlation = pearson([p["sensitivity"] for p in points], [p["penalty"] for p in points])
    data = {
        "analysis": "sensitivity",
        "points": points,
        "pearson": correlation.to_dict(),
        "paper": {"pearson_r": PAPER_R, "source": "FewTrans §IV (Fig. 4, left)"},
        "provenance": provenance({"runs": [p["path"] for p in points]}),
    }
    figure = scatter(
        [(f"{p['adapter']} / {p['dataset']}", p["sensitivity"], p["penalty"]) for p in points],
        x_title="sensitivity (std of configuration means, points)",
        y_title="HPE penalty (oracle - HPE, points)",
        title=f"Sensitivity vs HPE penalty: Pearson r = {correlation.coefficient:.2f}",
    )
    return data, str(figure)
