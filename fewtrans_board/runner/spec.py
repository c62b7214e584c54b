"""``RunSpec``: everything that defines an evaluation run, and its identity."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from fewtrans_board.canonical import canonical_json, sha256_text
from fewtrans_board.errors import FewtransError


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
        threads: torch intra-op threads per worker (``None``: torch's default inline,
            cores / workers in pools). CPU reductions depend on it, so runs meant to be
            bit-identical must use the same value.
        batching: ``auto`` (lockstep training of the configurations of an episode on
            CUDA, frozen heads only on CPU), ``on`` or ``off``; results equal the
            per-configuration loop up to rounding either way.
        max_memory: memory budget of the configurations trained together (``40GiB``,
            ``60%`` of free memory; ``None``: 80% of free memory).
        image_cache: folder of the shared decoded-image files (``None``: ``OUT/decoded``).
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


def run_identity(
    spec: RunSpec, manifest_sha256: str, weights_id: str, grid: list[dict[str, Any]], shards: int
) -> dict[str, Any]:
    """The fields that define a run's results (paths and executor choices excluded)."""
    return {
        "model": spec.model,
        "weights_id": weights_id,
        "adapter": spec.adapter,
        "hpe": spec.hpe,
        "grid": grid,
        "manifest_sha256": manifest_sha256,
        "limit": spec.limit,
        "shards": shards,
        "device": spec.device,
        "feature_cache": spec.feature_cache,
    }


def run_id_of(identity: dict[str, Any]) -> str:
    """Short hash naming a run."""
    return sha256_text(canonical_json(identity))[:16]
