"""Load a run's shards and derive per-episode accuracies for every aggregation."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fewtrans_board.core.errors import describe
from fewtrans_board.results.documents import RunProvenance
from fewtrans_board.results.row_schema import CONFIG_KIND, ENSEMBLE_KIND, ENSEMBLES
from fewtrans_board.results.shards import ResultsError, read_shard, shard_file_name

if TYPE_CHECKING:
    from fewtrans_board.results.blobs import BlobError, BlobStore


class RunView:
    """What a loaded run and its digest (:class:`~.digest.RunDigest`) both read the same way."""

    meta: dict[str, Any]
    shards_present: list[int]
    shards_total: int

    @property
    def complete(self) -> bool:
        """Whether every shard is present."""
        return len(self.shards_present) == self.shards_total

    @cached_property
    def provenance(self) -> RunProvenance:
        """The typed provenance of the run (its first shard's ``meta``), read once."""
        return RunProvenance.of(self.meta)

    @property
    def dataset(self) -> str:
        """Dataset of the run (its own record)."""
        return self.provenance.manifest.dataset

    @property
    def label(self) -> str:
        """``model / adapter`` for listings."""
        return f"{self.provenance.model.name} / {self.provenance.adapter.name}"


@dataclass
class RunResults(RunView):
    """All shards of one run.

    Treated as immutable once loaded: converted columns and configuration matrices are
    cached on first use.

    Attributes:
        path: the run folder.
        meta: provenance of the run (from its first shard).
        table: the concatenated rows.
        shards_present: shard indices found.
        shards_total: shard count of the run.
        shard_meta: the metadata of every shard, in file order (``meta`` is the first's).
        blobs: the logits blob record of every shard whose logits were not fetched (a
            stored, split shard read without its blob: its ``logits`` column is null), by
            shard file name; empty when every row holds its logits.
    """

    path: Path
    meta: dict[str, Any]
    table: Any
    shards_present: list[int]
    shards_total: int
    shard_meta: list[dict[str, Any]] = field(default_factory=list, repr=False, compare=False)
    blobs: dict[str, dict[str, Any]] = field(default_factory=dict, repr=False, compare=False)
    _columns: dict[str, np.ndarray] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    _matrices: dict[str, tuple[np.ndarray, np.ndarray, list[str]]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    @property
    def logits_present(self) -> bool:
        """Whether every shard's logits are in :attr:`table` (none left in an unfetched blob)."""
        return not self.blobs

    def column(self, name: str) -> np.ndarray:
        """A column as a numpy array, converted once and cached: treat it as read-only.

        Integers come back as int64, floats as float64 and strings as a fixed-width unicode
        array (what ``np.asarray`` of the Python values gives), converted by Arrow.
        """
        column = self._columns.get(name)
        if column is None:
            column = column_array(self.table.column(name))
            column.flags.writeable = False
            self._columns[name] = column
        return column

    @property
    def has_novel(self) -> bool:
        """Whether the run has base-to-novel rows."""
        return bool((self.column("split") == "novel").any())

    def config_matrix(self, split: str = "base") -> tuple[np.ndarray, np.ndarray, list[str]]:
        """Per-episode accuracies of every configuration.

        Args:
            split: ``"base"`` (the episode's classes) or ``"novel"`` (unseen classes).

        Returns:
            ``(episodes [E], accuracy [E, M], configs [M])`` sorted by episode and index.
        """
        if split not in self._matrices:
            self._matrices[split] = self._build_config_matrix(split)
        episodes, matrix, names = self._matrices[split]
        # Copies: the cached arrays must not change under a caller that edits its result.
        return episodes.copy(), matrix.copy(), list(names)

    def _build_config_matrix(self, split: str) -> tuple[np.ndarray, np.ndarray, list[str]]:
        kind = self.column("kind")
        mask = (kind == CONFIG_KIND) & (self.column("split") == split)
        episodes = self.column("episode")[mask]
        index = self.column("config_index")[mask]
        accuracy = self.column("accuracy")[mask]
        configs = self.column("config")[mask]
        unique_episodes = np.unique(episodes)
        n_configs = int(index.max()) + 1 if len(index) else 0
        matrix = np.full((len(unique_episodes), n_configs), np.nan)
        row_of = {e: i for i, e in enumerate(unique_episodes)}
        names = [""] * n_configs
        for e, i, a, c in zip(episodes, index, accuracy, configs, strict=True):
            matrix[row_of[e], i] = a
            names[i] = str(c)
        return unique_episodes, matrix, names

    def ensemble(self, aggregation: str, split: str = "base") -> tuple[np.ndarray, np.ndarray]:
        """``(episodes, accuracy)`` of an ensemble aggregation, sorted by episode."""
        kind = self.column("kind")
        agg = self.column("aggregation")
        mask = (kind == ENSEMBLE_KIND) & (agg == aggregation) & (self.column("split") == split)
        episodes = self.column("episode")[mask]
        order = np.argsort(episodes)
        return episodes[order], self.column("accuracy")[mask][order]

    def aggregations(self, split: str = "base") -> dict[str, np.ndarray]:
        """Per-episode accuracy of every aggregation, aligned on sorted episodes.

        ``hpe`` is the protocol's headline aggregation; ``oracle`` is the configuration
        with the best mean over episodes (an upper bound no user can select without
        labels); ``mean-single`` averages configurations within each episode.
        """
        _, matrix, _ = self.config_matrix(split)
        out: dict[str, np.ndarray] = {}
        for name in ENSEMBLES:
            _, accuracy = self.ensemble(name, split)
            out[name] = accuracy
        out["hpe"] = out[self.provenance.hpe.aggregation]
        best = int(np.nanargmax(np.nanmean(matrix, axis=0)))
        out["oracle"] = matrix[:, best]
        out["mean-single"] = np.nanmean(matrix, axis=1)
        return out


def column_array(column: Any) -> np.ndarray:
    """A scalar Arrow column as numpy, without a Python object per row.

    Strings (plain or dictionary-encoded) are decoded through their distinct values only.
    Columns with nulls, or of other types, take the general path (``to_pylist``), so the
    result always equals ``np.asarray(column.to_pylist())``.

    Args:
        column: a ``pyarrow.ChunkedArray`` (or ``Array``).
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = column.type.value_type if pa.types.is_dictionary(column.type) else column.type
    if column.null_count == 0 and len(column) > 0:
        if pa.types.is_integer(kind) and not pa.types.is_dictionary(column.type):
            return np.asarray(column.to_numpy(), dtype=np.int64)
        if pa.types.is_floating(kind) and not pa.types.is_dictionary(column.type):
            return np.asarray(column.to_numpy(), dtype=np.float64)
        if pa.types.is_string(kind) or pa.types.is_large_string(kind):
            encoded = pc.dictionary_encode(column.cast(kind))
            if isinstance(encoded, pa.ChunkedArray):
                encoded = encoded.combine_chunks()
            values = np.asarray(encoded.dictionary.to_pylist(), dtype=str)
            decoded: np.ndarray = values[encoded.indices.to_numpy()]
            return decoded
    return np.asarray(column.to_pylist())


def find_runs(paths: list[Path]) -> list[Path]:
    """Run folders (containing ``run.json``) at or below the given paths."""
    found: list[Path] = []
    for path in paths:
        if (path / "run.json").is_file():
            found.append(path)
        elif path.is_dir():
            found.extend(sorted(p.parent for p in path.rglob("run.json")))
        else:
            raise ResultsError(f"{path} is not a results folder")
    if not found:
        raise ResultsError(f"no results found under {', '.join(map(str, paths))} (no run.json)")
    return found


@dataclass(frozen=True)
class RunProgress:
    """How far a run folder got, read from ``run.json`` and its shard file names only.

    Attributes:
        path: the run folder.
        shards_present: finished shards (files named as a shard of this run's count).
        shards_total: the run's shard count.
        limit: ``evaluate --limit``, if the run evaluated only the first episodes.
    """

    path: Path
    shards_present: int
    shards_total: int
    limit: int | None

    @property
    def finished(self) -> bool:
        """Whether every shard of the run is there."""
        return self.shards_present >= self.shards_total

    def unfinished(self) -> str:
        """One line naming the run, its shards present / total and how to finish it."""
        return (
            f"{self.path}: unfinished, {self.shards_present}/{self.shards_total} shards "
            "present; run the command that made it again to finish it (finished shards "
            "are kept)"
        )

    def limited(self) -> str | None:
        """One line naming a run evaluated with ``--limit`` (``None`` for a full run)."""
        if self.limit is None:
            return None
        return (
            f"{self.path}: evaluated only the first {self.limit} episodes of its manifest "
            "(evaluate --limit); evaluate every episode, without --limit"
        )


def run_progress(path: Path) -> RunProgress:
    """How far the run in ``path`` got, without reading its shards.

    Raises:
        ResultsError: ``run.json`` is missing or damaged.
    """
    record = read_run_record(path)
    identity = record["identity"]
    count = int(identity["shards"])
    names = {shard_file_name(i, count) for i in range(count)}
    present = sum(1 for f in (path / "shards").glob("shard-*.parquet") if f.name in names)
    limit = identity.get("limit")
    return RunProgress(path, present, count, limit if isinstance(limit, int) else None)


def read_run_record(path: Path) -> dict[str, Any]:
    """Read and check ``run.json`` of a run folder.

    Its ``run_id`` is a hash of its ``identity``, so the record checks itself.

    Raises:
        ResultsError: missing, unreadable, or not matching its own hash.
    """
    from fewtrans_board.results.row_schema import run_id_of

    marker = path / "run.json"
    try:
        record = json.loads(marker.read_bytes().decode("utf-8"))
    except FileNotFoundError as exc:
        raise ResultsError(f"{path} is not a results folder (no run.json)") from exc
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ResultsError(
            f"{marker} is unreadable ({describe(exc)}); it was damaged: restore it "
            "or evaluate into a new folder"
        ) from exc
    identity = record.get("identity") if isinstance(record, dict) else None
    if not isinstance(identity, dict) or run_id_of(identity) != record.get("run_id"):
        raise ResultsError(
            f"{marker} is corrupt: its run_id does not match its identity; restore it or "
            "evaluate into a new folder"
        )
    shards = identity.get("shards")
    if not isinstance(shards, int) or shards < 1:
        raise ResultsError(f"{marker} is corrupt: shard count {shards!r}")
    checked: dict[str, Any] = record
    return checked


def load_run(path: Path, blobs: BlobStore | None = None) -> RunResults:
    """Read every shard of a run folder, verifying checksums and that they belong together.

    A stored shard keeps its logits in a blob (:mod:`~fewtrans_board.results.blobs`).
    Without ``blobs`` such a shard is read as it is in git (``logits`` null, its record in
    :attr:`RunResults.blobs`); with ``blobs`` its blob is fetched, checked against its
    hash, and the shard rebuilt and checked against the seal it was validated under, so the
    run is then exactly the one a bundle carried.

    Args:
        path: the run folder.
        blobs: where to fetch logits blobs from (see
            :func:`blobs_for_run`); ``None`` fetches nothing.

    Raises:
        ResultsError: a damaged ``run.json``; a corrupt shard (:class:`CorruptShardError`,
            naming the file); a shard of another run or with another index than its name;
            a missing or damaged blob (:class:`~fewtrans_board.results.blobs.BlobError`,
            naming the shard file and the blob).
    """
    import pyarrow as pa

    from fewtrans_board.results.blobs import BlobError, check_split, join_shard

    marker = read_run_record(path)
    files = sorted((path / "shards").glob("shard-*.parquet"))
    if not files:
        raise ResultsError(f"{path} has no finished shards yet")
    count = int(marker["identity"]["shards"])
    tables, present, metas = [], [], []
    unfetched: dict[str, dict[str, Any]] = {}
    for file in files:
        table, shard_meta = read_shard(file)
        record = check_split(table, shard_meta, file)
        if record is not None and blobs is None:
            unfetched[file.name] = record
        elif record is not None and blobs is not None:
            try:
                blob = blobs.get(record["sha256"], record["bytes"])
                table, shard_meta = join_shard(table, shard_meta, record, blob, file)
            except BlobError as exc:
                raise ShardBlobError(file, exc) from exc
        if shard_meta.get("run_id") != marker["run_id"]:
            raise ResultsError(
                f"{file} belongs to run {shard_meta.get('run_id')}, not {marker['run_id']}; "
                "move it out of this folder"
            )
        position = shard_meta.get("shard")
        position = position if isinstance(position, dict) else {}
        index = position.get("index")
        if (
            not isinstance(index, int)
            or position.get("count") != count
            or (file.name != shard_file_name(index, count))
        ):
            raise ResultsError(
                f"{file} holds shard {index} of {position.get('count')}, not what its name says "
                f"(this run has {count} shards); move it out of this folder"
            )
        metas.append(shard_meta)
        tables.append(table)
        present.append(int(index))
    try:
        table = pa.concat_tables(tables)
    except (pa.ArrowException, ValueError) as exc:  # e.g. list in one shard, large_list in another
        raise ResultsError(
            f"the shards of {path} do not fit together ({describe(exc)}); evaluate into a new folder"
        ) from exc
    return RunResults(
        path=path,
        meta=metas[0],
        table=table,
        shards_present=sorted(present),
        shards_total=count,
        shard_meta=metas,
        blobs=unfetched,
    )


class ShardBlobError(ResultsError):
    """The logits blob of a shard is missing or damaged (one line: shard, blob, where).

    Attributes:
        path: the shard file.
        blob: the blob's error.
    """

    def __init__(self, path: Path, blob: BlobError) -> None:
        self.path = path
        self.blob = blob
        super().__init__(f"{path}: {blob}")

    def __reduce__(self) -> tuple[type[ShardBlobError], tuple[Path, BlobError]]:
        return (type(self), (self.path, self.blob))


def store_root_of(run: Path) -> Path | None:
    """The leaderboard store a run folder belongs to (``<store>/results/<id>/<run>``), if any."""
    from fewtrans_board.results.blobs import CONFIG_FILE

    for parent in list(run.resolve().parents)[:3]:
        if (parent / CONFIG_FILE).is_file() or (
            (parent / "results").is_dir() and (parent / "submissions").is_dir()
        ):
            return parent
    return None


def blobs_for_run(run: Path) -> BlobStore | None:
    """The blob store of the leaderboard store holding ``run`` (``None``: not in a store).

    ``$FEWTRANS_BOARD_BLOBS`` (a folder or an fsspec URL) overrides it, for runs copied out
    of their store.
    """
    from fewtrans_board.results.blobs import BlobStore

    override = os.environ.get("FEWTRANS_BOARD_BLOBS")
    if override:
        return BlobStore(override)
    root = store_root_of(run)
    return None if root is None else BlobStore.for_store(root)
