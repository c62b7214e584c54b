"""Render the static site: Jinja templates (autoescaped, strict) over the derived views."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

from fewtrans_board.core.version import __version__
from fewtrans_board.figures.accuracy import ci_dots, heatmap, histogram
from fewtrans_board.hpe.protocols import HPE_PROTOCOLS, get_hpe_protocol
from fewtrans_board.leaderboard.entries import entry_errors, load_entries
from fewtrans_board.leaderboard.label_index import frozen_labels
from fewtrans_board.leaderboard.status import EXPLANATIONS as STATUS_EXPLANATIONS
from fewtrans_board.leaderboard.store import LeaderboardStore
from fewtrans_board.leaderboard.sub_benchmarks import CLIP_SETTINGS
from fewtrans_board.leaderboard.summary_cache import SummaryCache
from fewtrans_board.leaderboard.table import (
    CSV_NAME,
    PARQUET_NAME,
    leaderboard_table,
    write_leaderboard,
)
from fewtrans_board.stats.base_novel import harmonic_mean_ci
from fewtrans_board.stats.intervals import mean_ci
from fewtrans_board.website.analyses import analysis_pages
from fewtrans_board.website.badges import Badge, badges, site_url
from fewtrans_board.website.changelog import build_date as dated
from fewtrans_board.website.changelog import changelog
from fewtrans_board.website.clip_settings import comparisons
from fewtrans_board.website.collapsed import collapse_title, entry_collapse
from fewtrans_board.website.consistency import page_checks
from fewtrans_board.website.cost import cost_and_stability, entry_cost
from fewtrans_board.website.data import COLUMN_SETS, build_site_data, site_files_dir
from fewtrans_board.website.downloads import (
    benchmark_downloads,
    dataset_download,
    settings_downloads,
    write_download,
)
from fewtrans_board.website.fusion import fusion_line, other_fusion, other_fusion_mean
from fewtrans_board.website.model import (
    FEW_EPISODES,
    BenchmarkView,
    Download,
    MethodRun,
    SiteData,
    paper_leader,
)
from fewtrans_board.website.oracle_verdicts import oracle_verdicts
from fewtrans_board.website.pairwise import MARKS, pairwise_downloads, pairwise_matrices
from fewtrans_board.website.regimes import (
    SHOT_RULE,
    SOURCE_RULE,
    WAY_RULE,
    regime_downloads,
    regime_page_data,
)
from fewtrans_board.website.reporting import BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED, shots_of
from fewtrans_board.website.settings_model import SettingsComparison
from fewtrans_board.website.template_code import TEMPLATE_CODE
from fewtrans_board.website.text import column_label, plain_tex

AGGREGATION_TITLES = {
    "hpe": "HPE (the protocol's fusion: logit mean or vote)",
    "vote": "Majority vote of the configurations",
    "oracle": "Oracle: best single configuration in hindsight (upper bound)",
}


def environment(templates: Path) -> Environment:
    """Jinja environment: autoescaping on every template, undefined variables are errors."""
    env = Environment(
        loader=FileSystemLoader(str(templates)),
        autoescape=select_autoescape(default=True, default_for_string=True),
        undefined=StrictUndefined,
        keep_trailing_newline=True,
        bytecode_cache=TEMPLATE_CODE,
    )
    env.globals.update(version=__version__, paper_leader=paper_leader)
    env.filters.update(plain_tex=plain_tex, column_label=column_label)
    env.globals.update(column_sets_for=column_sets_for)
    env.globals.update(entry_collapse=entry_collapse, collapse_title=collapse_title)
    env.globals.update(
        fusion_line=fusion_line, other_fusion=other_fusion, other_fusion_mean=other_fusion_mean
    )
    env.globals.update(status_explanations=STATUS_EXPLANATIONS)  # the badges' tooltips
    return env


def column_sets_for(protocol: str) -> list[str]:
    """The aggregation tables a protocol's section shows.

    Only the headline where every episode has one configuration (vote, oracle and
    mean-single would equal it).
    """
    from fewtrans_board.hpe.protocols import get_hpe_protocol

    if get_hpe_protocol(protocol).epoch_rule == "centre-only":
        return ["hpe"]
    return list(COLUMN_SETS)


def _heatmaps(run: MethodRun) -> list[dict[str, Any]]:
    """Per-configuration mean accuracy arranged on the HPE axes."""
    roles = run.roles
    if not roles:
        return []
    means = run.run.config_means
    points = [json.loads(c) for c in run.run.config_names]
    protocol = get_hpe_protocol(run.run.provenance.hpe.name)
    axes = protocol.axes_for(run.run.provenance.adapter.centre, roles)
    names = list(axes)
    if not names:
        return []
    row_axis = names[0]
    col_axis = names[1] if len(names) > 1 else None
    rest = names[2:]
    panels: dict[tuple[Any, ...], np.ndarray] = {}
    for point, mean in zip(points, means, strict=True):
        key = tuple(point[n] for n in rest)
        panel = panels.setdefault(
            key, np.full((len(axes[row_axis]), len(axes[col_axis]) if col_axis else 1), np.nan)
        )
        i = axes[row_axis].index(point[row_axis])
        j = axes[col_axis].index(point[col_axis]) if col_axis else 0
        panel[i, j] = mean
    out = []
    for key, panel in panels.items():
        suffix = ", ".join(f"{n} = {v}" for n, v in zip(rest, key, strict=True))
        caption = f"Mean accuracy of each configuration on {run.dataset}" + (
            f" ({suffix})" if suffix else ""
        )
        out.append(
            {
                "caption": caption,
                "svg": heatmap(
                    panel,
                    [f"{v:g}" for v in axes[row_axis]],
                    [f"{v:g}" for v in axes[col_axis]] if col_axis else ["-"],
                    row_title=row_axis,
                    col_title=col_axis or "",
                    title=caption,
                ),
            }
        )
    return out


def _benchmark_context(view: BenchmarkView) -> dict[str, Any]:
    """A benchmark page's context; CI plots per protocol section, per column."""
    plots: dict[str, dict[str, Any]] = {}
    for section in view.sections:
        plots[section.protocol] = {}
        for dataset in view.datasets:
            rows = [
                (r.method.name, r.cells[dataset].mean, r.cells[dataset].ci95)
                for r in section.tables.get("hpe", [])
            ]
            plots[section.protocol][dataset] = ci_dots(
                rows, title=f"{view.benchmark.title}: {dataset} ({section.protocol})"
            )
    shot_rows = [row for s in view.sections for row in s.shots.get("hpe", [])]
    shot_values = shots_of(shot_rows) if shot_rows else []
    # The site's bootstrap size (compare's default is 10,000): same p-values, CIs to rounding.
    pairwise = pairwise_matrices(view, BOOTSTRAP_SEED, BOOTSTRAP_RESAMPLES)
    return {
        "view": view,
        "pairwise": pairwise,
        "column_sets": COLUMN_SETS,
        "aggregation_titles": AGGREGATION_TITLES,
        "bootstrap_seed": BOOTSTRAP_SEED,
        "ci_plots": plots,
        "shot_values": shot_values,
        "tables": _shown_tables(
            view,
            {
                **benchmark_downloads(view, shot_values),
                **regime_downloads(view),
                **pairwise_downloads(view, list(pairwise.values())),
            },
        ),
        "regime_data": regime_page_data(view),
        "regime_rules": {
            "shots": SHOT_RULE,
            "ways": WAY_RULE,
            "source": SOURCE_RULE,
            "few": FEW_EPISODES,
        },
    }


def _shown_tables(view: BenchmarkView, tables: dict[str, Download]) -> dict[str, Download]:
    """``tables`` without those of aggregations a section does not show (see above)."""
    for section in view.sections:
        for agg in set(COLUMN_SETS) - set(column_sets_for(section.protocol)):
            for prefix in ("table", "per-shot", "base-novel"):
                tables.pop(f"{prefix}-{agg}{section.anchor}", None)
    return tables


def _dataset_entries(data: SiteData, name: str) -> list[dict[str, Any]]:
    """Each (benchmark, method, column) on a dataset with its headline statistic.

    Listed by benchmark, then HPE protocol (the benchmark's order), then headline: entries
    under different protocols are never interleaved as if comparable. ``stats`` is the HPE
    mean ± CI over episodes, except for per-shot benchmarks, whose headline is the average
    over shots ± its spread over seeds (``per_shot``); base-to-novel runs add ``novel`` and
    ``harmonic`` (mean ± CI).
    """
    entries = []
    for view, method, key in data.datasets.get(name, []):
        order = [s.protocol for s in view.sections]
        run = method.runs[key]
        values = run.aggregations["hpe"]
        ddof = view.benchmark.statistic_ddof
        entry: dict[str, Any] = {
            "view": view,
            "method": method,
            "key": key,
            "stats": mean_ci(values, ddof=ddof),
            "per_shot": run.per_shot("hpe") if view.benchmark.reporting == "per-shot" else None,
            "novel": None,
            "harmonic": None,
            "histogram": histogram(values, title=f"{method.label} on {name}"),
            "order": (
                view.benchmark.name,
                order.index(method.protocol) if method.protocol in order else len(order),
            ),
        }
        if run.novel:
            entry["novel"] = mean_ci(run.novel["hpe"], ddof=ddof)
            entry["harmonic"] = harmonic_mean_ci(values, run.novel["hpe"], ddof=ddof)
        entry["headline"] = (
            entry["per_shot"].average if entry["per_shot"] is not None else entry["stats"].mean
        )
        entries.append(entry)
    return sorted(entries, key=lambda e: (*e["order"], -e["headline"]))


@dataclass
class _Pages:
    """Renders the site's pages and writes its table downloads into ``out``."""

    env: Environment
    out: Path
    written: list[Path] = field(default_factory=list)

    def render(self, template: str, target: str, **context: Any) -> None:
        path = self.out / target
        path.write_text(self.env.get_template(template).render(**context), encoding="utf-8")
        self.written.append(path)

    def publish(self, tables: dict[str, Download]) -> dict[str, Download]:
        for download in tables.values():
            write_download(download, self.out)
        return tables


def _analysis_and_benchmark_pages(pages: _Pages, data: SiteData, leaderboard: Path) -> None:
    """Each benchmark's analyses page, its page and tables, and the reproduction pages.

    A reproduction report's page is linked from the paper's table it compares with.
    """
    from fewtrans_board.website.reproductions import by_reported_table, load_reproductions

    reports = load_reproductions(leaderboard)
    for report in reports:
        pages.render("reproduction.html", report["page"], report=report)
    pages.env.globals["reproductions"] = by_reported_table(reports)
    analyses = analysis_pages(data.benchmarks, leaderboard)
    pages.env.globals["analysis_pages"] = sorted(analyses)  # benchmark pages link to theirs
    for view in data.benchmarks:
        if view.benchmark.name in analyses:
            sections = analyses[view.benchmark.name]
            name = f"analyses-{view.benchmark.name}.html"
            pages.render("analyses.html", name, view=view, sections=sections)
    for view in data.benchmarks:
        context = _benchmark_context(view)
        context.update(cost_and_stability(view, context["tables"]))
        context.update(page_checks(view, LeaderboardStore(leaderboard).reported_dir))
        pages.publish(context["tables"])
        pages.render("benchmark.html", f"benchmark-{view.benchmark.name}.html", **context)
        _compare_pages(pages, view, context)


def _compare_pages(pages: _Pages, view: BenchmarkView, context: dict[str, Any]) -> None:
    """A "compare A vs B" page per pair of each protocol's matrix (website/pairwise.py)."""
    for matrix in context["pairwise"].values():
        for pair in matrix.pairs:
            pages.render(
                "compare.html",
                pair.page,
                view=view,
                matrix=matrix,
                pair=pair,
                marks=MARKS,
                aggregation_title=AGGREGATION_TITLES["hpe"],
                table=context["tables"][matrix.id],
            )


def _write_badges(out: Path, data: SiteData) -> dict[str, Badge]:
    """Write a badge per verified entry into ``out/badges``; returns them by entry id."""
    badge_of = badges(data)
    if badge_of:
        (out / "badges").mkdir(exist_ok=True)
    for badge in badge_of.values():
        (out / badge.path).write_text(badge.svg(), encoding="utf-8")
    return badge_of


def _method_pages(pages: _Pages, data: SiteData, badge_of: dict[str, Badge], base: str) -> None:
    for method in data.methods:
        with entry_errors(method.id):
            pages.render(
                "method.html",
                f"method-{method.id}.html",
                method=method,
                histograms={
                    d: histogram(r.aggregations["hpe"], title=f"{method.label} on {d}")
                    for d, r in method.runs.items()
                },
                heatmaps={d: _heatmaps(r) for d, r in method.runs.items()},
                entry_badge=badge_of.get(method.id),
                cost=entry_cost(method),
                site_url=base,
            )


def _dataset_pages(pages: _Pages, data: SiteData, registry: Any | None) -> None:
    for name in sorted(data.datasets):
        spec = None
        if registry is not None and name in registry.datasets:
            spec = registry.datasets.get(name).obj
        entries = _dataset_entries(data, name)
        bars = [(e["method"].label, e["stats"]) for e in entries if e["per_shot"] is None]
        plot = ci_dots([(label, stats.mean, stats.ci95) for label, stats in bars], title=name)
        pages.render(
            "dataset.html",
            f"dataset-{name}.html",
            name=name,
            spec=spec,
            entries=entries,
            ci_plot=plot,
            table=pages.publish({"entries": dataset_download(name, entries)})["entries"],
        )


def _clip_settings_pages(
    pages: _Pages, settings: list[SettingsComparison], oracle_check: dict[str, Any] | None
) -> None:
    """One page per pair of CLIP settings, and the miniature's oracle check when given."""
    if oracle_check is not None:
        pages.render("oracle-check.html", "oracle-check.html", check=oracle_check)
    for cmp in settings:
        tables = pages.publish(settings_downloads(cmp))
        name = f"clip-settings-{cmp.inductive.benchmark.name}.html"
        pages.render(
            "clip-settings.html",
            name,
            cmp=cmp,
            settings=CLIP_SETTINGS,
            tables=tables,
            oracle=oracle_verdicts(oracle_check, cmp),
            oracle_check=oracle_check,
        )


def build_site(
    leaderboard: Path,
    out: Path,
    registry: Any | None = None,
    local_runs: list[Path] | None = None,
    oracle_check: dict[str, Any] | None = None,
    base_url: str | None = None,
    cache: SummaryCache | None = None,
    build_date: str | None = None,
) -> list[Path]:
    """Build the static site for a leaderboard store into ``out``.

    Besides the pages: every table's CSV and JSON next to its page
    (:mod:`~fewtrans_board.website.downloads`), the whole leaderboard as
    ``leaderboard.parquet`` and ``leaderboard.csv`` at the root
    (:mod:`~fewtrans_board.leaderboard.table`) and a badge per verified entry in
    ``badges/`` (:mod:`~fewtrans_board.website.badges`).

    Args:
        leaderboard: the store folder.
        out: output folder (created; existing HTML pages are replaced).
        registry: plugin registry for dataset metadata (optional).
        local_runs: result folders to show as unsubmitted local entries (the demo's).
        oracle_check: the inductive miniature's oracle verdicts (``{"models", "rows",
            "margin"}``, rows as ``InductiveDemoResult.oracle_rows``), shown on
            ``oracle-check.html``.
        base_url: the site's address, for the badge Markdown on method pages; ``None``
            reads ``$FEWTRANS_SITE_URL`` (unset: relative links).
        cache: the build cache of entry summaries (``site build`` passes the store's;
            default none: every entry is summarised again); the pages are the same either way.
        build_date: ``YYYY-MM-DD`` the pages say they are built as of; ``None`` reads
            ``$SOURCE_DATE_EPOCH``, else takes the store's latest dated change
            (:mod:`~fewtrans_board.website.changelog`), so that a rebuild is identical.

    Returns:
        The written HTML pages.

    Raises:
        SubmissionError: a stored entry or local run is unreadable (named).
        SiteUrlError: ``base_url`` is not an http(s) URL.
        BuildDateError: ``build_date`` or ``$SOURCE_DATE_EPOCH`` is not a date.
    """
    base = site_url(base_url)
    dated([], build_date)  # a bad date is refused before any work
    store = LeaderboardStore(leaderboard)
    stored = list(load_entries(store, cache=cache))  # one load: the pages and the leaderboard files
    labels = frozen_labels(store.manifests_dir, cache)
    data = build_site_data(store, local_runs, stored, labels)
    files = site_files_dir()
    pages = _Pages(environment(files / "templates"), out)
    changes = changelog(data.methods)
    pages.env.globals["build_date"] = dated(changes, build_date)  # every page's footer
    out.mkdir(parents=True, exist_ok=True)
    shutil.copytree(files / "static", out / "static", dirs_exist_ok=True)
    datasets = {name: index.dataset for name, index in labels.values()}
    write_leaderboard(leaderboard_table(store, stored, datasets), out)
    settings = comparisons(data.benchmarks)
    pages.render(
        "index.html",
        "index.html",
        benchmarks=data.benchmarks,
        datasets=sorted(data.datasets),
        clip_settings=settings,
        oracle_check=oracle_check,
        leaderboard_files={"parquet": PARQUET_NAME, "csv": CSV_NAME},
        changes=changes,
    )
    _clip_settings_pages(pages, settings, oracle_check)
    _analysis_and_benchmark_pages(pages, data, leaderboard)
    _method_pages(pages, data, _write_badges(out, data), base)
    _dataset_pages(pages, data, registry)
    pages.render(
        "protocol.html",
        "protocol.html",
        hpe_protocols=list(HPE_PROTOCOLS.values()),
        bootstrap_seed=BOOTSTRAP_SEED,
        bootstrap_resamples=BOOTSTRAP_RESAMPLES,
    )
    pages.render("submit.html", "submit.html")
    return pages.written
