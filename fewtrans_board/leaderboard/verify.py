"""Re-run a seeded sample of a submission's episodes with the pinned plugin and compare.

The scoring process never imports the plugin: the model and adapter run in a worker
process (:mod:`fewtrans_board.runner.isolated`) that receives episode tensors in an order
only this process knows and returns logits. Here the logits are put back into manifest
order and compared with the stored predictions; the installed adapter's schema is compared
with the one recorded at evaluate time; and, unless the adapter is recorded as
transductive, a configuration is re-fitted and asked for subsets of the queries first,
whose logits must match the full set's (a query's logits may not depend on the others).
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fewtrans_board.adapters.base import config_digest, typed_values
from fewtrans_board.canonical import canonical_json
from fewtrans_board.hpe.aggregate import fuse
from fewtrans_board.hpe.protocols import get_hpe_protocol, schema_roles
from fewtrans_board.leaderboard.bundle import BundleContents
from fewtrans_board.leaderboard.errors import SubmissionError
from fewtrans_board.leaderboard.store import LeaderboardStore
from fewtrans_board.leaderboard.validate import validate_contents
from fewtrans_board.models.backbone import Preprocessing
from fewtrans_board.results.load import RunResults
from fewtrans_board.results.schema import CONFIG_KIND, storable_logits
from fewtrans_board.runner.episodes import EpisodeInputs, episode_inputs, in_manifest_order
from fewtrans_board.runner.evaluate import config_seed
from fewtrans_board.runner.images import ImageStore
from fewtrans_board.runner.inductive import (
    INDUCTIVE_TOLERANCE,
    inductive_gap,
    verification_probes,
)
from fewtrans_board.runner.isolated import FitRequest, IsolatedAdapter, WorkerError, WorkerInfo
from fewtrans_board.threads import replay_threads


def check_pins_installed(pins: dict[str, str], installed: dict[str, str | None]) -> None:
    """Refuse to verify unless every pinned distribution is installed at its pinned version.

    Args:
        pins: ``{distribution: version}`` from ``submission.toml``.
        installed: what the plugin worker's environment has (``None``: missing).
    """
    wrong = [
        f"{d}=={v}" + ("" if installed.get(d) is None else f" (found {installed[d]})")
        for d, v in pins.items()
        if installed.get(d) != v
    ]
    if wrong:
        raise SubmissionError(
            "pin-not-installed",
            f"the plugin environment lacks the pinned {', '.join(wrong)}; install them there "
            f"(pip install {' '.join(f'{d}=={v}' for d, v in pins.items())}) to verify this "
            "submission",
        )


@dataclass
class _StoredEpisode:
    """The stored base-split predictions of one episode."""

    configs: dict[int, list[int]] = field(default_factory=dict)
    ensembles: dict[str, list[int]] = field(default_factory=dict)


def _stored_base_predictions(table: Any) -> dict[int, _StoredEpisode]:
    """Stored predictions of the base split, grouped by episode (no logits read)."""
    names = ["episode", "kind", "aggregation", "config_index", "predictions", "split"]
    columns = table.select(names).to_pydict()
    grouped: dict[int, _StoredEpisode] = {}
    for episode, kind, aggregation, index, predictions, split in zip(
        *(columns[n] for n in names), strict=True
    ):
        if split != "base":
            continue
        stored = grouped.setdefault(episode, _StoredEpisode())
        if kind == CONFIG_KIND:
            stored.configs[index] = predictions
        else:
            stored.ensembles.setdefault(aggregation, predictions)
    return grouped


def _check_schema(run: RunResults, info: WorkerInfo, meta_adapter: str) -> dict[str, Any]:
    """The recorded adapter schema, refused unless the installed plugin declares the same."""
    if info.load_error is not None:
        raise SubmissionError(
            "plugin-load-failed",
            f"the plugin worker could not load model/adapter of this submission: {info.load_error}",
        )
    recorded = run.meta["adapter"].get("schema")
    if not isinstance(recorded, dict):
        raise SubmissionError(
            "bad-results-schema",
            f"{run.dataset}: the results record no adapter schema; re-run with this fewtrans-board",
        )
    if canonical_json(recorded) != canonical_json(info.schema):
        raise SubmissionError(
            "schema-mismatch",
            f"{run.dataset}: the installed adapter {meta_adapter!r} declares "
            f"{canonical_json(info.schema)}, but the results were produced with "
            f"{canonical_json(recorded)}",
        )
    return recorded


@dataclass
class _RunPlan:
    """What verifying one run needs, derived from data only."""

    configs: list[dict[str, Any]]
    digests: list[str]
    aggregation: str
    transductive: bool


def _plan(run: RunResults, schema: dict[str, Any], hpe_protocol: str) -> _RunPlan:
    protocol = get_hpe_protocol(hpe_protocol)
    centre = typed_values(run.meta["adapter"]["centre"], schema["fields"])
    configs = [
        typed_values(c, schema["fields"]) for c in protocol.grid_for(centre, schema_roles(schema))
    ]
    return _RunPlan(
        configs=configs,
        digests=[config_digest(c) for c in configs],
        aggregation=protocol.aggregation,
        transductive=bool(schema.get("transductive")),
    )


def _probe_logits(
    worker: IsolatedAdapter,
    inputs: EpisodeInputs,
    plan: _RunPlan,
    seeds: list[int],
    config: int,
    probes: list[np.ndarray],
) -> list[np.ndarray]:
    """Refit one configuration alone with ``fit`` and predict query subsets on their own.

    Asked before the worker ever sees the whole query set of the episode.
    """
    position = np.argsort(inputs.query_order)
    pixels = inputs.query.pixels.numpy()
    reply = worker.fit(
        FitRequest(
            support=inputs.support.images.pixels.numpy(),
            labels=inputs.support.labels.numpy(),
            class_names=inputs.class_names,
            configs=[plan.configs[config]],
            seeds=[seeds[config]],
            query_sets=[pixels[position[p]] for p in probes],
            loop=True,
        )
    )
    return reply.query[0]


def _verify_episode(
    worker: IsolatedAdapter,
    inputs: EpisodeInputs,
    plan: _RunPlan,
    seeds: list[int],
    stored: _StoredEpisode,
    probe_config: int,
) -> dict[str, Any]:
    episode = inputs.episode
    n_query = len(inputs.query_labels)
    # A transductive adapter is only refitted on the whole query set (fit_many == fit).
    probes = (
        [np.arange(n_query)] if plan.transductive else verification_probes(n_query, episode.index)
    )
    probe_logits = _probe_logits(worker, inputs, plan, seeds, probe_config, probes)
    reply = worker.fit(
        FitRequest(
            support=inputs.support.images.pixels.numpy(),
            labels=inputs.support.labels.numpy(),
            class_names=inputs.class_names,
            configs=plan.configs,
            seeds=seeds,
            query_sets=[inputs.query.pixels.numpy()],
        )
    )
    logits = [in_manifest_order(per_config[0], inputs.query_order) for per_config in reply.query]
    predictions = [x.argmax(axis=1) for x in logits]
    agreements = [
        float(np.mean(np.asarray(stored.configs[i]) == p)) for i, p in enumerate(predictions)
    ]
    fused, _ = fuse(
        plan.aggregation,
        logits=np.stack([storable_logits(x) for x in logits]),
        predictions=np.stack(predictions),
        n_way=episode.ways,
    )
    hpe_agreement = float(np.mean(np.asarray(stored.ensembles[plan.aggregation]) == fused))
    return {
        "episode": episode.index,
        "config_agreement": float(np.mean(agreements)),
        "min_config_agreement": float(np.min(agreements)),
        "hpe_agreement": hpe_agreement,
        "probe_config": probe_config,
        "probe_gap": inductive_gap(logits[probe_config], probes, probe_logits),
    }


def verify_contents(
    contents: BundleContents,
    store: LeaderboardStore,
    *,
    sample: int = 5,
    seed: int = 0,
    threshold: float = 0.9,
    roots: dict[str, Path] | None = None,
    weights: str | None = None,
    device: str = "cpu",
    runs: Sequence[RunResults] | None = None,
    python: str | None = None,
    salt: str | None = None,
    inductive_tolerance: float = INDUCTIVE_TOLERANCE,
    threads: int | None = None,
) -> dict[str, Any]:
    """Re-run ``sample`` seeded episodes per dataset in a plugin worker and compare.

    An episode passes when the mean configuration agreement and the HPE agreement with the
    stored predictions reach ``threshold``, and one configuration refitted alone with
    ``fit`` predicts like the full run within ``inductive_tolerance``: on parts of the
    query set asked for first (inductive adapters), or on the whole set (transductive).

    Args:
        contents: the extracted bundle or store entry.
        store: the leaderboard store (for the frozen manifests).
        sample: episodes re-run per dataset.
        seed: seed choosing the episodes.
        threshold: minimum agreement.
        roots: local dataset copies by dataset name.
        weights: local checkpoint for the model.
        device: torch device of the worker.
        runs: ``contents.runs`` already loaded by validation; validated here when ``None``.
        python: interpreter of the plugin worker (an environment with the pinned plugins);
            this one when ``None``.
        salt: secret of the query presentation order; a fresh random one when ``None``.
        inductive_tolerance: largest relative logit change allowed between a query
            predicted with all queries and with a subset of them.
        threads: torch threads of the worker; ``None`` replays the recorded count
            (capped at the cores available).

    Returns:
        The verification report.

    Raises:
        SubmissionError: a pin is not installed, the plugin cannot be loaded, its schema
            differs from the recorded one, or some episode fails (``verification-failed``;
            the report lists every episode).
    """
    from fewtrans_board.plugins import get_plugin_manager
    from fewtrans_board.registry import Registry

    meta = contents.meta
    if runs is None:  # never drive a worker with runs that did not pass validation
        runs = validate_contents(contents, store).loaded
    datasets = Registry.from_plugin_manager(get_plugin_manager(entry_points=False)).datasets
    rng = np.random.RandomState(seed)
    secret = salt if salt is not None else secrets.token_hex(16)
    episodes_report = []
    transductive: dict[str, bool] = {}
    for run in runs:
        filename, manifest = store.frozen[run.meta["manifest"]["sha256"]]
        recorded = run.meta["adapter"].get("schema") or {}
        environment = run.meta.get("environment", {})
        try:
            worker = IsolatedAdapter(
                run.meta["model"]["name"],  # validated: the benchmark's model for this dataset
                meta.adapter,
                weights=weights,
                device=device,
                threads=threads or replay_threads(environment.get("torch_threads")),
                allow=sorted(meta.plugins),
                training_free=bool(recorded.get("training_free")),
                python=python,
                pins=sorted(meta.plugins),
                batching=run.meta["identity"].get("batching", "auto"),
            )
            with worker:
                assert worker.info is not None
                check_pins_installed(meta.plugins, worker.info.installed)
                schema = _check_schema(run, worker.info, meta.adapter)
                plan = _plan(run, schema, meta.hpe_protocol)
                transductive[run.dataset] = plan.transductive
                spec = datasets.get(manifest.dataset).obj
                name = manifest.meta["protocol"].get("preprocessing", "fewtrans")
                root = (roots or {}).get(run.dataset)
                images = ImageStore(spec, root, Preprocessing.named(name, worker.info.image_size))
                stored = _stored_base_predictions(run.table)
                episodes = manifest.episodes()
                chosen = sorted(
                    rng.choice(len(episodes), size=min(sample, len(episodes)), replace=False)
                )
                for index in chosen:
                    episode = episodes[int(index)]
                    inputs = episode_inputs(
                        episode, spec, images, None, manifest.sha256, serve="pixels", salt=secret
                    )
                    seeds = [config_seed(manifest.sha256, episode.index, d) for d in plan.digests]
                    result = _verify_episode(
                        worker,
                        inputs,
                        plan,
                        seeds,
                        stored[episode.index],
                        int(rng.randint(len(plan.configs))),
                    )
                    result["passed"] = (
                        result["config_agreement"] >= threshold
                        and result["hpe_agreement"] >= threshold
                        and result["probe_gap"] <= inductive_tolerance
                    )
                    episodes_report.append({"dataset": run.dataset, **result})
        except WorkerError as exc:
            raise SubmissionError("worker-failed", f"{run.dataset} ({filename}): {exc}") from exc
    report = {
        "submission": meta.id,
        "sample": sample,
        "seed": seed,
        "threshold": threshold,
        "inductive_tolerance": inductive_tolerance,
        "episodes": episodes_report,
        "passed": all(e["passed"] for e in episodes_report),
    }
    if not report["passed"]:
        failing = [
            _describe_failure(e, threshold, inductive_tolerance, transductive[e["dataset"]])
            for e in episodes_report
        ]
        error = SubmissionError(
            "verification-failed",
            f"re-running in a plugin worker disagrees with the stored results on "
            f"{'; '.join(f for f in failing if f)}",
        )
        error.report = report  # type: ignore[attr-defined]
        raise error
    return report


def _describe_failure(
    episode: dict[str, Any], threshold: float, tolerance: float, transductive: bool
) -> str:
    if episode["passed"]:
        return ""
    parts = []
    if episode["config_agreement"] < threshold or episode["hpe_agreement"] < threshold:
        parts.append(
            f"predictions agree {episode['config_agreement']:.2f} (configs) and "
            f"{episode['hpe_agreement']:.2f} (HPE), threshold {threshold}"
        )
    gap = episode["probe_gap"]
    if gap > tolerance:
        config = episode["probe_config"]
        if transductive:
            parts.append(
                f"configuration {config} refitted alone with fit() differs by {gap:.3g} "
                "(relative logits) from the batched run: fit_many() must equal fit()"
            )
        else:
            parts.append(
                f"configuration {config} refitted alone with fit() and asked for part of the "
                f"queries gives logits that differ by {gap:.3g} (relative) from the full run: "
                "a query's logits depend on the other queries (declare transductive = True) "
                "or fit_many() differs from fit()"
            )
    return f"{episode['dataset']} episode {episode['episode']}: {' and '.join(parts)}"
