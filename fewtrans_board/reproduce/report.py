"""The reproduction report: every cell of a target measured vs reported, as JSON and Markdown.

A cell is measured from its run's summary (the target's aggregation, default the protocol's
headline) and compared with the reported table's cell by :mod:`..compare`; the report keeps
the plan's commands and each run's provenance (run id, manifest sha256, weights id), and
says in its first line when it is a smoke (``--limit`` or swapped models), which it then is
for every reader: such a report is never a reproduction.
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fewtrans_board.core.errors import FewtransError
from fewtrans_board.core.version import __version__
from fewtrans_board.reproduce.compare import CellComparison, average_cell, count_within
from fewtrans_board.reproduce.plan import PlannedStep, ReproductionPlan
from fewtrans_board.reproduce.planner import smoke_hpe

SCHEMA = "fewtrans-board/reproduction-report/1"
MEASURES = ("base", "novel", "harmonic_mean", "shots-average")


def load_reported(directory: Path | None, name: str) -> dict[str, Any] | None:
    """The reported table ``name`` in ``directory``.

    ``None`` when the target has none or no store was given.

    Raises:
        FewtransError: the target names a table that is not there.
    """
    if not name or directory is None:
        return None
    path = directory / f"{name}.json"
    try:
        return dict(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, json.JSONDecodeError) as exc:
        raise FewtransError(
            f"reported table {path} cannot be read ({exc}); give --leaderboard the store "
            "holding reported/"
        ) from exc


def measured_cell(
    summary: dict[str, Any], measure: str, aggregation: str
) -> tuple[float, float | None]:
    """``(mean, 95% CI half-width)`` of one run summary in points.

    Args:
        summary: :func:`fewtrans_board.results.summary.summarize` of the run.
        measure: ``base`` (the accuracy on the episodes' classes), ``novel``,
            ``harmonic_mean`` (base-to-novel runs) or ``shots-average`` (k-shot runs: the
            average over K of the mean over seeds, which has no CI over episodes).
            The CI is ``None`` where it is undefined (a single episode).
        aggregation: ``hpe``, ``vote``, ``oracle``, ``mean-single`` (``""``: the headline).
    """
    agg = aggregation or "hpe"
    if measure == "shots-average":
        return float(summary["per_shot"][agg]["average"]), None
    block = summary["aggregations"] if measure == "base" else summary[measure]
    ci = float(block[agg]["ci95"])
    return float(block[agg]["mean"]), ci if math.isfinite(ci) else None  # one episode: no CI


def _reported_cell(
    reported: dict[str, Any] | None, row: str, column: str
) -> tuple[float | None, float | None]:
    if reported is None:
        return None, None
    for entry in reported["rows"]:
        if entry["method"] == row:
            cell = entry["cells"].get(column)
            if cell is None:
                return None, None
            return cell.get("mean"), cell.get("ci95")
    return None, None


def _run_record(step: PlannedStep, ddof: int, measure: str, aggregation: str) -> dict[str, Any]:
    from fewtrans_board.results.load import load_run
    from fewtrans_board.results.summary import summarize

    record: dict[str, Any] = {"row": step.row, "column": step.column, "out": str(step.out)}
    if not (step.out / "run.json").is_file():
        return {**record, "state": "not run"}
    run = load_run(step.out)
    if not run.complete:
        return {**record, "state": "incomplete"}
    summary = summarize(run, ddof=ddof)
    mean, ci = measured_cell(summary, measure, aggregation)
    ci = ci if summary["episodes"] > 1 else None  # one episode has no spread
    provenance = run.provenance
    return {
        **record,
        "state": "complete",
        "mean": mean,
        "ci95": ci,
        "episodes": summary["episodes"],
        "run_id": provenance.run_id,
        "manifest_sha256": provenance.manifest.sha256,
        "model": provenance.model.name,
        "weights_id": provenance.model.weights_id,
        "adapter": provenance.adapter.name,
        "hpe_protocol": provenance.hpe.name,
    }


def build_report(plan: ReproductionPlan, reported_dir: Path | None) -> dict[str, Any]:
    """The report of ``plan``'s runs as they stand (runs not yet complete count as missing)."""
    from fewtrans_board.leaderboard.sub_benchmarks import SUB_BENCHMARKS

    target = plan.target
    measure = target.measure
    reported = load_reported(reported_dir, target.reported)
    benchmark = SUB_BENCHMARKS.get(target.benchmark)
    ddof = benchmark.statistic_ddof if benchmark is not None else 1
    runs = [_run_record(s, ddof, measure, target.aggregation) for s in plan.runs]
    cells = _cells(runs, reported)
    k, n = count_within(cells)
    options = plan.options
    smoke = [f"--limit {options.limit}"] if options.limit is not None else []
    smoke += [f"--swap-model {a}={b}" for a, b in options.swap_models.items()]
    smoke += [] if options.search else ["--skip-search"]
    smoke += ["--smoke: one epoch per configuration"] if options.quick else []
    if smoke_hpe(target, options) != target.hpe:
        smoke.append(f"HPE {smoke_hpe(target, options)} in place of {target.hpe}")
    return {
        "schema": SCHEMA,
        "target": target.name,
        "paper": target.paper,
        "item": target.item,
        "shows": target.shows,
        "benchmark": target.benchmark,
        "hpe_protocol": target.hpe,
        "measure": measure,
        "reported_table": target.reported,
        "reported_caption": reported.get("caption", "") if reported else "",
        "smoke": smoke,
        "created": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "fewtrans_board": __version__,
        "device": options.device or "default",
        "cells": [c.to_dict() for c in cells],
        "within_combined_ci": {"k": k, "n": n},
        "runs": runs,
        "commands": [["fewtrans-board", *s.argv] for s in plan.steps if s.argv],
    }


def _cells(runs: list[dict[str, Any]], reported: dict[str, Any] | None) -> list[CellComparison]:
    cells: list[CellComparison] = []
    by_row: dict[str, list[CellComparison]] = {}
    for run in runs:
        ref_mean, ref_ci = _reported_cell(reported, run["row"], run["column"])
        cell = CellComparison(
            row=run["row"],
            column=run["column"],
            measured=run.get("mean"),
            measured_ci=run.get("ci95"),
            reported=ref_mean,
            reported_ci=ref_ci,
            episodes=int(run.get("episodes", 0)),
        )
        cells.append(cell)
        by_row.setdefault(run["row"], []).append(cell)
    for row, row_cells in by_row.items():
        if len(row_cells) > 1:
            measured = average_cell(row, "average", row_cells)
            ref_mean, ref_ci = _reported_cell(reported, row, "average")
            if measured is not None:
                cells.append(
                    CellComparison(
                        row,
                        "average",
                        measured.measured,
                        measured.measured_ci,
                        ref_mean,
                        ref_ci,
                        measured.episodes,
                    )
                )
    return cells


def _number(value: float | None, digits: int = 2, sign: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value:+.{digits}f}" if sign else f"{value:.{digits}f}"


def _yes(value: bool | None) -> str:
    return "-" if value is None else ("yes" if value else "no")


def report_markdown(report: dict[str, Any]) -> str:
    """The report as a Markdown document (one table row per cell)."""
    lines = [f"# Reproduction of {report['target']}: {report['item']}", ""]
    if report["smoke"]:
        lines += [
            f"**Smoke run, not a reproduction** ({', '.join(report['smoke'])}): the numbers "
            "below check that every step runs; they are not comparable with the paper.",
            "",
        ]
    k, n = report["within_combined_ci"]["k"], report["within_combined_ci"]["n"]
    lines += [
        report["shows"],
        "",
        f"Sub-benchmark `{report['benchmark']}`, HPE protocol `{report['hpe_protocol']}`, "
        f"compared with `{report['reported_table'] or 'no reported table'}`. "
        f"**{k} of {n} cells** lie within the combined 95% CI. fewtrans-board "
        f"{report['fewtrans_board']}, {report['created']}.",
        "",
        "| Row | Column | Measured | Reported | Difference | z | p | CIs overlap | Within combined CI |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for c in report["cells"]:
        measured = f"{_number(c['measured'])} ± {_number(c['measured_ci'])}"
        reported = f"{_number(c['reported'])} ± {_number(c['reported_ci'])}"
        lines.append(
            f"| {c['row']} | {c['column']} | {measured} | {reported} | "
            f"{_number(c['difference'], sign=True)} | {_number(c['z'])} | {_number(c['p'], 3)} | "
            f"{_yes(c['overlap'])} | {_yes(c['within_combined_ci'])} |"
        )
    missing = [r for r in report["runs"] if r["state"] != "complete"]
    if missing:
        lines += [
            "",
            f"{len(missing)} run(s) not complete: "
            + ", ".join(f"{r['row']} / {r['column']} ({r['state']})" for r in missing),
        ]
    return "\n".join(lines) + "\n"
