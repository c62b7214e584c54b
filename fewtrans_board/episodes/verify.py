"""Check a local dataset copy against a manifest."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fewtrans_board.api.dataset_spec import DatasetSpec
from fewtrans_board.episodes.build import listing_fingerprint
from fewtrans_board.episodes.manifest import Manifest


@dataclass
class ManifestCheck:
    """Outcome of comparing a manifest with a local copy.

    Attributes:
        manifest_sha256: content hash of the manifest.
        fingerprint_matches: whether the local listing equals the one the manifest was
            built from (same classes, same items, same order).
        missing: manifest items absent from the local copy, as ``(class_id, item)``.
        wrong_class: manifest items the local copy files under another class.
    """

    manifest_sha256: str
    fingerprint_matches: bool
    missing: list[tuple[str, str]] = field(default_factory=list)
    wrong_class: list[tuple[str, str]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Every manifest item is present under its class."""
        return not self.missing and not self.wrong_class

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return {
            "ok": self.ok,
            "manifest_sha256": self.manifest_sha256,
            "fingerprint_matches": self.fingerprint_matches,
            "missing": [list(m) for m in self.missing],
            "wrong_class": [list(w) for w in self.wrong_class],
        }


def verify_manifest(manifest: Manifest, spec: DatasetSpec, root: Path | None) -> ManifestCheck:
    """Compare every manifest item with the local copy of its dataset."""
    listing = spec.list_items(root, "all")
    owner = {item: spec.class_ids[c] for c, items in enumerate(listing) for item in items}
    check = ManifestCheck(
        manifest.sha256,
        listing_fingerprint(spec, listing) == manifest.meta["dataset"]["fingerprint"],
    )
    seen: set[str] = set()
    for item, class_id in zip(manifest.rows["item"], manifest.rows["class_id"], strict=True):
        if item in seen:
            continue
        seen.add(item)
        found = owner.get(item)
        if found is None:
            check.missing.append((class_id, item))
        elif found != class_id:
            check.wrong_class.append((class_id, item))
    return check
