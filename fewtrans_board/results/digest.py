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
from pathlib import Path
from typing import Any

import numpy as np

from fewtrans_board.results.load import RunResults, RunView
from fewtrans_board.results.row_schema import CONFIG_KIND


@dataclass
class RunDigest(RunView):
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


class _Packer:
    """Arrays of one dtype concatenated into one, each remembered by its ``[start, end)``."""

    def __init__(self, dtype: type) -> None:
        self.dtype = dtype
        self.parts: list[np.ndarray] = []
        self.size = 0

    def add(self, array: np.ndarray) -> list[int]:
        values: np.ndarray = np.asarray(array, dtype=self.dtype).ravel()
        self.parts.append(values)
        self.size += len(values)
        return [self.size - len(values), self.size]

    def array(self) -> np.ndarray:
        return np.concatenate(self.parts) if self.parts else np.zeros(0, dtype=self.dtype)


def digest_bytes(digests: list[RunDigest], extra: list[dict[str, Any]]) -> bytes:
    """Runs' digests (with a JSON-able record each, e.g. its summary) as one ``.npz`` payload.

    Every float array is one slice of a single float64 array (episodes of an int64 one), so
    reading an entry back decodes three arrays, not dozens. Paths are not stored:
    :func:`digest_of_bytes` is given the runs' current folders.
    """
    floats, ints = _Packer(np.float64), _Packer(np.int64)
    records = []
    for digest, record in zip(digests, extra, strict=True):
        records.append(
            {
                "meta": digest.meta,
                "shards_present": digest.shards_present,
                "shards_total": digest.shards_total,
                "config_names": digest.config_names,
                "configurations": digest.configurations,
                "episodes": ints.add(digest.episodes),
                "config_means": floats.add(digest.config_means),
                "episode_seconds": floats.add(digest.episode_seconds),
                "base": {name: floats.add(a) for name, a in digest.base.items()},
                "novel": {name: floats.add(a) for name, a in digest.novel.items()},
                "extra": record,
            }
        )
    text = json.dumps(records, allow_nan=True).encode("utf-8")
    buffer = io.BytesIO()
    save: Any = np.savez  # its stubs type keyword arrays as its own options
    save(
        buffer,
        records=np.frombuffer(text, dtype=np.uint8),
        floats=floats.array(),
        ints=ints.array(),
    )
    return buffer.getvalue()


def digest_of_bytes(
    payload: bytes, paths: list[Path]
) -> tuple[list[RunDigest], list[dict[str, Any]]]:
    """Read back :func:`digest_bytes`: the digests (at ``paths``) and their records.

    Raises:
        ValueError: the payload is not such a file, or holds another number of runs.
    """
    with np.load(io.BytesIO(payload), allow_pickle=False) as archive:
        text, floats, ints = archive["records"], archive["floats"], archive["ints"]
    records = json.loads(text.tobytes().decode("utf-8"))
    if not isinstance(records, list) or len(records) != len(paths):
        raise ValueError(f"the payload holds {len(records)} runs, not {len(paths)}")
    if floats.dtype != np.float64 or ints.dtype != np.int64:
        raise ValueError("the payload's arrays have other types")

    def cut(values: np.ndarray, span: list[int]) -> np.ndarray:
        start, end = span
        if not 0 <= start <= end <= len(values):
            raise ValueError(f"a slice [{start}, {end}) outside the payload's arrays")
        return values[start:end].copy()  # callers own their arrays, as uncached

    digests = []
    for record, path in zip(records, paths, strict=True):
        digests.append(
            RunDigest(
                path=path,
                meta=record["meta"],
                shards_present=list(record["shards_present"]),
                shards_total=int(record["shards_total"]),
                episodes=cut(ints, record["episodes"]),
                config_names=list(record["config_names"]),
                config_means=cut(floats, record["config_means"]),
                base={name: cut(floats, span) for name, span in record["base"].items()},
                novel={name: cut(floats, span) for name, span in record["novel"].items()},
                episode_seconds=cut(floats, record["episode_seconds"]),
                configurations=int(record["configurations"]),
            )
        )
    return digests, [r["extra"] for r in records]
