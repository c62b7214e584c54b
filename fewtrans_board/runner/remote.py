"""The caller's side of a plugin worker: settings, episode requests, replies as outcomes.

``evaluate``, ``preflight``, ``hpe search`` and verification build their workers and their
requests here, so the same run produces the same ``hello`` and the same episode requests
wherever it is computed: the worker cannot tell a verification from an evaluation, and an
honest run is re-computed bit for bit on the same machine.
"""

from __future__ import annotations

import base64
import importlib.metadata
import importlib.util
import pickle
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fewtrans_board.core.errors import FewtransError
from fewtrans_board.core.sandbox import Isolation, sandbox_problem
from fewtrans_board.runner.episodes import EpisodeInputs, in_manifest_order
from fewtrans_board.runner.evaluate import ConfigOutcome, EvaluationError
from fewtrans_board.runner.isolated import PluginWorker
from fewtrans_board.runner.worker_messages import FitReply, FitRequest, WorkerError

if TYPE_CHECKING:
    import torch

    from fewtrans_board.api.adapter import AdapterConfig
    from fewtrans_board.plugins.loading import PluginSelection

FAMILY_PRELOAD = {"timm": ("timm",), "open_clip": ("open_clip",)}
"""Libraries a worker imports before forking, by model family (saves their import per episode)."""


def resolve_isolation(requested: str, *, for_verification: bool = False) -> Isolation:
    """The isolation a run gets: ``auto`` is a sandbox where one can be made, else a process.

    Args:
        requested: ``auto``, ``sandbox``, ``process`` or ``inline``.
        for_verification: verification never runs inline, and ``auto`` means ``sandbox``.

    Raises:
        FewtransError: an unknown name, ``inline`` for verification, or ``sandbox`` where
            no sandbox can be made (naming what to install).
    """
    try:
        isolation = None if requested == "auto" else Isolation(requested)
    except ValueError as exc:
        raise FewtransError(
            f"unknown isolation {requested!r}; use auto, sandbox, process or inline"
        ) from exc
    if isolation is Isolation.INLINE and for_verification:
        raise FewtransError("verification never runs plugin code in the judging process")
    problem = sandbox_problem()
    if isolation is None:
        sandbox = problem is None or for_verification
        isolation = Isolation.SANDBOX if sandbox else Isolation.PROCESS
    if isolation is Isolation.SANDBOX and problem is not None:
        hint = (
            "; pass --unsandboxed to verify without one (recorded as unsafe)"
            if for_verification
            else ""
        )
        raise FewtransError(f"no sandbox for the plugin worker: {problem}{hint}")
    return isolation


@dataclass
class PluginPlaces:
    """Where a worker finds plugin code.

    Attributes:
        binds: paths the sandbox shows read-only (package folders, module files and
            ``.dist-info`` folders; never the folders around them).
        sys_path: folders appended to the worker's ``sys.path`` (they hold the binds).
    """

    binds: list[str] = field(default_factory=list)
    sys_path: list[str] = field(default_factory=list)

    def add(self, bind: str, parent: str) -> None:
        """Show ``bind`` and import from ``parent``."""
        if bind not in self.binds:
            self.binds.append(bind)
        if parent not in self.sys_path:
            self.sys_path.append(parent)


def _add_module(places: PluginPlaces, module: str) -> None:
    """Add the folder (package) or file (module) of a top-level module, never importing it."""
    top = module.split(".")[0]
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return
    if spec is None:
        return
    if spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            places.add(location, str(Path(location).parent))
    elif spec.origin and spec.origin not in ("built-in", "frozen"):
        places.add(spec.origin, str(Path(spec.origin).parent))


def plugin_places(distributions: Iterable[str], modules: Iterable[str] = ()) -> PluginPlaces:
    """Where the plugin code of ``distributions`` (and of ``modules``) lives.

    Read from package metadata and import specs of this process, never by importing the
    plugins. Each distribution contributes its ``.dist-info`` folder and the location of every
    module its ``fewtrans_board`` entry points name (an editable install keeps its
    sources elsewhere). fewtrans-board itself is always visible to a worker.
    """
    places = PluginPlaces()
    wanted = {d.lower().replace("_", "-") for d in distributions}
    for dist in importlib.metadata.distributions():
        name = (dist.metadata["Name"] or "").lower().replace("_", "-")
        if name not in wanted or name == "fewtrans-board":
            continue
        info = getattr(dist, "_path", None)
        if info is not None and Path(info).is_dir():
            places.add(str(info), str(Path(info).parent))
        for entry in dist.entry_points:
            if entry.group == "fewtrans_board":
                _add_module(places, entry.module)
    for module in modules:
        _add_module(places, module)
    return places


def plugins_request(
    selection: PluginSelection | None, distributions: Sequence[str]
) -> dict[str, Any]:
    """How the worker loads plugins: the caller's extras (evaluate only), or ``distributions``."""
    if selection is not None and selection.extras:
        selection.check_portable()
        return {"selection": base64.b64encode(pickle.dumps(selection)).decode()}
    return {"allow": sorted(distributions)}


@dataclass(frozen=True)
class ModelFacts:
    """What the caller needs of a backbone it never loads: input size, identity, features.

    Attributes:
        image_size: the input size (the caller preprocesses images for it).
        weights_id: the weights' identity.
        feature_dim: the feature dimension.
        info: the backbone's ``info`` (provenance).
        device: where the backbone computes.
    """

    image_size: int
    weights_id: str
    feature_dim: int
    info: dict[str, Any] = field(default_factory=dict)
    device: str = "cpu"


class WorkerEmbedder:
    """A feature-cache embedder whose features a plugin worker computes.

    Args:
        worker: the started worker.
        threads: torch threads of its episode processes (part of the cache key).
    """

    def __init__(self, worker: PluginWorker, threads: int) -> None:
        assert worker.info is not None
        self.worker = worker
        self.weights_id = worker.info.weights_id
        self.feature_dim = worker.info.feature_dim
        self.device = worker.info.device
        self.threads = threads

    def embed_batches(
        self, batches: Sequence[torch.Tensor], batch_size: int, progress: Callable[[int], None]
    ) -> list[np.ndarray]:
        """Embed each batch in one episode process of the worker."""
        if not batches:
            return []
        return self.worker.embed([b.cpu().numpy() for b in batches], batch_size, progress)


def _served(images: Any) -> tuple[str, np.ndarray]:
    kind, tensor = images.served()
    return kind, tensor.detach().cpu().numpy()


def fit_request(
    inputs: EpisodeInputs,
    configs: Sequence[dict[str, Any]],
    seeds: Sequence[int],
    *,
    query_subsets: Sequence[np.ndarray] | None = None,
    loop: bool = False,
    memoize: bool = True,
    query_override: np.ndarray | None = None,
) -> FitRequest:
    """The worker's view of an episode: tensors in presented order, no query labels.

    Args:
        inputs: the presented episode.
        configs: configuration values.
        seeds: one torch seed per configuration.
        query_subsets: manifest query indices of subsets to ask *instead of* the whole
            query set (each predicted on its own); ``None`` asks the whole set.
        loop: fit with ``fit`` per configuration, never ``fit_many``.
        memoize: let image sets keep features computed from pixels.
        query_override: query tensors to send in presented order instead of the episode's
            own (the perturbation probe's altered images).
    """
    kind, support = _served(inputs.support.images)
    query_kind, query = _served(inputs.query)
    if query_override is not None:
        query = query_override
    if query_kind != kind:
        raise FewtransError("support and query were served differently (pixels vs features)")
    if query_subsets is None:
        sets = [query]
    else:
        position = np.argsort(inputs.query_order)  # manifest query -> presented position
        sets = [query[position[np.asarray(s)]] for s in query_subsets]
    novel = None
    if inputs.novel_query is not None and query_subsets is None:
        _, novel = _served(inputs.novel_query)
    return FitRequest(
        support=support,
        labels=inputs.support.labels.numpy(),
        class_names=list(inputs.class_names),
        configs=[dict(c) for c in configs],
        seeds=list(seeds),
        query_sets=sets,
        novel=novel,
        novel_class_names=inputs.novel_class_names if novel is not None else None,
        loop=loop,
        kind=kind,
        memoize=memoize,
    )


def outcomes_from_reply(
    inputs: EpisodeInputs,
    configs: Sequence[AdapterConfig],
    seeds: Sequence[int],
    reply: FitReply,
) -> list[ConfigOutcome]:
    """A whole-query-set reply as the runner's outcomes, logits back in manifest order."""
    outcomes = []
    for i, config in enumerate(configs):
        novel = None
        if reply.novel is not None and inputs.novel_order is not None:
            novel = in_manifest_order(reply.novel[i], inputs.novel_order)
        outcomes.append(
            ConfigOutcome(
                i,
                config,
                seeds[i],
                in_manifest_order(reply.query[i][0], inputs.query_order),
                reply.seconds[i],
                novel,
                [],
                reply.records[i],
                reply.trainable[i] if i < len(reply.trainable) else None,
            )
        )
    return outcomes


def fit_in_worker(worker: PluginWorker, request: FitRequest, where: str, episode: str) -> FitReply:
    """Ask the worker, turning its failure into an error that names the episode.

    Args:
        worker: the started worker.
        request: the episode request.
        where: names the adapter and the episode (``adapter 'x', episode 3 (stream 603)``).
        episode: the episode part of ``where``, put where the worker's messages mark it.

    Raises:
        EvaluationError: the adapter failed or answered something malformed.
    """
    from fewtrans_board.runner.worker import EPISODE_MARK

    try:
        return worker.fit(request)
    except WorkerError as exc:
        if exc.plugin_message is not None:
            raise EvaluationError(exc.plugin_message.replace(EPISODE_MARK, episode)) from exc
        raise EvaluationError(f"{where}: {exc}") from exc
