"""Which decoded-image file a run reads: one per dataset copy, shared by all its manifests.

The decoded rows of an item depend on the local copy, the item and the transform only, not
on the manifest that asks for it, so every manifest of a dataset copy (BSCD's 5-, 20- and
50-shot manifests of CropDisease, a search and a test manifest) reads and fills one file:
each image is decoded once per dataset copy and resolution across runs sharing
``--image-cache``. The file is named by the copy's listing fingerprint (class ids and item
ids in order, the content key of the copy's listing), the transform and the copy's path.

A copy too large for one file (QuickDraw's millions of drawings) keeps one file per manifest.
The same scope is the item universe of the frozen-feature cache, so each image is embedded
once per dataset copy and backbone too (:data:`FEATURE_UNIVERSE`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fewtrans_board.core.errors import FewtransError
from fewtrans_board.episodes.build import listing_fingerprint
from fewtrans_board.runner.features import chunk_index, embedding_batches
from fewtrans_board.runner.plan import RunPlan, episode_items

if TYPE_CHECKING:
    from fewtrans_board.api.dataset_spec import DatasetSpec

DATASET_SCOPE_LIMIT = 250_000
"""Most items a dataset-wide decoded file holds (its CRC table and item index stay small)."""

FEATURE_UNIVERSE = "dataset"
"""A run's ``feature_universe``: frozen features are embedded in fixed chunks of the copy's
items (:func:`decoded_scope`), so every manifest of a dataset copy shares one feature-cache
entry per backbone. Runs recorded without it chunked their own episodes' items (older runs,
``--limit`` smoke runs, and runs of a manifest too small for the copy:
:data:`CHUNK_WASTE_LIMIT`), which would otherwise embed whole chunks for a few episodes;
verification replays whichever the run records."""

CHUNK_WASTE_LIMIT = 3
"""A run chunks its own items when the copy's chunks its manifest touches hold more than this
many times the images the manifest shows: eight 5-way 1-shot episodes of the digits show 471
images and touch all eight chunks (1,797 images), as a few episodes of a large copy would.
The digits' 600-episode manifests show 896 (classes 5-9, spread over every chunk): 2.0."""


@dataclass(frozen=True)
class DecodedScope:
    """The scope of a decoded-image file.

    Attributes:
        key: ``dataset:<listing fingerprint>``, or the manifest's sha256 for a copy too
            large (or unlistable) for one file.
        items: every item the file holds (sorted, unique).
    """

    key: str
    items: list[str]

    @property
    def shared(self) -> bool:
        """Whether every manifest of the dataset copy shares the file."""
        return self.key.startswith("dataset:")


def copy_scope(
    spec: DatasetSpec, root: Path | None, wanted: Iterable[str], manifest_sha256: str
) -> DecodedScope:
    """The items of a dataset copy (with ``wanted``), else ``wanted`` where it cannot be one.

    Args:
        spec: the dataset.
        root: the local copy (``None`` for an embedded dataset).
        wanted: the items a manifest needs.
        manifest_sha256: the manifest's digest, the key of a per-manifest scope.
    """
    wanted = set(wanted)
    try:
        listing = spec.list_items(root, "all")
    except FewtransError:  # the run's own check names the problem; decode per manifest
        return DecodedScope(manifest_sha256, sorted(wanted))
    if sum(map(len, listing)) > DATASET_SCOPE_LIMIT:
        return DecodedScope(manifest_sha256, sorted(wanted))
    items = {item for class_items in listing for item in class_items} | wanted
    return DecodedScope(f"dataset:{listing_fingerprint(spec, listing)}", sorted(items))


def decoded_scope(plan: RunPlan) -> DecodedScope:
    """The decoded-image file a run reads: its dataset copy's, else its manifest's.

    It is also the item universe of a dataset-scope feature cache
    (:data:`FEATURE_UNIVERSE`): features are embedded in fixed chunks of these items.
    """
    return copy_scope(
        plan.dataset.obj,
        plan.root,
        episode_items(plan.manifest.episodes()),
        plan.manifest.sha256,
    )


def feature_universe(plan: RunPlan, scope: Callable[[], DecodedScope]) -> str | None:
    """The run's ``feature_universe`` (:data:`FEATURE_UNIVERSE`), or ``None``.

    ``None`` where its frozen features are chunked over its own episodes' items: no cache,
    a fine-tuning adapter, a ``--limit`` run, or a manifest too small for its copy
    (:data:`CHUNK_WASTE_LIMIT`; decided on the whole manifest, so every shard agrees).

    Args:
        plan: the run.
        scope: gives its :func:`decoded_scope` (called only for a run whose features are
            cached; the caller keeps one).
    """
    spec = plan.spec
    served = spec.feature_cache and plan.adapter_cls.frozen_backbone
    if not served or spec.limit is not None:
        return None
    shown = sorted(set(episode_items(plan.manifest.episodes())))
    items = scope().items
    embedded = sum(len(b) for b in embedding_batches(shown, items, chunk_index(items)))
    return FEATURE_UNIVERSE if embedded <= CHUNK_WASTE_LIMIT * len(shown) else None
