"""``RunSession``: the runtime side of a run, made lazily from its plan, and its episode work.

A plan decides, a session computes (CONTRIBUTING.md, "The runner: spec, plan, session"). A
process makes one session per plan and device; a second session of the same plan is a fresh
worker (``preflight``'s re-run).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from fewtrans_board.api.adapter import Adapter, AdapterConfig
from fewtrans_board.api.backbone import Backbone, Preprocessing
from fewtrans_board.api.fit_options import FitOptions
from fewtrans_board.core.errors import FewtransError
from fewtrans_board.core.sandbox import Isolation, Limits
from fewtrans_board.datasets.decoded import DecodedImages
from fewtrans_board.datasets.images import ImageStore
from fewtrans_board.episodes.manifest import ManifestEpisode
from fewtrans_board.runner import provenance
from fewtrans_board.runner.episode_rows import episode_rows
from fewtrans_board.runner.evaluate import ConfigOutcome, evaluate_episode
from fewtrans_board.runner.features import FeatureCache
from fewtrans_board.runner.image_scope import DecodedScope, decoded_scope, feature_universe
from fewtrans_board.runner.plan import RunPlan, episode_items, episode_text, lockstep_settings
from fewtrans_board.runner.presentation import EpisodeInputs, Serve, episode_inputs
from fewtrans_board.runner.spec import resolved_threads
from fewtrans_board.runner.worker.isolated import PluginWorker
from fewtrans_board.runner.worker.memory import PeakMemory
from fewtrans_board.runner.worker.messages import FitReply, WorkerSettings
from fewtrans_board.runner.worker.remote import (
    FAMILY_PRELOAD,
    ModelFacts,
    WorkerEmbedder,
    fit_in_worker,
    fit_request,
    outcomes_from_reply,
    plugin_places,
    plugins_request,
)
from fewtrans_board.runner.worker.trainable import TrainableTally


def worker_settings(plan: RunPlan, device: str) -> WorkerSettings:
    """How a run's plugin worker on ``device`` loads and runs the plugins.

    Verification replays these from the run's provenance
    (:func:`fewtrans_board.leaderboard.verification.options.replayed_settings`).
    """
    spec, selection = plan.spec, plan.registry.plugins
    extras = selection.extras if selection else []
    modules = [e.module for e in extras if e.module]
    modules += [type(e.plugin).__module__ for e in extras if e.plugin]
    places = plugin_places(plan.providers(), modules)
    return WorkerSettings(
        model=spec.model,
        adapter=spec.adapter,
        weights=str(Path(spec.weights).resolve()) if spec.weights else None,
        device=device,
        threads=resolved_threads(spec),
        plugins=plugins_request(selection, plan.providers()),
        training_free=bool(plan.adapter_cls.training_free),
        pins=tuple(plan.providers()),
        batching=spec.batching,
        max_memory=spec.max_memory,
        memoize=spec.feature_cache,
        preload=FAMILY_PRELOAD.get(str(plan.model.obj.family), ()),
        plugin_paths=tuple(places.sys_path),
        bind_paths=tuple(places.binds),
        isolation=plan.isolation,
        limits=Limits.defaults(device),
    )


class RunSession:
    """A plan's heavy state, made on first use, and the operations on its episodes.

    Use it as a context manager (or call :meth:`close`): it stops the plugin worker.

    Args:
        plan: the run.
        device: where this process computes (default: the run's ``--device``; a pool
            worker may be placed on one of several GPUs).
        feature_folder: where the frozen-feature cache is kept (``None``: in memory).
        decoded_folder: the shared decoded-image files (``None``: decode in this process).
    """

    def __init__(
        self,
        plan: RunPlan,
        *,
        device: str | None = None,
        feature_folder: Path | None = None,
        decoded_folder: Path | None = None,
    ) -> None:
        self.plan = plan
        self.device = device or plan.spec.device
        self.feature_folder = feature_folder
        self.decoded_folder = decoded_folder
        # Per-episode choices adapters report (``predictor.record``), until a shard stores them,
        # and the peak memory and trainable counts of the shard being computed, if one is.
        self.adapter_records: dict[str, dict[str, Any]] = {}
        self.memory: PeakMemory | None = None
        self.trainable: TrainableTally | None = None
        self._worker: PluginWorker | None = None
        self._backbone: Backbone | None = None
        self._images: ImageStore | None = None
        self._features: FeatureCache | None = None
        self._scope: DecodedScope | None = None
        self._run_id: str | None = None

    def __enter__(self) -> RunSession:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    @property
    def inline(self) -> bool:
        """Whether plugin code runs in this process (else in the plugin worker)."""
        return self.plan.isolation is Isolation.INLINE

    def inline_adapter(self) -> Adapter | None:
        """A fresh adapter instance where plugins run inline (``None``: the worker has one)."""
        return self.plan.adapter_cls() if self.inline else None

    # --- the plugin worker and the backbone ---------------------------------------------

    @property
    def worker(self) -> PluginWorker:
        """The run's plugin worker (started, with the plugins loaded once, on first use).

        Raises:
            FewtransError: the worker cannot start, or the model or adapter cannot load.
        """
        if self._worker is None:
            worker = PluginWorker(worker_settings(self.plan, self.device))
            info = worker.start()
            if info.load_error is not None:
                worker.close()
                raise FewtransError(info.load_error)
            self._worker = worker
        return self._worker

    def close(self) -> None:
        """Stop the plugin worker, if one was started."""
        worker, self._worker = self._worker, None
        if worker is not None:
            worker.close()

    @property
    def backbone(self) -> Backbone:
        """The backbone loaded in this process (first access loads it)."""
        if self._backbone is None:
            spec = self.plan.spec
            self._backbone = self.plan.model.obj.load(
                spec.weights, self.device, registry=self.plan.registry
            )
        return self._backbone

    @property
    def model_facts(self) -> ModelFacts:
        """Input size, weights identity and features of the backbone, wherever it runs."""
        if self.inline:
            b = self.backbone
            return ModelFacts(
                b.image_size, b.weights_id, b.feature_dim, dict(b.info), str(b.device)
            )
        info = self.worker.info
        assert info is not None
        return ModelFacts(
            info.image_size, info.weights_id, info.feature_dim, info.model_info, info.device
        )

    @property
    def fit_options(self) -> FitOptions:
        """What ``fit_many`` gets as ``options``: the run's ``--batching`` and ``--max-memory``."""
        return FitOptions(lockstep_settings(self.plan.spec, self.device))

    # --- images and frozen features ------------------------------------------------------

    @property
    def preprocessing(self) -> Preprocessing:
        """The manifest protocol's transform at the backbone's input size."""
        return provenance.preprocessing(self.plan, self.model_facts)

    @property
    def scope(self) -> DecodedScope:
        """The dataset copy's items (or the manifest's): decoded files and feature chunks."""
        if self._scope is None:
            self._scope = decoded_scope(self.plan)
        return self._scope

    @functools.cached_property
    def feature_universe(self) -> str | None:
        """What frozen features are chunked over (recorded in the run's identity)."""
        return feature_universe(self.plan, lambda: self.scope)

    @property
    def images(self) -> ImageStore:
        """The per-process image store (reading the shared decoded file when one is set)."""
        if self._images is None:
            plan = self.plan
            decoded = None
            if self.decoded_folder is not None:
                scope = self.scope  # one file per dataset copy: every manifest's
                decoded = DecodedImages(
                    self.decoded_folder,
                    scope.key,
                    self.preprocessing.digest(),
                    scope.items,
                    self.preprocessing.image_size,
                    source=plan.image_source(),
                )
            self._images = ImageStore(
                plan.dataset.obj,
                plan.root,
                self.preprocessing,
                decoded=decoded,
                device=self.backbone.device if self.inline else "cpu",
            )
        return self._images

    @property
    def features(self) -> FeatureCache | None:
        """The feature cache, for frozen-backbone adapters when enabled."""
        plan = self.plan
        if not (plan.spec.feature_cache and plan.adapter_cls.frozen_backbone):
            return None
        if self._features is None:
            # The copy's items: every manifest of the copy reads one entry per backbone.
            universe = (
                self.scope.items
                if self.feature_universe is not None
                else sorted(set(episode_items(plan.episodes)))
            )
            embedder = (
                self.backbone
                if self.inline
                else WorkerEmbedder(self.worker, resolved_threads(plan.spec))
            )
            self._features = FeatureCache(
                embedder, self.images, self.feature_folder, universe=universe
            )
        return self._features

    def prefetch_features(self, episodes: Iterable[ManifestEpisode], progress: bool) -> None:
        """Embed, in one pass, every frozen feature ``episodes`` need (no-op without a cache).

        Fetching features episode by episode instead grows the cache matrix once per new
        chunk, copying it each time. Features are identical either way: chunks are fixed
        slices of the run's item universe.

        Args:
            episodes: the episodes about to be evaluated.
            progress: show an embedding progress bar on stderr.
        """
        if self.features is not None:
            self.features.ensure(episode_items(episodes), progress=progress)

    # --- identity and provenance (functions of the plan and the model's facts) ----------

    def identity(self) -> dict[str, Any]:
        """The run identity stored in ``run.json`` and checked on resume."""
        return provenance.run_identity(
            self.plan, self.model_facts.weights_id, self.feature_universe
        )

    def run_id(self) -> str:
        """Short hash of the identity (loads the model, or starts the worker, once)."""
        if self._run_id is None:
            self._run_id = provenance.run_id(
                self.plan, self.model_facts.weights_id, self.feature_universe
            )
        return self._run_id

    def numeric_environment(self) -> dict[str, Any]:
        """Libraries, processor and plugin versions that change this run's numbers."""
        return provenance.run_environment(self.plan, self.device)

    def provenance(self) -> dict[str, Any]:
        """Everything a reader needs to trust a number (stored in every shard)."""
        return provenance.run_provenance(
            self.plan, self.model_facts, self.device, self.feature_universe
        )

    # --- one episode ----------------------------------------------------------------------

    def inputs(
        self, episode: ManifestEpisode, *, salt: str = "", serve: Serve = "features"
    ) -> EpisodeInputs:
        """Adapter inputs of an episode, in the seeded presentation order.

        Args:
            episode: the manifest episode.
            salt: secret mixed into the query order (verification).
            serve: ``pixels`` to hand pixels even where cached features exist.
        """
        plan = self.plan
        return episode_inputs(
            episode,
            plan.dataset.obj,
            self.images,
            self.features if serve == "features" else None,
            plan.manifest.sha256,
            serve=serve,
            memoize_features=plan.spec.feature_cache,
            salt=salt,
        )

    def outcomes(
        self,
        inputs: EpisodeInputs,
        adapter: Adapter | None,
        configs: Sequence[AdapterConfig] | None = None,
        *,
        loop: bool = False,
    ) -> list[ConfigOutcome]:
        """Fit and predict every configuration on a presented episode, wherever plugins run.

        Args:
            inputs: the presented episode.
            adapter: the adapter instance (inline runs; ``None`` in a worker run).
            configs: the configurations (default: the run's grid).
            loop: fit each configuration with ``fit``, never ``fit_many``.
        """
        configs = self.plan.grid if configs is None else configs
        if self.inline:
            assert adapter is not None
            return evaluate_episode(
                adapter,
                self.backbone,
                inputs,
                configs,
                self.plan.manifest.sha256,
                loop=loop,
                options=self.fit_options,
            )
        seeds = self.plan.seeds(inputs.episode, configs)
        reply = self.ask(inputs, configs, seeds, loop=loop)
        if self.memory is not None:
            self.memory.observe(reply.peak_bytes)
        return outcomes_from_reply(inputs, configs, seeds, reply)

    def ask(
        self,
        inputs: EpisodeInputs,
        configs: Sequence[AdapterConfig],
        seeds: list[int],
        **options: Any,
    ) -> FitReply:
        """Send one episode request to the plugin worker (see :func:`~.remote.fit_request`)."""
        request = fit_request(
            inputs,
            [c.to_dict() for c in configs],
            seeds,
            memoize=self.plan.spec.feature_cache,
            **options,
        )
        episode = inputs.episode
        return fit_in_worker(self.worker, request, self.plan.where(episode), episode_text(episode))

    def episode_rows(
        self, episode: ManifestEpisode, adapter: Adapter | None
    ) -> list[dict[str, Any]]:
        """Evaluate every configuration on an episode and return its result rows."""
        inputs = self.inputs(episode)
        outcomes = self.outcomes(inputs, adapter)
        records = {str(o.index): o.record for o in outcomes if o.record is not None}
        if records:
            self.adapter_records[str(episode.index)] = records
        if self.trainable is not None:
            self.trainable.add([o.trainable for o in outcomes])
        manifest = self.plan.manifest
        return episode_rows(self.run_id(), manifest.dataset, manifest.sha256, inputs, outcomes)
