"""The analyses page of each sub-benchmark: sensitivity from its runs, stored analysis files.

Sensitivity vs HPE penalty is derived at build time from the benchmark's per-episode rows.
ΔW, CKA and Zipf need models (re-fitted episodes, class-name statistics), so they are read
from ``leaderboard/analyses/<benchmark>/{delta-w,cka,zipf}.json`` as written by
``fewtrans-board analyze ... --out leaderboard/analyses/<benchmark>``; figures are redrawn
from their data. A benchmark gets a page only when at least one analysis has data.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from markupsafe import Markup

from fewtrans_board.core.errors import FewtransError
from fewtrans_board.figures.charts import layer_lines, scatter
from fewtrans_board.website.model import BenchmarkView

if TYPE_CHECKING:
    from fewtrans_board.results.load import RunResults

STORED = ("delta-w", "cka", "zipf")


@dataclass
class AnalysisSection:
    """One figure with its headline statistic and the data behind it."""

    key: str
    title: str
    summary: str
    figure: Markup
    source: str
    rows: list[dict[str, Any]] = field(default_factory=list)


def _sensitivity(view: BenchmarkView) -> AnalysisSection | None:
    from fewtrans_board.analysis.sensitivity import sensitivity_points, sensitivity_report

    method_runs = [r for m in view.methods for r in m.runs.values()]
    summaries = [r.summary for r in method_runs]  # summarised once, when the run was loaded
    # Given the summaries, the analysis counts the runs and reads nothing else of them.
    runs = cast("list[RunResults]", [r.run for r in method_runs])
    points = sensitivity_points(runs, summaries)
    if len(points) < 3:
        return None
    data, svg = sensitivity_report(runs, summaries)
    r = data["pearson"]
    ci = r["ci95"]
    interval = f", 95% CI [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else ""
    return AnalysisSection(
        "sensitivity",
        "Hyperparameter sensitivity vs HPE penalty",
        f"Pearson r = {r['coefficient']:.2f}{interval}, p = {r['pvalue']:.3g}, "
        f"n = {r['n']} runs (FewTrans reports r = 0.38).",
        Markup(svg),
        "derived at build time from the per-episode rows of this benchmark",
        [
            {
                "run": f"{p['model']} / {p['adapter']}",
                "dataset": p["dataset"],
                "sensitivity": p["sensitivity"],
                "penalty": p["penalty"],
            }
            for p in points
        ],
    )


def _layer_section(key: str, data: dict[str, Any], path: Path) -> AnalysisSection:
    measure = "l2" if key == "delta-w" else "cka"
    runs = data["runs"]
    labels = [str(i) for i in range(max(len(r["blocks"]) for r in runs))]
    figure = layer_lines(
        {f"{r['adapter']} / {r['dataset']}": r[measure]["mean"] for r in runs},
        x_labels=labels,
        x_title="block",
        y_title="||W_adapted - W_initial||_2" if key == "delta-w" else "linear CKA",
        title="Parameter update scale per block"
        if key == "delta-w"
        else "Feature similarity per block",
    )
    return AnalysisSection(
        key,
        "Parameter update scale (ΔW)" if key == "delta-w" else "Feature similarity (linear CKA)",
        f"{len(runs)} run(s), {sum(len(r['episodes']) for r in runs)} re-fitted episodes "
        "(mean per block).",
        figure,
        f"{path.name} ({data['provenance']['created_at']})",
        [
            {
                "run": f"{r['model']} / {r['adapter']}",
                "dataset": r["dataset"],
                "values": ", ".join(f"{v:.4g}" for v in r[measure]["mean"] if v is not None),
            }
            for r in runs
        ],
    )


def _zipf_section(data: dict[str, Any], path: Path) -> AnalysisSection:
    rho = data["spearman"]
    points = data["points"]
    measured = (
        f"Spearman rho = {rho['coefficient']:.3f}, p = {rho['pvalue']:.3g}"
        if rho.get("coefficient") is not None
        else "Spearman rho: n/a (3 datasets are needed)"
    )
    return AnalysisSection(
        "zipf",
        "Class-name rarity vs CLIP adaptation gain",
        f"{measured}, n = {rho['n']} "
        f"datasets ({data['finetune']} minus {data['zero_shot']}; FewTrans: rho = -0.881).",
        scatter(
            [(p["dataset"], p["zipf"]["mean"], p["gain"]) for p in points],
            x_title="adjusted Zipf frequency of class names",
            y_title="gain (points)",
            title="Text rarity vs adaptation gain",
        ),
        f"{path.name} ({data['provenance']['created_at']})",
        [{"dataset": p["dataset"], "zipf": p["zipf"]["mean"], "gain": p["gain"]} for p in points],
    )


def _stored(folder: Path) -> list[AnalysisSection]:
    sections = []
    for key in STORED:
        path = folder / f"{key}.json"
        if not path.is_file():
            continue
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if data.get("analysis") != key:
                raise ValueError(f"it holds {data.get('analysis')!r}")
            section = (
                _zipf_section(data, path) if key == "zipf" else _layer_section(key, data, path)
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise FewtransError(f"analysis file {path} is malformed: {exc}") from exc
        sections.append(section)
    return sections


def analysis_pages(
    views: list[BenchmarkView], store_root: Path
) -> dict[str, list[AnalysisSection]]:
    """Sections per benchmark name, only for benchmarks with at least one analysis.

    Raises:
        FewtransError: a stored analysis file is malformed.
    """
    pages = {}
    for view in views:
        sections = []
        sensitivity = _sensitivity(view)
        if sensitivity is not None:
            sections.append(sensitivity)
        sections.extend(_stored(store_root / "analyses" / view.benchmark.name))
        if sections:
            pages[view.benchmark.name] = sections
    return pages
