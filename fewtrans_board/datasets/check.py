"""Check a local dataset copy against its spec: classes, counts and readable images."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fewtrans_board.api.dataset_spec import DatasetSpec
from fewtrans_board.core.errors import FewtransError
from fewtrans_board.datasets.readers import check_image


@dataclass
class CopyReport:
    """Result of checking a local copy.

    Attributes:
        dataset: dataset name.
        root: the checked folder.
        counts: items per class id.
        empty_classes: class ids with no items (missing or empty folders).
        small_classes: class ids with fewer items than the spec's minimum.
        extra_classes: folders present on disk but not in the class list.
        missing_files: item ids an official copy has and this one lacks (readers whose
            layout says which files exist: an index file, a numbering).
        miscounted_classes: class id -> ``[found, official]`` for every non-empty class
            whose item count differs from the official one (``extra["expected_counts"]``).
        unreadable: item ids whose image could not be decoded.
        total: total items found.
        expected_total: total a complete copy has, if known.
    """

    dataset: str
    root: str | None
    counts: dict[str, int] = field(default_factory=dict)
    empty_classes: list[str] = field(default_factory=list)
    small_classes: list[str] = field(default_factory=list)
    extra_classes: list[str] = field(default_factory=list)
    missing_files: list[str] = field(default_factory=list)
    miscounted_classes: dict[str, list[int]] = field(default_factory=dict)
    unreadable: list[str] = field(default_factory=list)
    total: int = 0
    expected_total: int | None = None

    @property
    def ok(self) -> bool:
        """Whether the copy is complete and readable."""
        return not (
            self.empty_classes
            or self.small_classes
            or self.extra_classes
            or self.missing_files
            or self.miscounted_classes
            or self.unreadable
            or (self.expected_total is not None and self.total != self.expected_total)
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return {
            "dataset": self.dataset,
            "root": self.root,
            "ok": self.ok,
            "total": self.total,
            "expected_total": self.expected_total,
            "classes": len(self.counts),
            "empty_classes": self.empty_classes,
            "small_classes": self.small_classes,
            "extra_classes": self.extra_classes,
            "missing_files": self.missing_files,
            "miscounted_classes": self.miscounted_classes,
            "unreadable": self.unreadable,
            "counts": self.counts,
        }


def image_problem(spec: DatasetSpec, root: Path | None, item: str) -> str | None:
    """Why ``item`` of a local copy cannot be decoded, or ``None`` when every pixel decodes.

    Args:
        spec: the dataset.
        root: its local copy (``None`` for embedded datasets).
        item: the item id.
    """
    try:
        if root is None:
            spec.reader.load_image(root, item)
        elif (verify := getattr(spec.reader, "verify_image", None)) is not None:
            verify(root, item)
        else:
            # A reader without verify_image (e.g. a plugin's) still has its items decoded as files.
            check_image(root / item)
    except FewtransError as exc:
        return str(exc)
    return None


def _image_is_readable(spec: DatasetSpec, root: Path | None, item: str) -> bool:
    return image_problem(spec, root, item) is None


def _miscounted(spec: DatasetSpec, counts: dict[str, int]) -> dict[str, list[int]]:
    """Non-empty classes whose count differs from ``extra["expected_counts"]`` (if any)."""
    official = spec.extra.get("expected_counts")
    if not isinstance(official, Mapping):
        return {}
    return {
        cid: [found, int(official[cid])]
        for cid, found in counts.items()
        if found and cid in official and found != int(official[cid])
    }


def check_local_copy(
    spec: DatasetSpec, root: Path | None, *, verify_images: bool = True, progress: bool = False
) -> CopyReport:
    """Compare a local copy with the spec.

    Args:
        spec: the dataset spec.
        root: the local copy (``None`` for embedded datasets).
        verify_images: decode-check every image (slow on large copies).
        progress: show a progress bar on stderr.

    Raises:
        FewtransError: the root does not exist or lacks the files the layout requires.
    """
    listing = spec.list_items(root, "all")
    report = CopyReport(spec.name, str(root) if root is not None else None)
    report.expected_total = spec.expected_items
    for cid, items in zip(spec.class_ids, listing, strict=True):
        report.counts[cid] = len(items)
        if not items:
            report.empty_classes.append(cid)
        elif len(items) < spec.min_items_per_class:
            report.small_classes.append(cid)
    report.total = sum(report.counts.values())
    extra = getattr(spec.reader, "extra_classes", None)
    if extra is not None and root is not None:
        report.extra_classes = list(extra(root, spec))
    missing = getattr(spec.reader, "missing_items", None)
    if missing is not None and root is not None:
        report.missing_files = list(missing(root, spec, listing))
    report.miscounted_classes = _miscounted(spec, report.counts)
    if verify_images:
        from tqdm import tqdm

        items = [item for class_items in listing for item in class_items]
        for item in tqdm(items, desc=f"checking {spec.name}", unit="img", disable=not progress):
            if not _image_is_readable(spec, root, item):
                report.unreadable.append(item)
    return report
