"""``RunSpec``: what a user asks an evaluation run to be, before anything is resolved.

Also the run's torch thread count, a centre-search file's reader and the processor's facts
(model name, feature flags) that numeric environments record. The run's identity and
numeric environment are in :mod:`fewtrans_board.runner.provenance`.
"""

from __future__ import annotations

import json
import platform
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from fewtrans_board.core.errors import FewtransError


@dataclass(frozen=True)
class RunSpec:
    """Inputs of ``fewtrans-board evaluate``.

    Attributes:
        model: model name (``NAME`` or ``FAMILY:ARGUMENT``).
        adapter: adapter name.
        manifest: path of the frozen manifest.
        hpe: HPE protocol name.
        weights: local checkpoint for the model, if any.
        root: local dataset copy (``None`` for embedded datasets).
        config: centre overrides (``key -> value``) applied on top of the centre.
        centre_file: a centre-search result whose centre (and log) the run uses.
        limit: evaluate only the first N episodes.
        shards: number of shards the episodes are split into (``None``: one per 50).
        device: torch device.
        feature_cache: serve frozen features from the per-dataset cache.
        threads: torch intra-op threads per worker, whatever the executor (``None``:
            :data:`DEFAULT_THREADS`). CPU reductions depend on it, so it is part of the
            run identity: shards computed with different values never mix.
        batching: ``auto`` (lockstep training of the configurations of an episode on
            CUDA, frozen heads only on CPU), ``on`` or ``off``; results equal the
            per-configuration loop up to rounding either way.
        max_memory: memory budget of the configurations trained together (``40GiB``,
            ``60%`` of free memory; ``None``: 80% of free memory).
        image_cache: folder of the shared decoded-image files (``None``: ``OUT/decoded``).
        feature_cache_dir: folder of frozen-feature entries shared across runs (``None``:
            ``OUT/features``). An entry is keyed by the weights id, the transform (the
            resolution), the dataset, device, threads and the run's item universe (the
            copy's items for a full run), so runs of one dataset copy and backbone (other
            adapters, protocols and manifests) embed once.
        isolation: where plugin code runs: ``auto`` (a sandboxed worker where one can be
            made, else a plain worker process), ``sandbox``, ``process`` or ``inline`` (this
            process; for analyses and debugging). Not part of the identity: every mode
            computes the same numbers.
        recipe: the adapter's published recipe a ``published`` run follows (``None``: its
            only one).
        sweep: the axes of a ``sweep`` run, ``{field: values}`` in grid order (``None``
            for every other protocol). The grid they make is part of the identity.
    """

    model: str
    adapter: str
    manifest: str
    hpe: str = "fewtrans-paper"
    weights: str | None = None
    root: str | None = None
    config: dict[str, Any] = field(default_factory=dict)
    centre_file: str | None = None
    limit: int | None = None
    shards: int | None = None
    device: str = "cpu"
    feature_cache: bool = True
    threads: int | None = None
    batching: str = "auto"
    max_memory: str | None = None
    image_cache: str | None = None
    feature_cache_dir: str | None = None
    isolation: str = "auto"
    recipe: str | None = None
    sweep: dict[str, list[Any]] | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form (for worker processes)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunSpec:
        """Inverse of :meth:`to_dict`."""
        return cls(**data)


def load_centre_file(path: str | Path) -> dict[str, Any]:
    """Read a centre-search result (``hpe search`` output)."""
    try:
        data: dict[str, Any] = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise FewtransError(f"cannot read centre file {path}: {exc}") from exc
    for key in ("adapter", "centre", "log"):
        if key not in data:
            raise FewtransError(f"centre file {path} lacks {key!r}; is it an 'hpe search' output?")
    return data


DEFAULT_THREADS = 1
"""Torch threads per worker when ``--threads`` is not given: the same for every executor
and every machine, so an inline run and a process pool produce the same bits (and a
resume may switch executors), and single-threaded kernels do not depend on core count."""


def resolved_threads(spec: RunSpec) -> int:
    """Torch threads each worker of ``spec`` uses."""
    return spec.threads if spec.threads is not None else DEFAULT_THREADS


def _cpuinfo(key: str) -> str | None:
    """The value of the first ``/proc/cpuinfo`` line starting with ``key`` (Linux)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            return next((line.partition(":")[2] for line in handle if line.startswith(key)), None)
    except OSError:
        return None


def cpu_model() -> str:
    """The processor's model name (``/proc/cpuinfo`` on Linux)."""
    name = _cpuinfo("model name")
    return name.strip() if name is not None else platform.processor() or platform.machine()


def cpu_flags_digest() -> str:
    """A short hash of the processor's feature flags (``/proc/cpuinfo``).

    The flags select the vector kernels BLAS and oneDNN run: two CPUs of one model name may
    still differ here.
    """
    import hashlib

    flags = _cpuinfo("flags")
    if flags is None:
        return platform.machine()
    return hashlib.sha256(" ".join(sorted(flags.split())).encode()).hexdigest()[:16]
