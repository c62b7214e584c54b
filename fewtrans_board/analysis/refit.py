"""Re-fit a stored run's adapter on sampled episodes and keep the adapted encoders.

Normal runs keep no adapted weights (that would cost memory and disk on every episode).
The analyses that need them re-create the run from its provenance (model, adapter, centre,
HPE grid, manifest hash) and re-fit only the sampled episodes through the runner's opt-in
``observe`` hook. Seeds depend only on (manifest, episode, configuration), so the re-fit
reproduces the run's adapted model; the share of the stored predictions it reproduces is
reported as ``agreement`` (1.0 on the machine that made the run).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fewtrans_board.analysis.sweep import average_optimal
from fewtrans_board.core.errors import FewtransError
from fewtrans_board.episodes.manifest import Manifest
from fewtrans_board.registry.lookup import Registry
from fewtrans_board.results.load import RunResults
from fewtrans_board.results.row_schema import CONFIG_KIND
from fewtrans_board.runner.evaluate import evaluate_episode
from fewtrans_board.runner.plan import RunPlan, plan_run
from fewtrans_board.runner.session import RunSession
from fewtrans_board.runner.spec import RunSpec

if TYPE_CHECKING:
    import torch
    from torch import nn

    from fewtrans_board.api.backbone import Backbone


@dataclass
class AdaptedEpisode:
    """One re-fitted episode.

    Attributes:
        episode: the episode index.
        backbone: the pretrained backbone (its encoder holds the initial weights).
        encoder: the adapted image encoder the predictor uses.
        query_pixels: the episode's preprocessed query images.
        agreement: share of the run's stored query predictions the re-fit reproduces.
    """

    episode: int
    backbone: Backbone
    encoder: nn.Module
    query_pixels: torch.Tensor
    agreement: float


def adapted_encoder(
    predictor: Any, backbone: Backbone, adapter: str, *, frozen_backbone: bool = False
) -> nn.Module:
    """The image encoder a fitted predictor classifies with.

    Fine-tuning and PEFT predictors hold their adapted copy as ``encoder``. Frozen-feature
    predictors (heads, prototypes) use the unchanged ``backbone``: those whose adapter
    declares ``frozen_backbone`` (the runner enforces it: such adapters may be served cached
    features only) or that hold the backbone itself. Batched heads hold neither.

    Raises:
        FewtransError: the predictor exposes neither.
    """
    from torch import nn

    encoder: Any = getattr(predictor, "encoder", None)
    if isinstance(encoder, nn.Module):
        return encoder
    if frozen_backbone or getattr(predictor, "backbone", None) is backbone:
        unchanged: nn.Module = backbone.image_encoder
        return unchanged
    raise FewtransError(
        f"adapter {adapter!r}: its predictor ({type(predictor).__name__}) exposes no adapted "
        "image encoder (an 'encoder' module attribute), so weights and features cannot be analysed"
    )


def run_spec_of(
    run: RunResults, manifest: Path, root: Path | None, weights: Path | None, device: str
) -> RunSpec:
    """The ``RunSpec`` that re-creates a stored run (paths supplied by the caller).

    Raises:
        FewtransError: the manifest is not the one the run was evaluated on.
    """
    loaded = Manifest.load(manifest)
    record = run.provenance
    expected = record.manifest.sha256
    if loaded.sha256 != expected:
        raise FewtransError(
            f"{manifest} (sha256 {loaded.sha256[:12]}...) is not the manifest run {run.path} "
            f"used ({record.manifest.file}, sha256 {expected[:12]}...)"
        )
    identity = record.identity
    return RunSpec(
        model=record.model.name,
        adapter=record.adapter.name,
        manifest=str(manifest),
        hpe=record.hpe.name,
        weights=str(weights) if weights else None,
        root=str(root) if root else None,
        config=dict(record.adapter.centre),
        limit=identity.limit,
        shards=identity.shards,
        device=device,
        feature_cache=identity.feature_cache,
        batching=identity.batching or "auto",
    )


def replay_plan(
    run: RunResults,
    registry: Registry,
    manifest: Path,
    *,
    root: Path | None = None,
    weights: Path | None = None,
    device: str = "cpu",
    **changes: Any,
) -> RunPlan:
    """The plan that re-creates a stored run in this process (``changes``: to its spec).

    Raises:
        FewtransError: another manifest than the run's, or the installed adapter builds
            another grid than the run used.
    """
    spec = dataclasses.replace(run_spec_of(run, manifest, root, weights, device), **changes)
    plan = plan_run(spec, registry)
    identity = run.provenance.identity
    if [c.to_dict() for c in plan.grid] != list(identity.grid):
        raise FewtransError(
            f"the installed adapter {identity.adapter!r} builds another HPE grid than run "
            f"{run.path} used (adapter version changed?)"
        )
    return plan


def check_weights(run: RunResults, backbone: Backbone) -> None:
    """Refuse a backbone loaded with other weights than the stored run used.

    Raises:
        FewtransError: naming both weights and what to pass.
    """
    identity = run.provenance.identity
    if backbone.weights_id != identity.weights_id:
        raise FewtransError(
            f"model {identity.model!r} loaded with weights {backbone.weights_id}, but run "
            f"{run.path} used {identity.weights_id}: pass the run's --weights"
        )


def best_config_index(run: RunResults) -> int:
    """The configuration with the best mean accuracy over the run's episodes."""
    return average_optimal(run.config_matrix()[1])


def sample_episodes(available: list[int], count: int, seed: int) -> list[int]:
    """``count`` episode indices drawn without replacement (seeded), sorted."""
    if count < 1:
        raise FewtransError(f"--episodes must be positive, got {count}")
    rng = np.random.default_rng(seed)
    chosen = rng.choice(len(available), size=min(count, len(available)), replace=False)
    return sorted(available[int(i)] for i in chosen)


def _stored_predictions(run: RunResults, episode: int, config_index: int) -> np.ndarray:
    mask = (
        (run.column("kind") == CONFIG_KIND)
        & (run.column("split") == "base")
        & (run.column("episode") == episode)
        & (run.column("config_index") == config_index)
    )
    rows = np.flatnonzero(mask)
    if len(rows) != 1:
        raise FewtransError(f"run {run.path} has no stored row for episode {episode}")
    return np.asarray(run.table.column("predictions")[int(rows[0])].as_py())


def refit_episodes(
    run: RunResults,
    registry: Registry,
    manifest: Path,
    *,
    episodes: int,
    seed: int = 0,
    config_index: int | None = None,
    root: Path | None = None,
    weights: Path | None = None,
    device: str = "cpu",
) -> tuple[dict[str, Any], Iterator[AdaptedEpisode]]:
    """Re-fit one configuration of a stored run on sampled episodes.

    Args:
        run: the stored run.
        registry: plugin registry (the run's model and adapter must be installed).
        manifest: the run's manifest file (checked by hash).
        episodes: how many of the run's episodes to sample.
        seed: sampling seed.
        config_index: the grid configuration to re-fit (default: the run's best).
        root: the local dataset copy, for non-embedded datasets.
        weights: the model checkpoint the run used, if it used one.
        device: torch device.

    Returns:
        ``(description, iterator)``: what is re-fitted (model, adapter, configuration,
        episodes) and a lazy iterator yielding one :class:`AdaptedEpisode` at a time.

    Raises:
        FewtransError: the manifest, weights or grid differ from the run's, or the
            configuration index is out of range.
    """
    plan = replay_plan(run, registry, manifest, root=root, weights=weights, device=device)
    session = RunSession(plan)
    check_weights(run, session.backbone)
    identity = run.provenance.identity
    grid = [c.to_dict() for c in plan.grid]
    index = best_config_index(run) if config_index is None else config_index
    if not 0 <= index < len(grid):
        raise FewtransError(f"--config-index {index} is outside 0..{len(grid) - 1}")
    stored = set(int(e) for e in run.config_matrix()[0])
    chosen = sample_episodes([e.index for e in plan.episodes if e.index in stored], episodes, seed)
    description = {
        "run": str(run.path),
        "run_id": run.provenance.run_id,
        "model": identity.model,
        "weights_id": identity.weights_id,
        "adapter": identity.adapter,
        "dataset": run.dataset,
        "config_index": index,
        "config": grid[index],
        "episodes": chosen,
        "sampling_seed": seed,
    }
    return description, _iterate(session, run, chosen, index)


def _iterate(
    session: RunSession, run: RunResults, chosen: list[int], index: int
) -> Iterator[AdaptedEpisode]:
    plan = session.plan
    by_index = {e.index: e for e in plan.episodes}
    adapter = plan.adapter_cls()
    config = plan.grid[index]
    for episode_index in chosen:
        # The analyses read query pixels, so they are served even to frozen-feature adapters.
        inputs = session.inputs(by_index[episode_index], serve="pixels")
        kept: list[Any] = []

        def keep(_index: int, _config: Any, predictor: Any, store: list[Any] = kept) -> None:
            store.append(predictor)

        outcomes = evaluate_episode(
            adapter,
            session.backbone,
            inputs,
            [config],
            plan.manifest.sha256,
            observe=keep,
            options=session.fit_options,
        )
        predictions = outcomes[0].logits.argmax(axis=1)
        stored = _stored_predictions(run, episode_index, index)
        yield AdaptedEpisode(
            episode=episode_index,
            backbone=session.backbone,
            encoder=adapted_encoder(
                kept[0],
                session.backbone,
                plan.spec.adapter,
                frozen_backbone=plan.adapter_cls.frozen_backbone,
            ),
            query_pixels=inputs.query.pixels,
            agreement=float((predictions == stored).mean()),
        )
