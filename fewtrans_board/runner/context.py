"""``RunContext``: a run's resolved inputs, loaded once per process."""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from fewtrans_board.api.adapter import Adapter, AdapterConfig
from fewtrans_board.api.backbone import Backbone, Preprocessing
from fewtrans_board.api.fit_options import FitOptions
from fewtrans_board.api.recipe import Recipe
from fewtrans_board.blocks.lockstep import LockstepSettings, parse_memory, settings_for
from fewtrans_board.core.errors import FewtransError
from fewtrans_board.core.sandbox import Isolation, Limits
from fewtrans_board.core.version import __version__
from fewtrans_board.datasets.decoded import DecodedImages
from fewtrans_board.datasets.images import ImageStore
from fewtrans_board.episodes.manifest import Manifest, ManifestEpisode
from fewtrans_board.episodes.verify import verify_manifest
from fewtrans_board.hpe.protocols import check_schema_fits, get_hpe_protocol
from fewtrans_board.registry.lookup import Registry
from fewtrans_board.results.schema import run_id_of
from fewtrans_board.runner.centres import recipe_centre, resolve_centre
from fewtrans_board.runner.episode_rows import episode_rows
from fewtrans_board.runner.evaluate import ConfigOutcome, config_seed, evaluate_episode
from fewtrans_board.runner.features import FeatureCache
from fewtrans_board.runner.presentation import EpisodeInputs, Serve, episode_inputs
from fewtrans_board.runner.spec import (
    RunSpec,
    load_centre_file,
    numeric_environment,
    resolved_threads,
    run_identity,
)
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
    resolve_isolation,
)
from fewtrans_board.runner.worker.trainable import TrainableTally

EPISODES_PER_SHARD = 50


class RunContext:
    """Resolves names, loads the manifest and (lazily) the backbone, plans shards.

    Args:
        spec: the run inputs.
        registry: the plugin registry to resolve names with.
        check_items: verify that the local dataset copy holds every manifest item.
    """

    def __init__(self, spec: RunSpec, registry: Registry, *, check_items: bool = True) -> None:
        self.spec = spec
        self.registry = registry
        self.manifest = Manifest.load(spec.manifest)
        self.dataset = registry.datasets.get(self.manifest.dataset)
        self.model = registry.model(spec.model)
        self.adapter_entry = registry.adapters.get(spec.adapter)
        self.adapter_cls: type[Adapter] = self.adapter_entry.obj
        if self.adapter_cls.needs_text and not self.model.obj.has_text:
            raise FewtransError(
                f"adapter {spec.adapter!r} needs a CLIP-style model with a text tower; "
                f"{spec.model!r} is image-only"
            )
        self.hpe = get_hpe_protocol(spec.hpe)
        if spec.sweep is not None:
            self.hpe = self.hpe.with_axes(spec.sweep)
        elif self.hpe.epoch_rule == "explicit":
            raise FewtransError(
                f"the {self.hpe.name} protocol evaluates explicit axes: run "
                "'fewtrans-board sweep --grid FIELD=V1,V2,...'"
            )
        check_schema_fits(self.hpe, self.adapter_cls.schema())
        self.recipe: Recipe | None = None
        if self.hpe.centre_rule == "recipe":
            self.centre_record = None
            self.centre, self.recipe = recipe_centre(
                self.adapter_cls, spec.recipe, self.manifest.dataset, spec.config, spec.centre_file
            )
        else:
            if spec.recipe is not None:
                raise FewtransError(
                    f"--recipe runs under the published protocol, not {self.hpe.name!r}"
                )
            self.centre_record = load_centre_file(spec.centre_file) if spec.centre_file else None
            self.centre = resolve_centre(
                spec.adapter, self.adapter_cls, spec.config, self.centre_record, spec.centre_file
            )
        self.grid = self.hpe.grid(self.adapter_cls, self.centre)
        self.root = Path(spec.root) if spec.root else None
        episodes = self.manifest.episodes()
        self.episodes: list[ManifestEpisode] = episodes[: spec.limit] if spec.limit else episodes
        if check_items:
            self._check_items()
        n = len(self.episodes)
        default_shards = max(1, math.ceil(n / EPISODES_PER_SHARD))
        self.shard_count = spec.shards if spec.shards is not None else default_shards
        if not 1 <= self.shard_count <= max(n, 1):
            raise FewtransError(f"--shards must be between 1 and {n}, got {self.shard_count}")
        if spec.threads is not None and spec.threads < 1:
            raise FewtransError(f"--threads must be at least 1, got {spec.threads}")
        self._backbone: Backbone | None = None
        self._images: ImageStore | None = None
        self._features: FeatureCache | None = None
        self._run_id: str | None = None
        self.feature_folder: Path | None = None
        # Per-episode choices adapters report (``predictor.record``), until a shard stores them.
        self.adapter_records: dict[str, dict[str, Any]] = {}
        self.decoded_folder: Path | None = None
        self.device = spec.device  # a worker may be placed on one of several GPUs
        self.isolation = self._isolation()
        self._worker: PluginWorker | None = None
        # The peak-memory measurement of the shard being computed (episode processes'
        # reported peaks are folded into it), if one is.
        self.memory: PeakMemory | None = None
        # The trainable parameter counts of the shard being computed (display only), if any.
        self.trainable: TrainableTally | None = None

    def _isolation(self) -> Isolation:
        """The run's isolation.

        ``auto`` runs fewtrans-board's own model and adapter inline: no plugin code runs,
        and the worker computes the same bits (verification re-runs them in the worker and
        compares exactly). It also runs plugins made in this process (not importable by a
        worker) inline; anything else runs in the worker.
        """
        built_in = self.model.source.builtin and self.adapter_entry.source.builtin
        if self.spec.isolation == "auto" and built_in:
            return Isolation.INLINE
        isolation = resolve_isolation(self.spec.isolation)
        selection = self.registry.plugins
        if self.spec.isolation == "auto" and selection is not None:
            try:
                selection.check_portable()
            except FewtransError:
                return Isolation.INLINE
        return isolation

    # --- the plugin worker --------------------------------------------------------------

    def providers(self) -> list[str]:
        """The distributions that provide the run's model and adapter (its pins)."""
        dists = {"fewtrans-board"}
        for entry in (self.adapter_entry, self.model):
            distribution = entry.provenance().get("distribution")
            if distribution:
                dists.add(str(distribution))
        return sorted(dists)

    def worker_settings(self) -> WorkerSettings:
        """How this run's plugin worker loads and runs the plugins (verification replays it)."""
        selection = self.registry.plugins
        modules = [e.module for e in selection.extras if e.module] if selection else []
        modules += (
            [type(e.plugin).__module__ for e in selection.extras if e.plugin] if selection else []
        )
        places = plugin_places(self.providers(), modules)
        return WorkerSettings(
            model=self.spec.model,
            adapter=self.spec.adapter,
            weights=str(Path(self.spec.weights).resolve()) if self.spec.weights else None,
            device=self.device,
            threads=resolved_threads(self.spec),
            plugins=plugins_request(selection, self.providers()),
            training_free=bool(self.adapter_cls.training_free),
            pins=tuple(self.providers()),
            batching=self.spec.batching,
            max_memory=self.spec.max_memory,
            memoize=self.spec.feature_cache,
            preload=FAMILY_PRELOAD.get(str(self.model.obj.family), ()),
            plugin_paths=tuple(places.sys_path),
            bind_paths=tuple(places.binds),
            isolation=self.isolation,
            limits=Limits.defaults(self.device),
        )

    @property
    def worker(self) -> PluginWorker:
        """The run's plugin worker (started, with the plugins loaded once, on first use).

        Raises:
            FewtransError: the worker cannot start, or the model or adapter cannot load.
        """
        if self._worker is None:
            worker = PluginWorker(self.worker_settings())
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
    def model_facts(self) -> ModelFacts:
        """Input size, weights identity and features of the backbone, wherever it runs."""
        if self.isolation is Isolation.INLINE:
            b = self.backbone
            return ModelFacts(
                b.image_size, b.weights_id, b.feature_dim, dict(b.info), str(b.device)
            )
        info = self.worker.info
        assert info is not None
        return ModelFacts(
            info.image_size, info.weights_id, info.feature_dim, info.model_info, info.device
        )

    def _check_items(self) -> None:
        check = verify_manifest(self.manifest, self.dataset.obj, self.root)
        if not check.ok:
            problems = check.missing + check.wrong_class
            shown = ", ".join(item for _, item in problems[:5])
            raise FewtransError(
                f"the local copy of {self.dataset.name!r} at {self.root} does not match manifest "
                f"{self.spec.manifest}: {len(check.missing)} items missing and "
                f"{len(check.wrong_class)} under another class (e.g. {shown}). Run "
                f"'fewtrans-board manifest verify {self.spec.manifest} --root ...' for the list."
            )

    # --- lazily loaded heavy state ------------------------------------------------------

    @property
    def backbone(self) -> Backbone:
        """The loaded backbone (first access loads it)."""
        if self._backbone is None:
            self._backbone = self.model.obj.load(
                self.spec.weights, self.device, registry=self.registry
            )
        return self._backbone

    @property
    def lockstep(self) -> LockstepSettings:
        """How this run batches configurations (``--batching`` on this worker's device)."""
        return settings_for(self.spec.batching, self.device, parse_memory(self.spec.max_memory))

    @property
    def fit_options(self) -> FitOptions:
        """What ``fit_many`` gets as ``options``: the run's ``--batching`` and ``--max-memory``."""
        return FitOptions(self.lockstep)

    @property
    def preprocessing(self) -> Preprocessing:
        """The manifest protocol's transform at the backbone's input size."""
        name = self.manifest.preprocessing
        return Preprocessing.named(name, self.model_facts.image_size)

    @property
    def images(self) -> ImageStore:
        """The per-process image store (reading the shared decoded file when one is set)."""
        if self._images is None:
            decoded = None
            if self.decoded_folder is not None:
                decoded = DecodedImages(
                    self.decoded_folder,
                    self.manifest.sha256,
                    self.preprocessing.digest(),
                    self.episode_items(self.manifest.episodes()),
                    self.preprocessing.image_size,
                    source=self.image_source(),
                )
            self._images = ImageStore(
                self.dataset.obj,
                self.root,
                self.preprocessing,
                decoded=decoded,
                device=self.backbone.device if self.isolation is Isolation.INLINE else "cpu",
            )
        return self._images

    def image_source(self) -> str:
        """Where this run's images come from: the resolved local copy, or the embedded data."""
        if self.root is None:
            return f"embedded:{self.dataset.name}"
        return str(self.root.resolve())

    @property
    def features(self) -> FeatureCache | None:
        """The feature cache, for frozen-backbone adapters when enabled."""
        if not (self.spec.feature_cache and self.adapter_cls.frozen_backbone):
            return None
        if self._features is None:
            universe = sorted(set(self.episode_items(self.episodes)))
            embedder = (
                self.backbone
                if self.isolation is Isolation.INLINE
                else WorkerEmbedder(self.worker, resolved_threads(self.spec))
            )
            self._features = FeatureCache(
                embedder, self.images, self.feature_folder, universe=universe
            )
        return self._features

    @staticmethod
    def episode_items(episodes: Iterable[ManifestEpisode]) -> list[str]:
        """Item ids shown in ``episodes`` (support, query, novel query), repeats included.

        Args:
            episodes: the episodes.

        Returns:
            The ids in episode order.
        """
        return [item for ep in episodes for item, _ in (*ep.support, *ep.query, *ep.novel_query)]

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
            self.features.ensure(self.episode_items(episodes), progress=progress)

    # --- identity and provenance --------------------------------------------------------

    def identity(self) -> dict[str, Any]:
        """The run identity stored in ``run.json`` and checked on resume."""
        return run_identity(
            self.spec,
            self.manifest.sha256,
            self.model_facts.weights_id,
            [c.to_dict() for c in self.grid],
            self.shard_count,
            None
            if self.recipe is None
            else {"name": self.recipe.name, "version": self.recipe.version},
        )

    def numeric_environment(self) -> dict[str, Any]:
        """Libraries, processor and plugin versions that change this run's numbers."""
        code = {"fewtrans-board": __version__}
        for entry in (self.adapter_entry, self.model):
            provenance = entry.provenance()
            code[str(provenance["distribution"])] = str(provenance["version"])
        return numeric_environment(self.device, code)

    def run_id(self) -> str:
        """Short hash of the identity."""
        if self._run_id is None:
            self._run_id = run_id_of(self.identity())
        return self._run_id

    def provenance(self) -> dict[str, Any]:
        """Everything a reader needs to trust a number (stored in every shard)."""
        from fewtrans_board.runner.provenance import run_provenance

        return run_provenance(self)

    # --- execution ----------------------------------------------------------------------

    def shard_episodes(self, index: int) -> list[ManifestEpisode]:
        """Episodes of shard ``index`` (contiguous blocks)."""
        size = math.ceil(len(self.episodes) / self.shard_count)
        return self.episodes[index * size : (index + 1) * size]

    def inputs(
        self, episode: ManifestEpisode, *, salt: str = "", serve: Serve = "features"
    ) -> EpisodeInputs:
        """Adapter inputs of an episode, in the seeded presentation order.

        Args:
            episode: the manifest episode.
            salt: secret mixed into the query order (verification).
            serve: ``pixels`` to hand pixels even where cached features exist.
        """
        return episode_inputs(
            episode,
            self.dataset.obj,
            self.images,
            self.features if serve == "features" else None,
            self.manifest.sha256,
            serve=serve,
            memoize_features=self.spec.feature_cache,
            salt=salt,
        )

    def seeds(self, episode: ManifestEpisode, configs: list[AdapterConfig]) -> list[int]:
        """The torch seed of each configuration on an episode."""
        return [config_seed(self.manifest.sha256, episode.index, c.digest()) for c in configs]

    @staticmethod
    def episode_text(episode: ManifestEpisode) -> str:
        """Names an episode in errors."""
        return f"episode {episode.index} (stream {episode.stream_index})"

    def where(self, episode: ManifestEpisode) -> str:
        """Names the run's adapter and an episode in errors."""
        return f"adapter {self.spec.adapter!r}, {self.episode_text(episode)}"

    def outcomes(
        self,
        inputs: EpisodeInputs,
        adapter: Adapter | None,
        configs: list[AdapterConfig] | None = None,
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
        configs = self.grid if configs is None else configs
        if self.isolation is Isolation.INLINE:
            assert adapter is not None
            return evaluate_episode(
                adapter,
                self.backbone,
                inputs,
                configs,
                self.manifest.sha256,
                loop=loop,
                options=self.fit_options,
            )
        seeds = self.seeds(inputs.episode, configs)
        reply = self.ask(inputs, configs, seeds, loop=loop)
        if self.memory is not None:
            self.memory.observe(reply.peak_bytes)
        return outcomes_from_reply(inputs, configs, seeds, reply)

    def ask(
        self,
        inputs: EpisodeInputs,
        configs: list[AdapterConfig],
        seeds: list[int],
        **options: Any,
    ) -> FitReply:
        """Send one episode request to the plugin worker (see :func:`~.remote.fit_request`)."""
        request = fit_request(
            inputs,
            [c.to_dict() for c in configs],
            seeds,
            memoize=self.spec.feature_cache,
            **options,
        )
        episode = inputs.episode
        return fit_in_worker(self.worker, request, self.where(episode), self.episode_text(episode))

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
        return episode_rows(
            self.run_id(), self.manifest.dataset, self.manifest.sha256, inputs, outcomes
        )
