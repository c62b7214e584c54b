"""How often each source model (and layer) a multi-model method selects (BSCD-FSL Fig. 3).

README.md ("Analyses") says what is counted and the paper's setting. IMS-f records its
choice for every episode and configuration (a *fit*) in the shards' metadata
(``adapter_records``, read by :func:`fewtrans_board.results.records.adapter_records`):
``models`` (the library's member names, in order), ``layers`` (candidate layers per model)
and ``selected`` (``[{"model": index, "layer": index}, ...]`` in order of addition). Per
dataset (its runs pooled, sharing one library), over the fits: ``selected`` counts those in
which the model contributes at least one layer, ``frequency`` their share (the paper's
"frequency of each model being selected"); ``picks`` its entries in ``selected`` (more only
where a fit chooses a model twice, as the reference code's "with replacement" allows);
``first`` the fits whose first selected layer (stage 1's best) is the model's;
``layer_selected`` / ``layer_frequency`` the same per ``(model, layer)``; ``models_per_fit``
how many distinct models a fit combines. Every configuration of the HPE grid counts (each
is a fit whose predictions the protocol aggregates) unless ``config_index`` keeps one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any

from fewtrans_board.analysis.report import provenance
from fewtrans_board.core.errors import FewtransError
from fewtrans_board.figures.charts import grouped_bars
from fewtrans_board.results.load import RunResults

PAPER = {
    "source": "BSCD-FSL §7.2.2 (Fig. 3)",
    "setting": "5-way 50-shot, the library of all five pre-trained models, 600 episodes per "
    "dataset",
}


def run_records(run: RunResults) -> dict[int, dict[int, dict[str, Any]]]:
    """The run's recorded choices, ``{episode: {config index: record}}``, from its shards.

    The same as :func:`fewtrans_board.results.records.adapter_records` of ``run.path``,
    read from the shard metadata the run already loaded.
    """
    out: dict[int, dict[int, dict[str, Any]]] = {}
    for meta in run.shard_meta:
        for episode, per_config in (meta.get("adapter_records") or {}).items():
            out[int(episode)] = {int(i): record for i, record in per_config.items()}
    return out


def _checked(run: RunResults, episode: int, index: int, record: Any) -> dict[str, Any]:
    """The record with its fields checked (names the run and episode when malformed)."""
    where = f"run {run.path}, episode {episode}, configuration {index}"
    if not isinstance(record, dict) or "selected" not in record or "models" not in record:
        raise FewtransError(
            f"{where}: the adapter's record has no 'models' and 'selected' (not a model "
            "selection: analyze model-selection reads runs of ims-f and adapters that record "
            "the same fields)"
        )
    models, selected = record["models"], record["selected"]
    if not isinstance(models, list) or not all(isinstance(m, str) for m in models):
        raise FewtransError(f"{where}: 'models' is not a list of model names")
    if not isinstance(selected, list) or not selected:
        raise FewtransError(f"{where}: 'selected' is empty or not a list")
    for entry in selected:
        model = entry.get("model") if isinstance(entry, dict) else None
        layer = entry.get("layer") if isinstance(entry, dict) else None
        if not isinstance(model, int) or not 0 <= model < len(models):
            raise FewtransError(f"{where}: selected model {model!r} is not in the library")
        if not isinstance(layer, int) or layer < 0:
            raise FewtransError(f"{where}: selected layer {layer!r} is not a layer index")
    return record


def fits_of(
    run: RunResults, config_index: int | None = None
) -> Iterator[tuple[int, int, dict[str, Any]]]:
    """``(episode, configuration, record)`` of every recorded fit of a run, in order.

    Args:
        run: a stored run.
        config_index: keep only this configuration of the run's grid (default: all).

    Raises:
        FewtransError: the run recorded no selection, the index is outside its grid, or a
            record is malformed.
    """
    records = run_records(run)
    identity = run.provenance.identity
    if not records:
        raise FewtransError(
            f"run {run.path} ({identity.adapter}) recorded no model selection "
            "(no adapter_records in its shards); analyze model-selection reads runs of ims-f"
        )
    grid = len(identity.grid)
    if config_index is not None and not 0 <= config_index < grid:
        raise FewtransError(
            f"--config-index {config_index} is outside 0..{grid - 1} (the grid of run {run.path})"
        )
    for episode in sorted(records):
        for index in sorted(records[episode]):
            if config_index is None or index == config_index:
                yield episode, index, _checked(run, episode, index, records[episode][index])


def model_labels(models: Sequence[str]) -> list[str]:
    """The members' names, a repeated name numbered by position (``name #2``)."""
    counts = Counter(models)
    return [f"{m} #{i + 1}" if counts[m] > 1 else m for i, m in enumerate(models)]


class _Tally:
    """Counts of one library's selections over fits."""

    def __init__(self, models: list[str], layers: list[int]) -> None:
        self.models = models
        self.layers = list(layers)
        self.fits = 0
        self.selected = [0] * len(models)
        self.picks = [0] * len(models)
        self.first = [0] * len(models)
        self.layer_selected: list[list[int]] = [[0] * n for n in self.layers]
        self.models_per_fit: Counter[int] = Counter()
        self.episodes: set[tuple[str, int]] = set()

    def add(self, run: str, episode: int, record: dict[str, Any]) -> None:
        pairs = [(int(e["model"]), int(e["layer"])) for e in record["selected"]]
        self.fits += 1
        self.episodes.add((run, episode))
        for m, layer in pairs:
            self.picks[m] += 1
            while layer >= len(self.layer_selected[m]):  # records without 'layers'
                self.layer_selected[m].append(0)
                self.layers[m] = len(self.layer_selected[m])
        for m in {m for m, _ in pairs}:
            self.selected[m] += 1
        for m, layer in set(pairs):
            self.layer_selected[m][layer] += 1
        self.first[pairs[0][0]] += 1
        self.models_per_fit[len({m for m, _ in pairs})] += 1

    def table(self) -> dict[str, Any]:
        share = 1.0 / self.fits if self.fits else float("nan")
        return {
            "models": model_labels(self.models),
            "layers": self.layers,
            "episodes": len(self.episodes),
            "fits": self.fits,
            "selected": self.selected,
            "frequency": [c * share for c in self.selected],
            "picks": self.picks,
            "first": self.first,
            "layer_selected": self.layer_selected,
            "layer_frequency": [[c * share for c in row] for row in self.layer_selected],
            "models_per_fit": {str(k): v for k, v in sorted(self.models_per_fit.items())},
        }


def _library(run: RunResults, record: dict[str, Any]) -> tuple[list[str], list[int]]:
    models = list(record["models"])
    layers = record.get("layers")
    if not (isinstance(layers, list) and len(layers) == len(models)):
        layers = [0] * len(models)
    return models, [int(n) for n in layers]


def model_selection_run(run: RunResults, config_index: int | None = None) -> dict[str, Any]:
    """Selection counts of one run (see the module docstring for the fields)."""
    tally: _Tally | None = None
    for episode, index, record in fits_of(run, config_index):
        models, layers = _library(run, record)
        if tally is None:
            tally = _Tally(models, layers)
        elif models != tally.models:
            raise FewtransError(
                f"run {run.path}: episode {episode}, configuration {index} used the library "
                f"{models}, earlier fits {tally.models}"
            )
        tally.add(str(run.path), episode, record)
    if tally is None:  # config_index matched no record
        raise FewtransError(
            f"run {run.path} recorded no selection for configuration {config_index}"
        )
    identity = run.provenance.identity
    return {
        "run": str(run.path),
        "run_id": run.provenance.run_id,
        "model": identity.model,
        "adapter": identity.adapter,
        "dataset": run.dataset,
        "manifest": run.provenance.manifest.file,
        "hpe": identity.hpe,
        "config_index": config_index,
        **tally.table(),
    }


def model_selection_report(
    runs: Sequence[RunResults], config_index: int | None = None
) -> tuple[dict[str, Any], str]:
    """Per-dataset selection frequencies over the runs and the paper's figure.

    Runs of one dataset are pooled (they must use one library); datasets come in the order
    their first run is given.

    Returns:
        ``(data, svg)``: the JSON-friendly report (``datasets`` the pooled tables, ``runs``
        the per-run ones, ``provenance``) and grouped bars, one group per dataset and one
        bar per source model.

    Raises:
        FewtransError: a run without records, runs of one dataset with different libraries,
            or a configuration index outside a run's grid.
    """
    per_run = [model_selection_run(run, config_index) for run in runs]
    by_dataset: dict[str, _Tally] = {}
    names: dict[str, list[str]] = {}
    for run, table in zip(runs, per_run, strict=True):
        tally = by_dataset.get(run.dataset)
        if tally is None:
            first = next(fits_of(run, config_index))[2]
            models, layers = _library(run, first)
            tally = by_dataset[run.dataset] = _Tally(models, layers)
            names[run.dataset] = [table["run"]]
        else:
            if table["models"] != model_labels(tally.models):
                raise FewtransError(
                    f"runs {names[run.dataset][0]} and {run.path} on {run.dataset} use different "
                    f"libraries ({', '.join(tally.models)} vs {', '.join(table['models'])}): "
                    "analyse them separately"
                )
            names[run.dataset].append(table["run"])
        for episode, _, record in fits_of(run, config_index):
            tally.add(str(run.path), episode, record)
    datasets = [
        {"dataset": dataset, "runs": names[dataset], **tally.table()}
        for dataset, tally in by_dataset.items()
    ]
    data = {
        "analysis": "model-selection",
        "config_index": config_index,
        "datasets": datasets,
        "runs": per_run,
        "paper": PAPER,
        "provenance": provenance(
            {"runs": [r["run"] for r in per_run], "config_index": config_index}
        ),
    }
    return data, str(selection_figure(datasets))


def selection_figure(datasets: list[dict[str, Any]]) -> str:
    """BSCD-FSL Fig. 3: per dataset, one bar per source model (share of fits selecting it)."""
    models: list[str] = []
    for entry in datasets:
        models.extend(m for m in entry["models"] if m not in models)
    series = {
        model: [
            entry["frequency"][entry["models"].index(model)] if model in entry["models"] else None
            for entry in datasets
        ]
        for model in models
    }
    return str(
        grouped_bars(
            series,
            categories=[e["dataset"] for e in datasets],
            x_title="target dataset",
            y_title="frequency of selection (share of episodes)",
            title="Frequency of source model selection per dataset",
        )
    )
