"""How a verification runs, and the plugin worker it replays from a run's provenance."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from fewtrans_board.core.sandbox import Isolation, Limits
from fewtrans_board.core.threads import replay_threads
from fewtrans_board.leaderboard.verification.sampling import DEFAULT_BUDGET_S
from fewtrans_board.results.documents import RunProvenance
from fewtrans_board.runner.worker.messages import WorkerSettings
from fewtrans_board.runner.worker.remote import (
    FAMILY_PRELOAD,
    PluginPlaces,
    plugin_dir_places,
    plugin_places,
    plugins_request,
)

MARGIN_POINTS = 0.5
"""Largest claimed-minus-re-run accuracy (points, one-sided 95%) accepted across environments."""
PROBE_EPISODES = 8
"""Episodes per dataset that also get the inductiveness, fit_many and memorisation probes."""


@dataclass(frozen=True)
class VerificationOptions:
    """How to verify.

    Attributes:
        sample: episodes re-run per dataset (``None``: every episode when the claimed cost
            fits ``budget_s``, else enough to catch a 5% forgery with probability 0.99).
        seed: a seed from an earlier report, to reproduce that verification exactly.
        secret: a maintainers' secret; the seed becomes its HMAC with the bundle digest.
        budget_s: seconds per dataset within which every episode is re-run.
        margin: accuracy points claimed minus re-run may reach across environments.
        roots: local dataset copies by dataset name.
        weights: local checkpoint for the model.
        device: torch device of the worker.
        threads: torch threads of the worker (``None``: the recorded count, capped at the
            cores here).
        python: the worker's interpreter (default: this one).
        plugin_dirs: folders holding the pinned plugins (e.g. ``pip install --target``),
            appended to the worker's ``sys.path``; the files of the pinned distributions
            in them are shown to it read-only.
        unsandboxed: run the worker without an OS sandbox (unsafe; recorded in the report).
        probe_episodes: episodes per dataset that also get the probes.
        progress: called with one line per dataset before its re-runs start (the cost
            estimate, :mod:`~fewtrans_board.leaderboard.verification.cost`); ``None``: quiet.
    """

    sample: int | None = None
    seed: str | None = None
    secret: bytes | None = None
    budget_s: float = DEFAULT_BUDGET_S
    margin: float = MARGIN_POINTS
    roots: dict[str, Path] | None = None
    weights: str | None = None
    device: str = "cpu"
    threads: int | None = None
    python: str | None = None
    plugin_dirs: tuple[Path, ...] = ()
    unsandboxed: bool = False
    probe_episodes: int = PROBE_EPISODES
    progress: Callable[[str], None] | None = field(default=None, compare=False)

    @property
    def isolation(self) -> Isolation:
        """The worker's isolation: a sandbox unless ``unsandboxed``."""
        return Isolation.PROCESS if self.unsandboxed else Isolation.SANDBOX


def replayed_settings(
    record: RunProvenance,
    options: VerificationOptions,
    forbidden: list[Path],
    pinned: list[str] | None = None,
) -> WorkerSettings:
    """The plugin worker ``evaluate`` used for a run, rebuilt from its provenance.

    The worker loads the distributions that provided the model and adapter (as in
    ``evaluate``) and the submission's other pins, and reports the installed version of
    every pinned one. It sees of each pinned distribution what ``evaluate``'s worker sees
    (the files it installed, :func:`~fewtrans_board.runner.worker.remote.plugin_places`), whether
    installed here or in a ``--plugin-dir`` folder, never the rest of that folder.

    Args:
        record: the run's provenance.
        options: the verification options.
        forbidden: what the worker must never see (store, bundle, dataset copies, cwd).
        pinned: the submission's pinned distributions.
    """
    recorded = (record.model.distribution, record.adapter.distribution)  # as evaluate pinned
    pins = sorted({"fewtrans-board", *(str(d) for d in recorded if d), *(pinned or [])})
    own_python = (
        options.python is None or Path(options.python).resolve() == Path(sys.executable).resolve()
    )
    places = plugin_places(pins) if own_python else PluginPlaces()
    places.extend(plugin_dir_places([Path(d).resolve() for d in options.plugin_dirs], pins))
    schema = record.adapter.schema or {}
    identity = record.identity
    return WorkerSettings(
        model=record.model.name,
        adapter=record.adapter.name,
        weights=str(Path(options.weights).resolve()) if options.weights else None,
        device=options.device,
        threads=options.threads or replay_threads(record.environment.torch_threads),
        plugins=plugins_request(None, pins),
        training_free=bool(schema.get("training_free")),
        pins=tuple(pins),
        batching=identity.batching or "auto",
        max_memory=record.batching.get("max_memory_option"),
        memoize=identity.feature_cache,
        preload=FAMILY_PRELOAD.get(str(record.model.family), ()),
        plugin_paths=tuple(places.sys_path),
        bind_paths=tuple(places.binds),
        isolation=options.isolation,
        python=options.python,
        forbidden=tuple(str(p) for p in forbidden),
        limits=Limits.defaults(options.device),
    )
