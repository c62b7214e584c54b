"""``analyze``: the papers' analyses of stored runs, written as JSON plus SVG."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from fewtrans_board.cli.app import App, pass_app
from fewtrans_board.cli.groups import (
    SEED,
    OutputPath,
    device_option,
    echo_json,
    resolve_device,
    root_option,
    weights_option,
)

RUNS = click.argument("runs", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
OUT = click.option(
    "--out",
    type=OutputPath(file_okay=False),
    default=Path("analysis"),
    show_default=True,
    help="Folder for NAME.json and NAME.svg (created).",
)
AS_JSON = click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
RUN_MANIFESTS = click.option(
    "--manifest",
    "manifests",
    multiple=True,
    required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="The manifest each run used (repeatable; matched by content hash).",
)


def _load(paths: tuple[Path, ...]) -> list[Any]:
    from fewtrans_board.results.load import find_runs, load_run

    return [load_run(p) for p in find_runs(list(paths))]


def _finish(name: str, data: dict[str, Any], svg: str, out: Path, as_json: bool, line: str) -> None:
    from fewtrans_board.analysis.report import json_safe, write_report

    json_path, svg_path = write_report(out, name, data, svg)
    if as_json:
        echo_json(json_safe(data))
        return
    click.echo(line)
    click.echo(f"wrote {json_path} and {svg_path}")


def _fmt(value: float | None, spec: str = ".3f") -> str:
    return "n/a" if value is None or value != value else format(value, spec)


@click.group("analyze")
def analyze_group() -> None:
    """The FewTrans and BSCD-FSL analyses of stored runs (JSON plus SVG)."""


@analyze_group.command("sensitivity")
@RUNS
@OUT
@AS_JSON
def analyze_sensitivity(runs: tuple[Path, ...], out: Path, as_json: bool) -> None:
    """Hyperparameter sensitivity vs HPE penalty across the runs under RUNS (Pearson r, CI).

    Sensitivity is the std of the configurations' mean accuracies; the penalty is
    oracle-best minus HPE accuracy. FewTrans reports r = 0.38.
    """
    from fewtrans_board.analysis.sensitivity import sensitivity_report

    data, svg = sensitivity_report(_load(runs))
    r = data["pearson"]
    ci = r["ci95"] or [None, None]
    _finish(
        "sensitivity",
        data,
        svg,
        out,
        as_json,
        f"{len(data['points'])} runs: Pearson r = {_fmt(r['coefficient'])} "
        f"(95% CI {_fmt(ci[0])} to {_fmt(ci[1])}), p = {_fmt(r['pvalue'], '.3g')}",
    )


@analyze_group.command("zipf")
@RUNS
@click.option(
    "--finetune",
    default="finetune-clip-both",
    show_default=True,
    help="The full fine-tuning adapter whose gain is measured.",
)
@click.option(
    "--zero-shot", "zero_shot", default="zero-shot-clip", show_default=True, help="The baseline."
)
@OUT
@AS_JSON
@pass_app
def analyze_zipf(
    app: App, runs: tuple[Path, ...], finetune: str, zero_shot: str, out: Path, as_json: bool
) -> None:
    """Adjusted Zipf frequency of class names vs the CLIP gain (fine-tune minus zero-shot).

    Needs FINETUNE and ZERO_SHOT runs of one model; one point per dataset (FewTrans Fig. 6),
    and Spearman's rho with p (FewTrans: rho = -0.881) from 3 datasets on (with 1 or 2, the
    points alone).
    """
    from fewtrans_board.analysis.zipf import check_adapter_pair, zipf_report

    check_adapter_pair(app.registry, finetune=finetune, zero_shot=zero_shot)
    specs = {entry.name: entry.obj for entry in app.registry.datasets}
    data, svg = zipf_report(_load(runs), specs, finetune=finetune, zero_shot=zero_shot)
    rho = data["spearman"]
    _finish(
        "zipf",
        data,
        svg,
        out,
        as_json,
        f"{len(data['points'])} datasets: Spearman rho = {_fmt(rho['coefficient'])}, "
        f"p = {_fmt(rho['pvalue'], '.3g')}" + (f" ({data['note']})" if data.get("note") else ""),
    )


def _refit_options(function: Callable[..., Any]) -> Callable[..., Any]:
    options: list[Callable[[Callable[..., Any]], Callable[..., Any]]] = [
        RUN_MANIFESTS,
        root_option("Local dataset copy (omit for embedded datasets)."),
        weights_option("The model checkpoint the runs used, if any."),
        click.option(
            "--episodes",
            type=click.IntRange(min=1),
            default=5,
            show_default=True,
            help="Episodes sampled per run (all of them when a run has fewer).",
        ),
        click.option("--seed", type=SEED, default=0, show_default=True, help="Sampling seed."),
        click.option(
            "--config-index",
            type=click.IntRange(min=0),
            default=None,
            help="Grid configuration to re-fit (default: the run's best configuration).",
        ),
        device_option(),
        OUT,
        AS_JSON,
        pass_app,
    ]
    for option in reversed(options):
        function = option(function)
    return function


MEASURE_LABELS = {
    "l2": ("l2", "||dW|| per block"),
    "relative": ("relative", "||dW||/||W|| per block"),
    "bscd-relative": ("bscd_relative", "mean |dθ|/|θ| per block"),
}


def _refit_analysis(
    name: str,
    app: App,
    runs: tuple[Path, ...],
    manifests: tuple[Path, ...],
    out: Path,
    as_json: bool,
    measure: str = "l2",
    **options: Any,
) -> None:
    """Re-fit sampled episodes of every run, measure them, write and print the report."""
    from fewtrans_board.analysis.cka import cka_report, cka_run
    from fewtrans_board.analysis.delta_w import delta_w_report, delta_w_run
    from fewtrans_board.analysis.refit import refit_episodes
    from fewtrans_board.core.errors import FewtransError
    from fewtrans_board.episodes.manifest import Manifest

    if name == "delta-w":
        key, label = MEASURE_LABELS[measure]
    else:
        key, label = "cka", "CKA per block"
    options["device"] = resolve_device(options["device"])
    by_sha = {Manifest.load(m).sha256: m for m in manifests}
    results = []
    for run in _load(runs):
        manifest = by_sha.get(run.provenance.manifest.sha256)
        if manifest is None:
            raise FewtransError(
                f"run {run.path} used manifest {run.provenance.manifest.file}; pass it with "
                "--manifest"
            )
        description, episodes = refit_episodes(run, app.registry, manifest, **options)
        results.append((delta_w_run if name == "delta-w" else cka_run)(description, episodes))
    if name == "delta-w":
        data, svg = delta_w_report(results, measure)
    else:
        data, svg = cka_report(results)
    lines = [
        f"{r['adapter']} on {r['dataset']}: {label} "
        + " ".join(_fmt(v, ".4g") for v in r[key]["mean"])
        for r in results
    ]
    _finish(name, data, svg, out, as_json, "\n".join(lines))


@analyze_group.command("delta-w")
@RUNS
@click.option(
    "--measure",
    type=click.Choice(list(MEASURE_LABELS)),
    default="l2",
    show_default=True,
    help="What the figure shows: l2 = ||W_adapted - W_initial|| per block (FewTrans Fig. 5); "
    "relative = that over ||W_initial||; bscd-relative = the per-element mean of "
    "|θ_adapted - θ_init| / |θ_init| per layer (BSCD-FSL Fig. 2; elements with θ_init = 0 "
    "left out and counted). The JSON holds all three.",
)
@_refit_options
def analyze_delta_w(
    app: App,
    runs: tuple[Path, ...],
    manifests: tuple[Path, ...],
    out: Path,
    as_json: bool,
    measure: str,
    **options: Any,
) -> None:
    """Parameter change per block / layer, re-fitting sampled episodes of RUNS.

    The adapter is re-fitted with the run's seeds on the sampled episodes only (normal runs
    keep no adapted weights); 'agreement' reports how many stored predictions the re-fit
    reproduces.
    """
    _refit_analysis("delta-w", app, runs, manifests, out, as_json, measure, **options)


@analyze_group.command("cka")
@RUNS
@_refit_options
def analyze_cka(
    app: App,
    runs: tuple[Path, ...],
    manifests: tuple[Path, ...],
    out: Path,
    as_json: bool,
    **options: Any,
) -> None:
    """Linear CKA of pretrained vs adapted features per block on query images of RUNS.

    Sampled episodes are re-fitted with the run's seeds, as for delta-w.
    """
    _refit_analysis("cka", app, runs, manifests, out, as_json, **options)


@analyze_group.command("model-selection")
@RUNS
@click.option(
    "--config-index",
    type=click.IntRange(min=0),
    default=None,
    help="Count only this configuration of each run's HPE grid (default: every "
    "configuration's fit counts).",
)
@OUT
@AS_JSON
def analyze_model_selection(
    runs: tuple[Path, ...], config_index: int | None, out: Path, as_json: bool
) -> None:
    """How often IMS-f selects each source model (and layer), per dataset (BSCD-FSL Fig. 3).

    Reads the selections IMS-f stored for every episode (adapter_records) in the runs under
    RUNS; runs of one dataset are pooled and must share one model library. The frequency of
    a model is the share of fits (episodes x configurations) that selected at least one of
    its layers.
    """
    from fewtrans_board.analysis.model_selection import model_selection_report

    data, svg = model_selection_report(_load(runs), config_index)
    lines = [
        f"{d['dataset']} ({d['episodes']} episodes, {d['fits']} fits): "
        + ", ".join(
            f"{m} {_fmt(f, '.2f')}" for m, f in zip(d["models"], d["frequency"], strict=True)
        )
        for d in data["datasets"]
    ]
    _finish("model-selection", data, svg, out, as_json, "\n".join(lines))
