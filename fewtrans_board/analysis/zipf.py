"""Adjusted Zipf frequency of class names vs CLIP adaptation gain (FewTrans §VI-C, Fig. 6).

FewTrans relates the text-domain rarity of a dataset's class names to how much full
fine-tuning gains over zero-shot CLIP, and reports Spearman rho = -0.881 (p = 0.0039) over
its datasets: the rarer the words, the more zero-shot collapses and fine-tuning must correct.

The paper does not define "adjusted"; this module's definition, applied per class name:

1. normalise the name: underscores and slashes become spaces, lowercase;
2. score the whole name with ``wordfreq.zipf_frequency(name, "en")``, which combines the
   words of a multi-word name as ``1/f = sum(1/f_i)`` (so rare *combinations* of common
   words, e.g. "cedar apple rust leaf", score low: the paper's compositional shift);
3. a name containing a token with a digit ("707-320", "A340-600") scores 0: wordfreq maps
   digits to a generic number frequency, which would make technical identifiers look
   common, while the paper counts them as lacking natural-language context.

A dataset's score is the mean over the class names of its evaluation classes. wordfreq's word
lists ship in its wheel, so no network is used.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from fewtrans_board.analysis.report import provenance
from fewtrans_board.api.dataset_spec import DatasetSpec
from fewtrans_board.core.errors import FewtransError, UnknownNameError
from fewtrans_board.figures.charts import scatter
from fewtrans_board.results.load import RunResults
from fewtrans_board.stats.correlation import spearman

if TYPE_CHECKING:
    from fewtrans_board.registry.lookup import Registry

PAPER_RHO, PAPER_P = -0.881, 0.0039
LANGUAGE = "en"
MIN_DATASETS = 3
"""Points Spearman's rho needs. FewTrans Fig. 6 has one point per dataset (the mean Zipf
score of its class names against its gain), so one dataset is one point: with one or two
the points are reported without a correlation."""


def normalize_name(name: str) -> str:
    """The class name as words: underscores and slashes to spaces, lowercase, trimmed."""
    return " ".join(name.replace("_", " ").replace("/", " ").lower().split())


def adjusted_zipf(name: str) -> float:
    """Adjusted Zipf frequency of one class name (see the module docstring)."""
    import wordfreq
    from wordfreq.tokens import tokenize

    text = normalize_name(name)
    tokens = tokenize(text, LANGUAGE)
    if not tokens or any(any(ch.isdigit() for ch in token) for token in tokens):
        return 0.0
    return float(wordfreq.zipf_frequency(text, LANGUAGE))


def dataset_zipf(names: Sequence[str]) -> dict[str, Any]:
    """Mean adjusted Zipf frequency of class names, with each name's score."""
    scores = {name: adjusted_zipf(name) for name in names}
    return {
        "mean": float(np.mean(list(scores.values()))) if scores else 0.0,
        "classes": len(scores),
        "names": scores,
    }


def check_adapter_pair(registry: Registry, *, finetune: str, zero_shot: str) -> None:
    """Fail before reading any run unless both adapters are registered and differ.

    Raises:
        FewtransError: an unknown adapter (naming its option), or one adapter given twice
            (its gain over itself is zero by construction).
    """
    for option, name in (("--finetune", finetune), ("--zero-shot", zero_shot)):
        try:
            registry.adapters.get(name)
        except UnknownNameError as exc:
            raise FewtransError(f"{option}: {exc}") from None
    if finetune == zero_shot:
        raise FewtransError(
            f"--finetune and --zero-shot both name {finetune!r}; its gain over itself is zero: "
            "name the fine-tuning adapter and the zero-shot baseline"
        )


def adaptation_gains(
    runs: Sequence[RunResults], finetune: str, zero_shot: str
) -> dict[tuple[str, str], dict[str, Any]]:
    """Mean HPE accuracy of ``finetune`` minus that of ``zero_shot``, per (model, dataset).

    Only (model, dataset) pairs that have runs of both adapters count.

    Raises:
        FewtransError: two runs of one adapter on the same model and dataset.
    """
    by_key: dict[tuple[str, str, str], RunResults] = {}
    for run in runs:
        key = (run.provenance.model.name, run.dataset, run.provenance.adapter.name)
        if key[2] not in (finetune, zero_shot):
            continue
        if key in by_key:
            raise FewtransError(
                f"two {key[2]} runs of {key[0]} on {key[1]}: {by_key[key].path} and {run.path}; "
                "pass one of them"
            )
        by_key[key] = run
    gains = {}
    for (model, dataset, adapter), run in sorted(by_key.items()):
        if adapter != finetune or (model, dataset, zero_shot) not in by_key:
            continue
        base = by_key[(model, dataset, zero_shot)]
        tuned_mean = float(np.mean(run.aggregations()["hpe"]))
        zero_mean = float(np.mean(base.aggregations()["hpe"]))
        gains[(model, dataset)] = {
            "finetune": tuned_mean,
            "zero_shot": zero_mean,
            "gain": tuned_mean - zero_mean,
            "runs": [str(run.path), str(base.path)],
        }
    return gains


def correlation_note(datasets: int) -> str | None:
    """Why a report of ``datasets`` points has no correlation (``None``: it has one)."""
    if datasets >= MIN_DATASETS:
        return None
    return (
        f"Spearman's rho needs at least {MIN_DATASETS} datasets (FewTrans Fig. 6 has one point "
        f"per dataset); found {datasets}: the points without a correlation"
    )


def zipf_report(
    runs: Sequence[RunResults],
    datasets: dict[str, DatasetSpec],
    *,
    finetune: str = "finetune-clip-both",
    zero_shot: str = "zero-shot-clip",
) -> tuple[dict[str, Any], str]:
    """Spearman correlation of dataset Zipf scores with the fine-tune minus zero-shot gain.

    Args:
        runs: stored runs, among them ``finetune`` and ``zero_shot`` runs per dataset.
        datasets: dataset specs by name (class names of the evaluation classes are scored).
        finetune: the full fine-tuning adapter.
        zero_shot: the zero-shot adapter.

    Returns:
        The report (``points``, ``spearman``, ``note``) and its SVG. With fewer than
        :data:`MIN_DATASETS` datasets ``spearman`` holds NaN (``null`` in the written JSON)
        and ``note`` says why; otherwise ``note`` is ``None``.

    Raises:
        FewtransError: no dataset with both runs, several models mixed, or a dataset the
            registry does not know.
    """
    gains = adaptation_gains(runs, finetune, zero_shot)
    models = sorted({model for model, _ in gains})
    if len(models) > 1:
        raise FewtransError(
            f"zipf compares datasets under one model; the runs hold {', '.join(models)}: "
            "pass the runs of one model"
        )
    if not gains:
        raise FewtransError(
            f"zipf needs {finetune} and {zero_shot} runs of one model on at least one dataset "
            f"(one point each; Spearman's rho needs {MIN_DATASETS}); found both on none"
        )
    points = []
    for (model, dataset), gain in gains.items():
        if dataset not in datasets:
            raise FewtransError(f"dataset {dataset!r} of {gain['runs'][0]} is not registered")
        spec = datasets[dataset]
        points.append(
            {
                "dataset": dataset,
                "model": model,
                "zipf": dataset_zipf(spec.names_of(spec.split.base)),
                **gain,
            }
        )
    correlation = spearman([p["zipf"]["mean"] for p in points], [p["gain"] for p in points])
    note = correlation_note(len(points))
    data = {
        "analysis": "zipf",
        "model": models[0],
        "finetune": finetune,
        "zero_shot": zero_shot,
        "points": points,
        "spearman": correlation.to_dict(),
        "note": note,
        "paper": {"rho": PAPER_RHO, "p": PAPER_P, "source": "FewTrans §VI-C (Fig. 6)"},
        "provenance": provenance(
            {"runs": [r for p in points for r in p["runs"]], "language": LANGUAGE}
        ),
    }
    figure = scatter(
        [(p["dataset"], p["zipf"]["mean"], p["gain"]) for p in points],
        x_title="adjusted Zipf frequency of class names",
        y_title=f"gain: {finetune} - {zero_shot} (points)",
        title=(
            f"Text rarity vs adaptation gain: Spearman rho = {correlation.coefficient:.2f}"
            if note is None
            else f"Text rarity vs adaptation gain ({len(points)} of {MIN_DATASETS} datasets)"
        ),
    )
    return data, str(figure)
