"""The validation set illusion: cross-validation on the support set (FewTrans §IV-B4, Fig. 3).

README.md ("Analyses") describes the comparison: per episode of a run with several
configurations, l-fold cross-validation on the *support set* (default 5 folds; K folds,
i.e. leave-one-out, when a class has K < l shots; 1-shot episodes are reported as
``impossible``, never silently skipped) against the run's **average-optimal** configuration
(:func:`~fewtrans_board.analysis.sweep.average_optimal`), per shot count K, with the paired
difference (average-optimal minus cross-validation) and its 95% CI. Here: each class's
support images are dealt, in a seeded random order, round-robin into the folds; the chosen
configuration has the best mean held-out accuracy (ties: the lowest index), and its test
accuracy is the run's stored query accuracy of that configuration (the same full-support
fit, same seed). The re-fits run in this process; fold seeds derive from the run's own
(manifest, episode, configuration) seeds and the fold, so the analysis repeats exactly.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fewtrans_board.analysis.refit import check_weights, replay_plan
from fewtrans_board.analysis.report import provenance
from fewtrans_board.analysis.sweep import average_optimal, config_label, varied_fields
from fewtrans_board.core.errors import FewtransError
from fewtrans_board.figures.charts import layer_lines
from fewtrans_board.registry.lookup import Registry
from fewtrans_board.results.load import RunResults
from fewtrans_board.runner.evaluate import config_seed, fit_predictors, predict_logits
from fewtrans_board.runner.plan import RunPlan
from fewtrans_board.runner.session import RunSession
from fewtrans_board.stats.intervals import mean_ci

if TYPE_CHECKING:
    from fewtrans_board.api.adapter import Adapter, AdapterConfig
    from fewtrans_board.api.backbone import Backbone
    from fewtrans_board.api.fit_options import FitOptions
    from fewtrans_board.episodes.manifest import ManifestEpisode
    from fewtrans_board.runner.presentation import EpisodeInputs

DEFAULT_FOLDS = 5
IMPOSSIBLE = "impossible"


@dataclasses.dataclass(frozen=True)
class FoldPlan:
    """How an episode's support set is cross-validated.

    Attributes:
        folds: number of folds (``0``: impossible).
        scheme: ``"5-fold"``, ``"leave-one-out"`` or ``"impossible"``.
        reason: why, when the scheme is not the requested ``l``-fold.
    """

    folds: int
    scheme: str
    reason: str = ""


def fold_plan(shots: Sequence[int], folds: int = DEFAULT_FOLDS) -> FoldPlan:
    """The cross-validation an episode with ``shots`` support images per class allows.

    Args:
        shots: support images per class.
        folds: the requested ``l`` (at least 2).

    Raises:
        FewtransError: ``folds`` < 2.
    """
    if folds < 2:
        raise FewtransError(f"cross-validation needs at least 2 folds, got {folds}")
    smallest = min(shots)
    if smallest < 2:
        return FoldPlan(
            0, IMPOSSIBLE, "a class has a single support image: nothing to hold out and train on"
        )
    if smallest >= folds:
        return FoldPlan(folds, f"{folds}-fold")
    if all(k == smallest for k in shots):
        return FoldPlan(smallest, "leave-one-out", f"{smallest} shots < {folds} folds")
    return FoldPlan(
        smallest,
        f"{smallest}-fold",
        f"the smallest class has {smallest} shots < {folds} folds",
    )


def assign_folds(labels: np.ndarray, folds: int, seed: int) -> np.ndarray:
    """Fold index of each support image, stratified by class.

    Each class's images, in a seeded random order, are dealt round-robin into ``folds``
    folds: every fold holds ``floor`` or ``ceil`` of ``K_c / folds`` images of class ``c``,
    so with ``folds`` <= the smallest class every fold holds every class.

    Args:
        labels: support labels ``[S]``.
        folds: number of folds.
        seed: the random order's seed.
    """
    rng = np.random.default_rng(seed)
    fold = np.empty(len(labels), dtype=np.int64)
    for label in np.unique(labels):
        members = np.flatnonzero(labels == label)
        order = rng.permutation(len(members))
        fold[members[order]] = np.arange(len(members)) % folds
    return fold


def fold_seed(manifest_sha256: str, episode: int) -> int:
    """Seed of an episode's fold assignment."""
    text = f"{manifest_sha256}:{episode}:cross-validation"
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


def cross_validation_scores(
    adapter: Adapter,
    backbone: Backbone,
    inputs: EpisodeInputs,
    configs: Sequence[AdapterConfig],
    plan: FoldPlan,
    manifest_sha256: str,
    options: FitOptions | None = None,
) -> np.ndarray:
    """Mean held-out accuracy (%) of every configuration over the folds of the support set.

    Args:
        adapter: the adapter instance.
        backbone: the loaded backbone.
        inputs: the presented episode (only its support set is read).
        configs: the configurations.
        plan: the episode's :func:`fold_plan` (not impossible).
        manifest_sha256: the manifest hash (seeds).
        options: batching settings for ``fit_many``.

    Returns:
        ``[len(configs)]`` accuracies in percent.
    """
    import torch

    from fewtrans_board.api.episode_data import SupportSet

    episode = inputs.episode
    support = inputs.support
    labels = support.labels.cpu().numpy()
    fold = assign_folds(labels, plan.folds, fold_seed(manifest_sha256, episode.index))
    scores = np.zeros((plan.folds, len(configs)))
    for f in range(plan.folds):
        train = torch.as_tensor(np.flatnonzero(fold != f), dtype=torch.long)
        held = np.flatnonzero(fold == f)
        part = SupportSet(support.images.subset(train), support.labels[train], support.n_way)
        held_images = support.images.subset(torch.as_tensor(held, dtype=torch.long))
        seeds = [
            config_seed(manifest_sha256, episode.index, f"{c.digest()}:cv{plan.folds}:{f}")
            for c in configs
        ]

        def where(i: int, fold_index: int = f) -> str:
            return (
                f"adapter {adapter.name!r}, episode {episode.index}, cross-validation fold "
                f"{fold_index} of {plan.folds}, configuration {i} {configs[i].to_dict()}"
            )

        fitted = fit_predictors(
            adapter, backbone, part, inputs.class_names, configs, seeds, where, options=options
        )
        for i, predictor, _ in fitted:
            logits = predict_logits(predictor, held_images, support.n_way, where(i))
            scores[f, i] = float((logits.argmax(axis=1) == labels[held]).mean() * 100.0)
    mean: np.ndarray = scores.mean(axis=0)
    return mean


def analysis_plan(
    run: RunResults,
    registry: Registry,
    manifest: Path,
    *,
    root: Path | None = None,
    weights: Path | None = None,
    device: str = "cpu",
) -> RunPlan:
    """The plan that re-creates ``run`` in this process (a sweep keeps its axes).

    Raises:
        FewtransError: another manifest, or another grid than the run's.
    """
    return replay_plan(
        run,
        registry,
        manifest,
        root=root,
        weights=weights,
        device=device,
        sweep=run.provenance.hpe.sweep_axes,
        isolation="inline",
    )


def cross_validation_run(
    run: RunResults, plan: RunPlan, folds: int = DEFAULT_FOLDS, limit: int | None = None
) -> dict[str, Any]:
    """Cross-validate every episode of ``run`` (the first ``limit``) and compare.

    Args:
        run: the stored run (its query accuracies score both choices).
        plan: :func:`analysis_plan` of the run.
        folds: the requested ``l``.
        limit: only the first ``limit`` episodes (the average-optimal configuration is
            still the run's, over all of its episodes).

    Raises:
        FewtransError: the run's grid has a single configuration (nothing to choose), or
            the model loads with other weights than the run's.
    """
    episodes, matrix, names = run.config_matrix()
    if matrix.shape[1] < 2:
        raise FewtransError(
            f"run {run.path} has a single configuration: cross-validation has nothing to "
            "choose from (run 'fewtrans-board sweep --grid ...' first)"
        )
    fold_plan([folds], folds)  # refuses l < 2 before any fitting
    configs = [json.loads(n) for n in names]
    fields = varied_fields(configs, list(run.provenance.hpe.sweep_axes or {}))
    optimal = average_optimal(matrix)
    by_index = {e.index: e for e in plan.episodes}
    rows = []
    with RunSession(plan) as session:
        check_weights(run, session.backbone)
        adapter = plan.adapter_cls()
        for row, episode_index in enumerate(episodes[:limit] if limit else episodes):
            episode = by_index[int(episode_index)]
            folding = fold_plan(episode.shots(), folds)
            entry = _episode_entry(episode, folding, matrix[row], optimal)
            if folding.scheme != IMPOSSIBLE:
                scores = cross_validation_scores(
                    adapter,
                    session.backbone,
                    session.inputs(episode),
                    plan.grid,
                    folding,
                    plan.manifest.sha256,
                    session.fit_options,
                )
                choice = int(np.argmax(scores))  # ties: the lowest index
                entry.update(
                    cv_index=choice,
                    cv_config={name: configs[choice][name] for name in fields},
                    cv_accuracy=float(matrix[row, choice]),
                    cv_scores=[float(s) for s in scores],
                )
            rows.append(entry)
    record = run.provenance
    return {
        "run": str(run.path),
        "run_id": record.run_id,
        "model": record.model.name,
        "adapter": record.adapter.name,
        "dataset": run.dataset,
        "fields": fields,
        "configs": [{name: c[name] for name in fields} for c in configs],
        "average_optimal": {
            "index": optimal,
            "config": {name: configs[optimal][name] for name in fields},
            "label": config_label(configs[optimal], fields),
        },
        "episodes": rows,
    }


def _episode_entry(
    episode: ManifestEpisode, plan: FoldPlan, accuracies: np.ndarray, optimal: int
) -> dict[str, Any]:
    """An episode's row before cross-validation: its fold plan and the run's accuracies."""
    shots = episode.shots()
    return {
        "episode": int(episode.index),
        "shots": min(shots),
        "uniform_shots": len(set(shots)) == 1,
        "scheme": plan.scheme,
        "folds": plan.folds,
        "reason": plan.reason,
        "average_optimal_accuracy": float(accuracies[optimal]),
        "oracle_accuracy": float(np.nanmax(accuracies)),
        "cv_index": None,
        "cv_accuracy": None,
        "cv_scores": None,
    }


def per_shot(results: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (dataset, K): both accuracies with 95% CIs and their paired difference.

    ``cross_validation`` and ``paired_difference`` (average-optimal minus cross-validation)
    cover the episodes where cross-validation was possible; ``average_optimal`` all of them.
    """
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for result in results:
        for row in result["episodes"]:
            groups.setdefault((result["dataset"], row["shots"]), []).append(row)
    table = []
    for (dataset, shots), rows in sorted(groups.items()):
        possible = [r for r in rows if r["cv_accuracy"] is not None]
        optimal = np.array([r["average_optimal_accuracy"] for r in rows])
        cv = np.array([r["cv_accuracy"] for r in possible], dtype=float)
        paired = np.array([r["average_optimal_accuracy"] for r in possible]) - cv
        table.append(
            {
                "dataset": dataset,
                "shots": shots,
                "episodes": len(rows),
                "cv_possible": len(possible),
                "cv_impossible": len(rows) - len(possible),
                "schemes": sorted({r["scheme"] for r in rows}),
                "average_optimal": mean_ci(optimal, ddof=1).to_dict(),
                "cross_validation": mean_ci(cv, ddof=1).to_dict() if possible else None,
                "paired_difference": mean_ci(paired, ddof=1).to_dict() if possible else None,
            }
        )
    return table


def cross_validation_report(
    results: Sequence[dict[str, Any]], folds: int
) -> tuple[dict[str, Any], str]:
    """The JSON report and the figure (accuracy per shot count, both choices)."""
    table = per_shot(results)
    data = {
        "analysis": "cross-validation",
        "folds": folds,
        "runs": list(results),
        "per_shot": table,
        "paper": {
            "figure": "FewTrans Fig. 3 (validation set illusion)",
            "claim": "cross-validation on the support set falls short of the average-optimal "
            "configuration, most at few shots; 1-shot tasks cannot be cross-validated",
        },
        "provenance": provenance({"runs": [r["run"] for r in results], "folds": folds}),
    }
    labels = [f"{row['dataset']} K={row['shots']}" for row in table]
    figure = layer_lines(
        {
            "average-optimal": [row["average_optimal"]["mean"] for row in table],
            f"{folds}-fold cross-validation": [
                float("nan") if row["cross_validation"] is None else row["cross_validation"]["mean"]
                for row in table
            ],
        },
        x_labels=labels,
        x_title="shots per class (1-shot: cross-validation impossible)",
        y_title="query accuracy (%)",
        title="Cross-validation on the support set vs the average-optimal configuration",
    )
    return data, str(figure)
