"""Rewrite a bundle's predictions the way a forger would: consistent rows, re-sealed shards.

Every changed prediction gets logits that argmax to it, accuracies are recomputed against
the frozen labels and both ensembles are re-fused from the new member logits, so the
forged bundle passes validation; only a re-run can tell.
"""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from fewtrans_board.episodes.manifest import Manifest
from fewtrans_board.hpe.aggregate import fuse
from fewtrans_board.results.row_schema import METADATA_KEY, accuracy_percent, storable_logits
from fewtrans_board.results.shards import rows_to_table

Forge = Callable[[int, np.ndarray, np.ndarray], np.ndarray]
"""``forge(episode, labels, predictions) -> new predictions`` of one configuration."""
EpisodeForge = Callable[[int, np.ndarray, list[np.ndarray]], list[np.ndarray]]
"""``forge(episode, labels, [predictions of each configuration]) -> new predictions``."""


def _consistent_logits(
    old: list[float], n_way: int, before: np.ndarray, after: np.ndarray
) -> list[float]:
    logits = np.asarray(old, dtype=np.float32).reshape(-1, n_way)
    for q in np.flatnonzero(before != after):
        logits[q] = -8.0
        logits[q, after[q]] = 0.0
    return logits.ravel().tolist()


def each_config(forge: Forge) -> EpisodeForge:
    """An episode forge that passes every configuration through ``forge``."""
    return lambda episode, labels, members: [forge(episode, labels, p.copy()) for p in members]


def forge_rows(
    rows: list[dict],
    manifest: Manifest,
    forge: Forge | EpisodeForge,
    split: str = "base",
    *,
    whole_episode: bool = False,
) -> None:
    """Apply ``forge`` to the configuration rows of ``split``, then re-fuse.

    ``forge`` sees one configuration at a time, or (``whole_episode``) every configuration
    of an episode at once.
    """
    episodes = manifest.episodes()
    by_episode: dict[int, list[dict]] = {}
    for row in rows:
        if row["split"] == split:
            by_episode.setdefault(row["episode"], []).append(row)
    edit: EpisodeForge = forge if whole_episode else each_config(forge)  # type: ignore[assignment]
    for index, group in by_episode.items():
        side = episodes[index].query if split == "base" else episodes[index].novel_query
        labels = np.array([label for _, label in side])
        members = sorted(
            (r for r in group if r["kind"] == "config"), key=lambda r: r["config_index"]
        )
        befores = [np.asarray(row["predictions"]) for row in members]
        afters = edit(index, labels, [b.copy() for b in befores])
        stacked, predictions = [], []
        for row, before, after in zip(members, befores, afters, strict=True):
            after = np.asarray(after)
            row["logits"] = _consistent_logits(row["logits"], row["n_way"], before, after)
            row["predictions"] = after.astype(int).tolist()
            row["accuracy"] = accuracy_percent(after, labels)
            stacked.append(
                storable_logits(
                    np.asarray(row["logits"], dtype=np.float32).reshape(-1, row["n_way"])
                )
            )
            predictions.append(after)
        for row in group:
            if row["kind"] != "config":
                fused, logits = fuse(
                    row["aggregation"],
                    logits=np.stack(stacked),
                    predictions=np.stack(predictions),
                    n_way=row["n_way"],
                )
                row["predictions"] = fused.astype(int).tolist()
                row["accuracy"] = accuracy_percent(fused, labels)
                row["logits"] = None if logits is None else storable_logits(logits).ravel().tolist()


def forge_table(
    data: bytes, frozen: dict[str, Manifest], edit: Callable[[list[dict], Manifest], None]
) -> bytes:
    """A result shard's bytes with its rows passed through ``edit``, re-sealed."""
    table = pq.read_table(io.BytesIO(data))
    meta = json.loads(table.schema.metadata[METADATA_KEY])
    rows = table.to_pylist()
    edit(rows, frozen[meta["manifest"]["sha256"]])
    buffer = io.BytesIO()
    pq.write_table(
        rows_to_table(rows, {k: v for k, v in meta.items() if k != "schema_version"}), buffer
    )
    return buffer.getvalue()


def frozen_manifests(manifests: Path) -> dict[str, Manifest]:
    """The frozen manifests of a store folder by sha256."""
    return {Manifest.load(p).sha256: Manifest.load(p) for p in manifests.glob("*.parquet")}


def forge_run(
    run: Path, out: Path, manifests: Path, edit: Callable[[list[dict], Manifest], None]
) -> Path:
    """A copy of the run folder ``run`` whose shards' rows are passed through ``edit``."""
    import shutil

    shutil.copytree(run, out)
    frozen = frozen_manifests(manifests)
    for shard in sorted((out / "shards").glob("shard-*.parquet")):
        shard.write_bytes(forge_table(shard.read_bytes(), frozen, edit))
    return out


def edit_bundle(
    bundle: Path, out: Path, manifests: Path, edit: Callable[[list[dict], Manifest], None]
) -> Path:
    """A copy of ``bundle`` with every shard's rows passed through ``edit``, re-sealed."""
    frozen = frozen_manifests(manifests)
    with zipfile.ZipFile(bundle) as src, zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename.endswith(".parquet"):
                data = forge_table(data, frozen, edit)
            dst.writestr(info.filename, data)
    return out


def forge_bundle(bundle: Path, out: Path, manifests: Path, forge: Forge) -> Path:
    """A copy of ``bundle`` with every shard's predictions passed through ``forge``."""
    return edit_bundle(
        bundle, out, manifests, lambda rows, manifest: forge_rows(rows, manifest, forge)
    )


def correct_outside(checked: set[int]) -> Forge:
    """Every prediction correct, except on the episodes a known seed re-runs."""
    return lambda episode, labels, predictions: predictions if episode in checked else labels


def shaved(share: float = 0.1) -> Forge:
    """Up to ``share`` of each configuration's wrong predictions flipped to correct."""

    def forge(episode: int, labels: np.ndarray, predictions: np.ndarray) -> np.ndarray:
        wrong = np.flatnonzero(predictions != labels)
        flip = wrong[: int(share * len(wrong))]
        predictions[flip] = labels[flip]
        return predictions

    return forge
