"""``RunPlan``: everything a run decides before anything runs, resolved once from a ``RunSpec``.

The plan is frozen and loads nothing heavy; a :class:`~fewtrans_board.runner.session.RunSession`
computes from it (CONTRIBUTING.md, "The runner: spec, plan, session").
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from fewtrans_board.api.adapter import Adapter, AdapterConfig
from fewtrans_board.api.dataset_spec import DatasetSpec
from fewtrans_board.api.model_spec import ModelSpec
from fewtrans_board.blocks.lockstep import LockstepSettings, parse_memory, settings_for
from fewtrans_board.core.errors import FewtransError
from fewtrans_board.core.sandbox import Isolation
from fewtrans_board.episodes.manifest import Manifest, ManifestEpisode
from fewtrans_board.episodes.verify import verify_manifest
from fewtrans_board.hpe.protocols import HpeProtocol, check_schema_fits, get_hpe_protocol
from fewtrans_board.registry.lookup import Registered, Registry
from fewtrans_board.runner.centres import Centre, decide_centre
from fewtrans_board.runner.evaluate import config_seed
from fewtrans_board.runner.spec import RunSpec
from fewtrans_board.runner.worker.remote import resolve_isolation

EPISODES_PER_SHARD = 50


@dataclass(frozen=True)
class RunPlan:
    """A run's resolved inputs: what is decided before anything runs.

    Attributes:
        spec: the run inputs it was planned from.
        registry: the registry the names were resolved with (a worker loads the same
            plugins; composite models load their parts through it).
        manifest: the frozen manifest.
        episodes: its episodes, the first ``--limit`` of them.
        dataset: the manifest's dataset.
        model: the model.
        adapter_entry: the adapter (its class is :attr:`adapter_cls`).
        hpe: the HPE protocol (with a sweep's axes).
        centre: the configuration the grid is built around, how it was chosen.
        grid: the configurations every episode evaluates, in grid order.
        shard_count: how many shards the episodes are split into.
        isolation: where plugin code runs.
    """

    spec: RunSpec
    registry: Registry = field(repr=False, compare=False)
    manifest: Manifest
    episodes: tuple[ManifestEpisode, ...]
    dataset: Registered[DatasetSpec]
    model: Registered[ModelSpec]
    adapter_entry: Registered[type[Adapter]]
    hpe: HpeProtocol
    centre: Centre
    grid: tuple[AdapterConfig, ...]
    shard_count: int
    isolation: Isolation

    @property
    def adapter_cls(self) -> type[Adapter]:
        """The adapter class."""
        return self.adapter_entry.obj

    @property
    def root(self) -> Path | None:
        """The local dataset copy (``None``: an embedded dataset)."""
        return Path(self.spec.root) if self.spec.root else None

    def shard_episodes(self, index: int) -> list[ManifestEpisode]:
        """Episodes of shard ``index`` (contiguous blocks)."""
        size = math.ceil(len(self.episodes) / self.shard_count)
        return list(self.episodes[index * size : (index + 1) * size])

    def seeds(self, episode: ManifestEpisode, configs: Sequence[AdapterConfig]) -> list[int]:
        """The torch seed of each configuration on an episode."""
        return [config_seed(self.manifest.sha256, episode.index, c.digest()) for c in configs]

    def where(self, episode: ManifestEpisode) -> str:
        """Names the run's adapter and an episode in errors."""
        return f"adapter {self.spec.adapter!r}, {episode_text(episode)}"

    def providers(self) -> list[str]:
        """The distributions that provide the run's model and adapter (its pins)."""
        found = (e.provenance().get("distribution") for e in (self.adapter_entry, self.model))
        return sorted({"fewtrans-board", *(str(d) for d in found if d)})

    def image_source(self) -> str:
        """Where this run's images come from: the resolved local copy, or the embedded data."""
        return f"embedded:{self.dataset.name}" if self.root is None else str(self.root.resolve())


def plan_run(spec: RunSpec, registry: Registry, *, check_items: bool = True) -> RunPlan:
    """Resolve a run: names, protocol, centre, grid, dataset copy, shards, isolation.

    Args:
        spec: the run inputs.
        registry: the plugin registry to resolve names with.
        check_items: verify that the local dataset copy holds every manifest item.

    Raises:
        FewtransError: an unknown name, a model without the text tower the adapter
            needs, a grid the protocol cannot build for the adapter, a centre or recipe
            the protocol refuses, a dataset copy that does not match the manifest, or
            bad ``--shards`` / ``--threads`` values.
    """
    manifest = Manifest.load(spec.manifest)
    dataset = registry.datasets.get(manifest.dataset)
    model = registry.model(spec.model)
    adapter_entry = _adapter(spec, registry, model)
    hpe = _protocol(spec, adapter_entry.obj)
    centre = decide_centre(spec, adapter_entry.obj, hpe, manifest.dataset)
    grid = tuple(hpe.grid(adapter_entry.obj, centre.config))
    episodes = manifest.episodes()[: spec.limit or None]
    if check_items:
        check_dataset_copy(manifest, dataset, spec)
    return RunPlan(
        spec=spec,
        registry=registry,
        manifest=manifest,
        episodes=tuple(episodes),
        dataset=dataset,
        model=model,
        adapter_entry=adapter_entry,
        hpe=hpe,
        centre=centre,
        grid=grid,
        shard_count=_shard_count(spec, len(episodes)),
        isolation=_isolation(spec, registry, model, adapter_entry),
    )


def _adapter(
    spec: RunSpec, registry: Registry, model: Registered[ModelSpec]
) -> Registered[type[Adapter]]:
    """The adapter, refused when it needs a text tower the model lacks."""
    entry = registry.adapters.get(spec.adapter)
    if entry.obj.needs_text and not model.obj.has_text:
        raise FewtransError(
            f"adapter {spec.adapter!r} needs a CLIP-style model with a text tower; "
            f"{spec.model!r} is image-only"
        )
    return entry


def _protocol(spec: RunSpec, adapter_cls: type[Adapter]) -> HpeProtocol:
    """The HPE protocol (a sweep's axes given), refused where it cannot grid the adapter."""
    hpe = get_hpe_protocol(spec.hpe)
    if spec.sweep is not None:
        hpe = hpe.with_axes(spec.sweep)
    elif hpe.epoch_rule == "explicit":
        raise FewtransError(
            f"the {hpe.name} protocol evaluates explicit axes: run "
            "'fewtrans-board sweep --grid FIELD=V1,V2,...'"
        )
    check_schema_fits(hpe, adapter_cls.schema())
    return hpe


def check_dataset_copy(manifest: Manifest, dataset: Registered[DatasetSpec], spec: RunSpec) -> None:
    """Refuse a local dataset copy that lacks manifest items or files them under other classes.

    Raises:
        FewtransError: naming the counts, a few items, and the command that lists them all.
    """
    root = Path(spec.root) if spec.root else None
    check = verify_manifest(manifest, dataset.obj, root)
    if not check.ok:
        problems = check.missing + check.wrong_class
        shown = ", ".join(item for _, item in problems[:5])
        raise FewtransError(
            f"the local copy of {dataset.name!r} at {root} does not match manifest "
            f"{spec.manifest}: {len(check.missing)} items missing and "
            f"{len(check.wrong_class)} under another class (e.g. {shown}). Run "
            f"'fewtrans-board manifest verify {spec.manifest} --root ...' for the list."
        )


def _shard_count(spec: RunSpec, episodes: int) -> int:
    """``--shards``, or one shard per :data:`EPISODES_PER_SHARD` episodes; ``--threads`` checked."""
    default = max(1, math.ceil(episodes / EPISODES_PER_SHARD))
    count = spec.shards if spec.shards is not None else default
    if not 1 <= count <= max(episodes, 1):
        raise FewtransError(f"--shards must be between 1 and {episodes}, got {count}")
    if spec.threads is not None and spec.threads < 1:
        raise FewtransError(f"--threads must be at least 1, got {spec.threads}")
    return count


def _isolation(
    spec: RunSpec,
    registry: Registry,
    model: Registered[ModelSpec],
    adapter_entry: Registered[type[Adapter]],
) -> Isolation:
    """The run's isolation (``inline`` needs no sandbox, so none is probed for).

    ``auto`` runs built-ins inline (the worker would compute the same bits) and plugins made
    in this process (a worker cannot import them); anything else in the worker.
    """
    if spec.isolation == "inline":
        return Isolation.INLINE
    if spec.isolation == "auto" and model.source.builtin and adapter_entry.source.builtin:
        return Isolation.INLINE
    isolation = resolve_isolation(spec.isolation)
    selection = registry.plugins
    if spec.isolation == "auto" and selection is not None:
        try:
            selection.check_portable()
        except FewtransError:
            return Isolation.INLINE
    return isolation


def episode_text(episode: ManifestEpisode) -> str:
    """Names an episode in errors."""
    return f"episode {episode.index} (stream {episode.stream_index})"


def episode_items(episodes: Iterable[ManifestEpisode]) -> list[str]:
    """Item ids shown in ``episodes`` (support, query, novel query), repeats included.

    Args:
        episodes: the episodes.

    Returns:
        The ids in episode order.
    """
    return [item for ep in episodes for item, _ in (*ep.support, *ep.query, *ep.novel_query)]


def lockstep_settings(spec: RunSpec, device: str) -> LockstepSettings:
    """How a run batches configurations (``--batching`` and ``--max-memory`` on ``device``)."""
    return settings_for(spec.batching, device, parse_memory(spec.max_memory))
