"""Which decoded-image file a run reads: one per dataset copy, shared by all its manifests.

The decoded rows of an item depend on the local copy, the item and the transform only, not
on the manifest that asks for it, so every manifest of a dataset copy (BSCD's 5-, 20- and
50-shot manifests of CropDisease, a search and a test manifest) reads and fills one file:
each image is decoded once per dataset copy and resolution across runs sharing
``--image-cache``. The file is named by the copy's listing fingerprint (class ids and item
ids in order, the content key of the copy's listing), the transform and the copy's path.

A copy too large for one file (QuickDraw's millions of drawings) keeps one file per manifest.
"""

from __future__ import annotations

from dataclasses import dataclass

from fewtrans_board.core.errors import FewtransError
from fewtrans_board.episodes.build import listing_fingerprint
from fewtrans_board.runner.plan import RunPlan, episode_items

DATASET_SCOPE_LIMIT = 250_000
"""Most items a dataset-wide decoded file holds (its CRC table and item index stay small)."""


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


def decoded_scope(plan: RunPlan) -> DecodedScope:
    """The decoded-image file a run reads: its dataset copy's, else its manifest's."""
    wanted = episode_items(plan.manifest.episodes())
    spec = plan.dataset.obj
    try:
        listing = spec.list_items(plan.root, "all")
    except FewtransError:  # the run's own check names the problem; decode per manifest
        return DecodedScope(plan.manifest.sha256, sorted(set(wanted)))
    if sum(map(len, listing)) > DATASET_SCOPE_LIMIT:
        return DecodedScope(plan.manifest.sha256, sorted(set(wanted)))
    items = {item for class_items in listing for item in class_items} | set(wanted)
    return DecodedScope(f"dataset:{listing_fingerprint(spec, listing)}", sorted(items))
