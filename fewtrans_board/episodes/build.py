"""Build a manifest from a dataset spec, a local copy and a sampling protocol."""

from __future__ import annotations

import itertools
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fewtrans_board.api.dataset_spec import DatasetSpec
from fewtrans_board.core.canonical import canonical_json, sha256_text
from fewtrans_board.core.errors import FewtransError
from fewtrans_board.episodes.frozen import manifest_command
from fewtrans_board.episodes.manifest import Manifest, ManifestEpisode
from fewtrans_board.episodes.protocols import SamplingProtocol
from fewtrans_board.episodes.samplers import ClassPool, CoopKShotSampler, EpisodeDraw


def manifest_recipe(
    protocol: str, dataset: str, *, with_root: bool, overrides: Mapping[str, int | None]
) -> list[str]:
    """The ``manifest build`` command recorded in a manifest, without machine-specific paths.

    The root and the output file appear as ``<root>`` and ``<out>``: a manifest's bytes are
    a function of its content and recipe only, wherever and under whatever name it is built.
    """
    root = "<root>" if with_root else None
    return manifest_command(protocol, dataset, "<out>", root=root, overrides=overrides)


def listing_fingerprint(spec: DatasetSpec, listing: list[list[str]]) -> str:
    """sha256 of the full item listing of a local copy (class ids and item ids, in order)."""
    return sha256_text(
        canonical_json([[cid, items] for cid, items in zip(spec.class_ids, listing, strict=True)])
    )


def class_pool(
    spec: DatasetSpec, listing: list[list[str]], part: str, *, with_novel: bool = False
) -> ClassPool:
    """Build the pool of ``part`` ("base" or "all") classes with their items and hierarchy.

    With ``with_novel`` the pool also carries the split's novel classes (base-to-novel).
    """
    classes = spec.classes_of(part)
    nodes = None
    edges: Any = spec.extra.get("hierarchy_edges")
    if edges is not None and part == "base":
        from fewtrans_board.datasets.hierarchy import pool_nodes

        pairs = [(str(parent), str(child)) for parent, child in edges]
        nodes = pool_nodes(pairs, [spec.class_ids[c] for c in classes])
    novel = spec.split.novel if with_novel else ()
    return ClassPool(
        classes=tuple(classes),
        items=tuple(tuple(listing[c]) for c in classes),
        nodes=nodes,
        novel_classes=tuple(novel),
        novel_items=tuple(tuple(listing[c]) for c in novel),
    )


def _to_manifest_episode(spec: DatasetSpec, index: int, draw: EpisodeDraw) -> ManifestEpisode:
    return ManifestEpisode(
        index=index,
        stream_index=draw.stream_index,
        classes=draw.classes,
        class_ids=tuple(spec.class_ids[c] for c in draw.classes),
        support=tuple((item, label) for label, items in enumerate(draw.support) for item in items),
        query=tuple((item, label) for label, items in enumerate(draw.query) for item in items),
        novel_classes=draw.novel_classes,
        novel_class_ids=tuple(spec.class_ids[c] for c in draw.novel_classes),
        novel_query=tuple(
            (item, label) for label, items in enumerate(draw.novel_query) for item in items
        ),
    )


def build_manifest(
    spec: DatasetSpec,
    root: Path | None,
    protocol: SamplingProtocol,
    *,
    command: list[str] | None = None,
) -> Manifest:
    """Draw a protocol's episodes from a local copy of a dataset.

    Args:
        spec: the dataset.
        root: its local copy (``None`` for embedded datasets).
        protocol: the sampling protocol, overrides applied.
        command: the command line that built it, recorded for provenance.

    Returns:
        The manifest (not yet written).

    Raises:
        FewtransError: missing files, classes too small for the protocol, empty pools.
    """
    sampler = protocol.sampler
    parts: tuple[str, ...] = ()
    if isinstance(sampler, CoopKShotSampler):
        parts = (protocol.support_partition, protocol.query_partition)
    # A partition the dataset lacks is left to list_items below, so that its error still
    # comes after the empty-class check.
    known = [part for part in parts if part in spec.partitions]
    listings = spec.list_partitions(root, ["all", *known])
    listing = listings["all"]
    empty = [spec.class_ids[c] for c in spec.classes_of(protocol.class_pool) if not listing[c]]
    if empty:
        raise FewtransError(
            f"dataset {spec.name!r} at {root}: {len(empty)} class(es) have no items, e.g. "
            f"{', '.join(repr(e) for e in empty[:5])}. Run 'fewtrans-board datasets scan "
            f"{spec.name} --root {root}' for a full report."
        )
    meta: dict[str, Any] = {
        "protocol": protocol.describe(),
        "dataset": {
            "name": spec.name,
            "num_classes": spec.num_classes,
            "fingerprint": listing_fingerprint(spec, listing),
        },
        "seed": protocol.seed,
    }
    if isinstance(sampler, CoopKShotSampler):
        train, test = (
            class_pool(
                spec,
                listings[part] if part in listings else spec.list_items(root, part),
                protocol.class_pool,
            )
            for part in parts
        )
        # Dassl samples classes in the order they first appear in the train list.
        first_seen = spec.class_order(root, protocol.support_partition)
        position = {c: i for i, c in enumerate(train.classes)}
        walk = [position[c] for c in first_seen if c in position]
        pairs = list(sampler.episodes(train, test, walk))
        meta["episode_info"] = [info for info, _ in pairs]
        draws = [draw for _, draw in pairs]
        meta["seed"] = None
    else:
        with_novel = bool(getattr(sampler, "novel_queries", 0))
        pool = class_pool(spec, listing, protocol.class_pool, with_novel=with_novel)
        start = protocol.block * protocol.episodes
        stream = sampler.stream(pool, protocol.seed)
        draws = list(itertools.islice(stream, start, start + protocol.episodes))
        meta["draw"] = {
            "block": protocol.block,
            "block_size": protocol.episodes,
            "first_stream_index": start,
        }
    if command is not None:
        meta["build_command"] = shlex.join(command)
    episodes = [_to_manifest_episode(spec, i, d) for i, d in enumerate(draws)]
    return Manifest.from_episodes(spec.name, episodes, meta)
