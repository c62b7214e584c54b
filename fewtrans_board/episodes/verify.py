"""Check a local dataset copy against a manifest: every item present, in its class, decodable.

Corruption is found by decoding, not by per-item content hashes in the manifest: a
manifest's sha256 is the identity every run and submission refers to, and hashing file
bytes into it would change it for every committed manifest and refuse honest copies whose
files were re-encoded; decoding each manifest item once catches a truncated image or a
text file named ``.jpg`` in any copy, at the cost of one pass over the items.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fewtrans_board.api.dataset_spec import DatasetSpec
from fewtrans_board.datasets.check import image_problem
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
        unreadable: manifest items whose file does not decode, as ``(item, reason)``.
        decoded: whether the items were decoded (``False``: presence only).
    """

    manifest_sha256: str
    fingerprint_matches: bool
    missing: list[tuple[str, str]] = field(default_factory=list)
    wrong_class: list[tuple[str, str]] = field(default_factory=list)
    unreadable: list[tuple[str, str]] = field(default_factory=list)
    decoded: bool = False

    @property
    def ok(self) -> bool:
        """Every manifest item is present under its class (and decodes, where decoded)."""
        return not self.missing and not self.wrong_class and not self.unreadable

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return {
            "ok": self.ok,
            "manifest_sha256": self.manifest_sha256,
            "fingerprint_matches": self.fingerprint_matches,
            "missing": [list(m) for m in self.missing],
            "wrong_class": [list(w) for w in self.wrong_class],
            "unreadable": [list(u) for u in self.unreadable],
            "decoded": self.decoded,
        }


def verify_manifest(
    manifest: Manifest,
    spec: DatasetSpec,
    root: Path | None,
    *,
    decode: bool = False,
    progress: bool = False,
) -> ManifestCheck:
    """Compare every manifest item with the local copy of its dataset.

    Args:
        manifest: the manifest.
        spec: its dataset.
        root: the local copy (``None`` for embedded datasets).
        decode: decode every present item once (a truncated or non-image file fails;
            ``manifest verify`` does, a run's own check up front does not).
        progress: show a decoding progress bar on stderr.
    """
    listing = spec.list_items(root, "all")
    owner = {item: spec.class_ids[c] for c, items in enumerate(listing) for item in items}
    check = ManifestCheck(
        manifest.sha256,
        listing_fingerprint(spec, listing) == manifest.meta["dataset"]["fingerprint"],
        decoded=decode,
    )
    seen: set[str] = set()
    present: list[str] = []
    for item, class_id in zip(manifest.rows["item"], manifest.rows["class_id"], strict=True):
        if item in seen:
            continue
        seen.add(item)
        found = owner.get(item)
        if found is None:
            check.missing.append((class_id, item))
            continue
        present.append(item)
        if found != class_id:
            check.wrong_class.append((class_id, item))
    if decode:
        from tqdm import tqdm

        for item in tqdm(present, desc=f"decoding {spec.name}", unit="img", disable=not progress):
            problem = image_problem(spec, root, item)
            if problem is not None:
                check.unreadable.append((item, problem))
    return check
