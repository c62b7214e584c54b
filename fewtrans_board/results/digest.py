"""What a build keeps of a loaded run: its per-episode arrays and provenance, not its rows.

A :class:`RunDigest` holds exactly what the index and the site read of a run once it has
been loaded and checked (per-episode accuracy of every aggregation, the configurations'
mean accuracies, the seconds each episode took, the provenance), a few kilobytes instead of
the run's rows, so a build over thousands of runs holds all of them at once and a build
cache can store them (:func:`digest_bytes`, :func:`digest_of_bytes`).
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from fewtrans_board.results.load import RunResults
from fewtrans_board.results.provenance import RunProvenance
from fewtrans_board.results.schema import CONFIG_KIND


@dataclass
class RunDigest:
    """A loaded run reduced to what builds read; treat its arrays as read-only.

    Attributes:
        path: the run folder.
        meta: the run's provenance record (its first shard's metadata).
        shards_present: shard indices found.
        shards_total: shard count of the run.
        episodes: the base episodes' indices, sorted.
        config_names: the configurations (canonical JSON), by index.
        config_means: mean base accuracy of each configuration over the episodes.
        base: per-episode base accuracy of every aggregation
            (:meth:`RunResults.aggregations`), aligned with ``episodes``.
        novel: the same on novel classes (empty unless the run has novel rows).
        episode_seconds: per base episode, the recorded seconds summed over configurations.
        configurations: how many configurations ran on base episodes.
    """

    path: Path
    meta: dict[str, Any]
    shards_present: list[int]
    shards_total: int
    episodes: np.ndarray
    config_names: list[str]
    config_means: np.ndarray
    base: dict[str, np.ndarray]
    novel: dict[str, np.ndarray] = field(default_factory=dict)
    episode_seconds: np.ndarray = field(default_factory=lambda: np.zeros(0))
    configurations: int = 0

    @classmethod
    def of(cls, run: RunResults) -> RunDigest:
        """The digest of a loaded run (its arrays computed as :class:`RunResults` does)."""
        episodes, matrix, names = run.config_matrix()
        means = np.nanmean(matrix, axis=0) if matrix.size else np.zeros(matrix.shape[1])
        seconds, configurations = _episode_seconds(run)
        return cls(
            path=run.path,
            meta=run.meta,
            shards_present=list(run.shards_present),
            shards_total=run.shards_total,
            episodes=episodes,
            config_names=names,
            config_means=means,
            base=run.aggregations(),
            novel=run.aggregations("novel") if run.has_novel else {},
            episode_seconds=seconds,
            configurations=configurations,
        )

    @cached_property
    def provenance(self) -> RunProvenance:
        """The typed provenance of the run, read once."""
        return RunProvenance.of(self.meta)

    @property
    def dataset(self) -> str:
        """Dataset of the run (its own record)."""
        return self.provenance.manifest.dataset

    @property
    def complete(self) -> bool:
        """Whether every shard is present."""
        return len(self.shards_present) == self.shards_total

    @property
    def has_novel(self) -> bool:
        """Whether the run has base-to-novel rows."""
        return bool(self.novel)

    def aggregations(self, split: str = "base") -> dict[str, np.ndarray]:
        """Per-episode accuracy of every aggregation, as :meth:`RunResults.aggregations`."""
        return dict(self.novel if split == "novel" else self.base)


def _episode_seconds(run: RunResults) -> tuple[np.ndarray, int]:
    """Per base episode, the seconds summed over its configurations; the grid's size."""
    mask = (run.column("kind") == CONFIG_KIND) & (run.column("split") == "base")
    episodes = run.column("episode")[mask]
    seconds = run.column("seconds")[mask].astype(float)
    configurations = len(np.unique(run.column("config_index")[mask]))
    unique, inverse = np.unique(episodes, return_inverse=True)
    sums = np.zeros(len(unique))
    np.add.at(sums, inverse, seconds)
    return sums, max(configurations, 1)


def _arrays(prefix: str, values: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {f"{prefix}/{name}": np.asarray(array) for name, array in values.items()}


def digest_bytes(digests: list[RunDigest], extra: list[dict[str, Any]]) -> bytes:
    """Runs' digests (with a JSON-able record each, e.g. its summary) as one ``.npz`` payload.

    Paths are not stored: :func:`digest_of_bytes` is given the runs' current folders.
    """
    arrays: dict[str, np.ndarray] = {}
    records = []
    for i, (digest, record) in enumerate(zip(digests, extra, strict=True)):
        arrays.update(
            {
                f"{i}/episodes": digest.episodes,
                f"{i}/config_means": digest.config_means,
                f"{i}/episode_seconds": digest.episode_seconds,
                **_arrays(f"{i}/base", digest.base),
                **_arrays(f"{i}/novel", digest.novel),
            }
        )
        records.append(
            {
                "meta": digest.meta,
                "shards_present": digest.shards_present,
                "shards_total": digest.shards_total,
                "config_names": digest.config_names,
                "base": list(digest.base),
                "novel": list(digest.novel),
                "configurations": digest.configurations,
                "extra": record,
            }
        )
    text = json.dumps(records, sort_keys=False, allow_nan=True).encode("utf-8")
    arrays["records"] = np.frombuffer(text, dtype=np.uint8)
    buffer = io.BytesIO()
    save: Any = np.savez  # its stubs type keyword arrays as its own options
    save(buffer, **arrays)
    return buffer.getvalue()


def digest_of_bytes(
    payload: bytes, paths: list[Path]
) -> tuple[list[RunDigest], list[dict[str, Any]]]:
    """Read back :func:`digest_bytes`: the digests (at ``paths``) and their records.

    Raises:
        ValueError: the payload is not such a file, or holds another number of runs.
    """
    with np.load(io.BytesIO(payload), allow_pickle=False) as archive:
        arrays = {name: archive[name] for name in archive.files}
    records = json.loads(arrays.pop("records").tobytes().decode("utf-8"))
    if not isinstance(records, list) or len(records) != len(paths):
        raise ValueError(f"the payload holds {len(records)} runs, not {len(paths)}")
    digests = []
    for i, (record, path) in enumerate(zip(records, paths, strict=True)):
        digests.append(
            RunDigest(
                path=path,
                meta=record["meta"],
                shards_present=list(record["shards_present"]),
                shards_total=int(record["shards_total"]),
                episodes=arrays[f"{i}/episodes"],
                config_names=list(record["config_names"]),
                config_means=arrays[f"{i}/config_means"],
                base={name: arrays[f"{i}/base/{name}"] for name in record["base"]},
                novel={name: arrays[f"{i}/novel/{name}"] for name in record["novel"]},
                episode_seconds=arrays[f"{i}/episode_seconds"],
                configurations=int(record["configurations"]),
            )
        )
    return digests, [r["extra"] for r in records]
