"""The caller's side of a plugin worker: settings, episode requests, replies as outcomes.

``evaluate``, ``preflight``, ``hpe search`` and verification build their workers and their
requests here, so the same run produces the same ``hello`` and the same episode requests
wherever it is computed: the worker cannot tell a verification from an evaluation, and an
honest run is re-computed bit for bit on the same machine.
"""

from __future__ import annotations

import base64
import importlib.machinery
import importlib.metadata
import importlib.util
import os
import pickle
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fewtrans_board.core.errors import FewtransError
from fewtrans_board.core.sandbox import Isolation, sandbox_problem
from fewtrans_board.registry.files import SKIPPED_DIRS, top_level_names
from fewtrans_board.runner.evaluate import ConfigOutcome, EvaluationError
from fewtrans_board.runner.presentation import EpisodeInputs, in_manifest_order
from fewtrans_board.runner.worker.isolated import PluginWorker
from fewtrans_board.runner.worker.messages import FitReply, FitRequest, WorkerError

if TYPE_CHECKING:
    import torch

    from fewtrans_board.api.adapter import AdapterConfig
    from fewtrans_board.registry.manager import PluginSelection

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
        binds: paths the sandbox shows read-only (the top-level entries a distribution
            installed: package folders, module and data files, ``.dist-info`` folders;
            never the folders around them).
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

    def extend(self, other: PluginPlaces) -> None:
        """Add ``other``'s binds and folders after these."""
        self.binds += [b for b in other.binds if b not in self.binds]
        self.sys_path += [p for p in other.sys_path if p not in self.sys_path]


def _normal_name(name: str) -> str:
    return name.lower().replace("_", "-")


def _listed_paths(dist: importlib.metadata.Distribution) -> list[Path]:
    """Where the files ``dist`` lists (RECORD, else its egg-info lists) are, unresolved."""
    try:
        return [Path(os.path.normpath(file.locate())) for file in dist.files or []]
    except (NotImplementedError, TypeError, ValueError):
        return []


def _add_module(
    places: PluginPlaces,
    module: str,
    search: Sequence[str] | None = None,
    listed: Sequence[Path] = (),
) -> None:
    """Add ``module``'s top-level package folder or module file, never importing it.

    Found in ``search`` (default: as this process imports it); of the ``listed`` files of its
    distribution, those beside a single-file module (its data files) are added with it.
    """
    top = module.split(".")[0]
    try:
        if search is None:
            spec = importlib.util.find_spec(top)
        else:
            spec = importlib.machinery.PathFinder.find_spec(top, list(search))
    except (ImportError, ValueError):
        return
    if spec is None:
        return
    if spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            places.add(location, str(Path(location).parent))
    elif spec.origin and spec.origin not in ("built-in", "frozen"):
        folder = Path(spec.origin).parent
        places.add(spec.origin, str(folder))
        for path in listed:
            if path.parent == folder and path.is_file():
                places.add(str(path), str(folder))


def _record_entries(dist: importlib.metadata.Distribution) -> tuple[Path, list[Path]] | None:
    """The install root of ``dist`` and the top-level entries its RECORD lists below it.

    Left out: entries outside the root (``../../bin`` scripts), links leading out of it (the
    sandbox would show their target), byte-code caches. ``None`` without a RECORD.
    """
    if dist.read_text("RECORD") is None:
        return None
    try:
        root = Path(os.path.normpath(str(dist.locate_file(""))))
    except (NotImplementedError, TypeError, ValueError):
        return None
    real_root = Path(os.path.realpath(root))
    entries: list[Path] = []
    for path in _listed_paths(dist):
        try:
            parts = path.relative_to(root).parts
        except ValueError:
            continue
        if not parts or parts[0] in SKIPPED_DIRS:
            continue
        top = root / parts[0]
        if top in entries or not os.path.lexists(top):
            continue
        real = Path(os.path.realpath(top))
        if real == real_root or not real.is_relative_to(real_root):
            continue
        entries.append(top)
    return root, entries


def _is_code(entry: Path) -> bool:
    """Whether a top-level entry is installed code, not metadata or an editable finder."""
    name = entry.name
    return not (
        name.endswith((".dist-info", ".egg-info", ".pth")) or name.startswith("__editable__")
    )


def _add_distribution(
    places: PluginPlaces, dist: importlib.metadata.Distribution, search: Sequence[str] | None
) -> None:
    """What a worker sees of ``dist``: one rule for evaluate, preflight, search and verify.

    Every top-level entry its RECORD lists below its install root, never the root itself. An
    editable install (a RECORD of a ``.pth`` or ``__editable__`` finder only) or one without
    RECORD falls back to its import packages (``top_level.txt``, entry points' modules) where
    they import from, with the files it lists beside a single-file module.
    """
    record = _record_entries(dist)
    if record is not None:
        root, entries = record
        for entry in entries:
            places.add(str(entry), str(root))
        if any(_is_code(e) for e in entries):
            return
    info = getattr(dist, "_path", None)
    if info is not None and Path(info).is_dir():
        places.add(str(info), str(Path(info).parent))
    listed = _listed_paths(dist)
    for name in top_level_names(dist):
        _add_module(places, name, search, listed)


def _pinned(
    found: Iterable[importlib.metadata.Distribution], distributions: Iterable[str]
) -> list[importlib.metadata.Distribution]:
    """Those of ``found`` that ``distributions`` name (never fewtrans-board itself)."""
    wanted = {_normal_name(d) for d in distributions} - {"fewtrans-board"}
    return [dist for dist in found if _normal_name(dist.metadata["Name"] or "") in wanted]


def plugin_places(distributions: Iterable[str], modules: Iterable[str] = ()) -> PluginPlaces:
    """Where the plugin code of ``distributions`` (and of ``modules``) lives, never importing it.

    Each distribution contributes what :func:`_add_distribution` shows of it (as in
    :func:`plugin_dir_places`), each module its top-level package. fewtrans-board itself is
    always visible to a worker.
    """
    places = PluginPlaces()
    for dist in _pinned(importlib.metadata.distributions(), distributions):
        _add_distribution(places, dist, None)
    for module in modules:
        _add_module(places, module)
    return places


def plugin_dir_places(folders: Iterable[Path], distributions: Iterable[str]) -> PluginPlaces:
    """What a worker sees of ``--plugin-dir`` folders: the pinned distributions in them.

    Each folder goes on the worker's ``sys.path``; only the ``distributions`` installed there
    are shown, by :func:`plugin_places`' rule (a ``pip install --target`` folder and a
    ``site-packages`` with the same wheel show the same files). A pin found nowhere is refused
    later, when the worker reports what it found.
    """
    places = PluginPlaces()
    for folder in folders:
        where = str(folder)
        if where not in places.sys_path:
            places.sys_path.append(where)
        for dist in _pinned(importlib.metadata.distributions(path=[where]), distributions):
            _add_distribution(places, dist, [where])
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
    inputs: EpisodeInputs, configs: Sequence[AdapterConfig], seeds: Sequence[int], reply: FitReply
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
    from fewtrans_board.runner.worker.episode_process import EPISODE_MARK

    try:
        return worker.fit(request)
    except WorkerError as exc:
        if exc.plugin_message is not None:
            raise EvaluationError(exc.plugin_message.replace(EPISODE_MARK, episode)) from exc
        raise EvaluationError(f"{where}: {exc}") from exc
