"""HPE accuracy under other grid spacings (FewTrans §V-A, Fig. 4 right).

FewTrans spreads each learning-rate axis x{1/5, 1, 5} around the centre and reports that
HPE's accuracy hardly moves with spacings of 3x, 5x or 10x the centre learning rate (the
released code carries the x3 and x10 grids as commented alternatives). Runs of one method
on one manifest under ``PROTOCOL@xS`` variants
(:meth:`~fewtrans_board.hpe.protocols.HpeProtocol.spaced`) and under ``PROTOCOL`` itself
are grouped; per group and spacing the report gives the HPE accuracy (the protocol's
headline fusion) with its 95% CI, and the paired difference to the protocol's own spacing
over the episodes both runs hold.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from fewtrans_board.analysis.report import provenance
from fewtrans_board.core.errors import FewtransError
from fewtrans_board.figures.charts import layer_lines
from fewtrans_board.hpe.protocols import HpeProtocol, get_hpe_protocol
from fewtrans_board.results.load import RunResults
from fewtrans_board.stats.intervals import mean_ci


def spacing_of(run: RunResults) -> tuple[HpeProtocol, int]:
    """The named protocol a run's protocol spaces, and its spacing.

    Raises:
        FewtransError: the run's protocol has no learning-rate grid (``single``,
            ``published``, a sweep) or the adapter has no learning-rate axis.
    """
    protocol = get_hpe_protocol(run.provenance.hpe.name)
    spacing = protocol.spacing
    if spacing is None:
        raise FewtransError(
            f"run {run.path} was evaluated under {protocol.name}, which has no learning-rate "
            "grid to space"
        )
    if "lr" not in run.provenance.hpe.roles.values():
        raise FewtransError(
            f"run {run.path}: adapter {run.provenance.adapter.name!r} has no learning-rate "
            "axis, so its grid does not depend on the spacing"
        )
    return get_hpe_protocol(protocol.base or protocol.name), spacing


def _group_key(run: RunResults, base: HpeProtocol) -> tuple[str, ...]:
    record = run.provenance
    return (
        record.model.name,
        record.adapter.name,
        run.dataset,
        record.manifest.sha256,
        base.name,
        json.dumps(record.adapter.centre, sort_keys=True),
    )


def spacing_groups(runs: Sequence[RunResults]) -> list[dict[str, Any]]:
    """Per (model, adapter, manifest, protocol, centre): HPE accuracy per spacing.

    Raises:
        FewtransError: a run without a spaceable grid, or two runs of one spacing in a group.
    """
    grouped: dict[tuple[str, ...], dict[int, RunResults]] = {}
    bases: dict[tuple[str, ...], HpeProtocol] = {}
    for run in runs:
        base, spacing = spacing_of(run)
        key = _group_key(run, base)
        bases[key] = base
        group = grouped.setdefault(key, {})
        if spacing in group:
            raise FewtransError(
                f"runs {group[spacing].path} and {run.path} are the same method, manifest and "
                f"spacing x{spacing}; pass one of them"
            )
        group[spacing] = run
    groups = []
    for key, by_spacing in grouped.items():
        base = bases[key]
        reference = base.spacing
        hpe = {s: _hpe(run) for s, run in by_spacing.items()}
        rows = []
        for spacing in sorted(by_spacing):
            run = by_spacing[spacing]
            episodes, accuracy = hpe[spacing]
            row: dict[str, Any] = {
                "spacing": spacing,
                "protocol": run.provenance.hpe.name,
                "run": str(run.path),
                "run_id": run.provenance.run_id,
                "configurations": run.provenance.hpe.grid_size,
                "hpe": mean_ci(accuracy, ddof=1).to_dict(),
                "difference_to_reference": None,
            }
            if reference in hpe and spacing != reference:
                ref_episodes, ref_accuracy = hpe[reference]
                common, mine, theirs = np.intersect1d(episodes, ref_episodes, return_indices=True)
                if len(common):
                    difference = accuracy[mine] - ref_accuracy[theirs]
                    row["difference_to_reference"] = mean_ci(difference, ddof=1).to_dict()
            rows.append(row)
        model, adapter, dataset, _, protocol, _ = key
        groups.append(
            {
                "model": model,
                "adapter": adapter,
                "dataset": dataset,
                "protocol": protocol,
                "aggregation": base.aggregation,
                "reference_spacing": reference,
                "centre": json.loads(key[5]),
                "spacings": rows,
            }
        )
    return sorted(groups, key=lambda g: (g["model"], g["adapter"], g["dataset"], g["protocol"]))


def _hpe(run: RunResults) -> tuple[np.ndarray, np.ndarray]:
    episodes, _, _ = run.config_matrix()
    return episodes, run.aggregations()["hpe"]


def grid_spacing_report(runs: Sequence[RunResults]) -> tuple[dict[str, Any], str]:
    """The JSON report and the figure (HPE accuracy per group, one line per spacing).

    Raises:
        FewtransError: no runs, or see :func:`spacing_groups`.
    """
    if not runs:
        raise FewtransError("grid-spacing needs runs evaluated under spaced HPE protocols")
    groups = spacing_groups(runs)
    spacings = sorted({row["spacing"] for g in groups for row in g["spacings"]})
    data = {
        "analysis": "grid-spacing",
        "spacings": spacings,
        "groups": groups,
        "paper": {
            "figure": "FewTrans Fig. 4 (right)",
            "claim": "HPE top-1 accuracy stays stable across grid spacings 3x, 5x and 10x",
        },
        "provenance": provenance({"runs": [r["run"] for g in groups for r in g["spacings"]]}),
    }
    labels = [f"{g['adapter']} / {g['dataset']}" for g in groups]
    series = {}
    for spacing in spacings:
        values = []
        for group in groups:
            row = next((r for r in group["spacings"] if r["spacing"] == spacing), None)
            values.append(float("nan") if row is None else row["hpe"]["mean"])
        series[f"x{spacing}"] = values
    figure = layer_lines(
        series,
        x_labels=labels,
        x_title="method / dataset",
        y_title="HPE accuracy (%)",
        title="HPE accuracy under learning-rate grid spacings",
    )
    return data, str(figure)
