"""Base readers: files under the root, named partitions, and one folder per class."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from fewtrans_board.core.errors import FewtransError
from fewtrans_board.datasets.readers.common import (
    ImageWriter,
    Listing,
    Rows,
    check_image,
    first_appearance,
    listdir_images,
    listing_of,
    open_rgb,
    require_root,
)

if TYPE_CHECKING:
    from PIL import Image

    from fewtrans_board.api.dataset_spec import DatasetSpec


class FileReader:
    """Shared image access for readers whose items are files under the root."""

    def load_image(self, root: Path | None, item: str) -> Image.Image:
        """Open ``root / item`` as RGB."""
        if root is None:
            raise FewtransError(f"item {item!r} needs a dataset root")
        return open_rgb(root / item)

    def verify_image(self, root: Path | None, item: str) -> None:
        """Decode-check ``root / item`` without converting it (cheaper than ``load_image``).

        Raises:
            FewtransError: no root, or the file is missing or unreadable.
        """
        if root is None:
            raise FewtransError(f"item {item!r} needs a dataset root")
        check_image(root / item)


class PartitionedReader(FileReader):
    """Base of readers whose copies have named partitions (train/val/test splits).

    ``all`` pools the partitions class by class in :attr:`partitions` order; subclasses
    implement :meth:`_rows` (one index file per partition) or :meth:`_scan`, which lists
    several partitions in one pass over the copy.
    """

    partitions: ClassVar[tuple[str, ...]] = ()

    def _parts(self, partition: str) -> tuple[str, ...]:
        return self.partitions if partition == "all" else (partition,)

    def _scan(self, base: Path, spec: DatasetSpec, parts: Sequence[str]) -> dict[str, Listing]:
        n = len(spec.class_ids)
        return {part: listing_of(self._rows(base, spec, part) or [], n) for part in parts}

    def list_partitions(
        self, root: Path | None, spec: DatasetSpec, names: Sequence[str]
    ) -> dict[str, Listing]:
        """List several partitions (``all`` included), reading each partition once.

        Args:
            root: the local copy.
            spec: the dataset.
            names: partitions to list, e.g. ``("all", "train", "test")``.

        Returns:
            Each requested name mapped to its listing.

        Raises:
            FewtransError: the root is missing or lacks required files.
        """
        base = require_root(root, spec)
        # First-request order reads files in the order separate calls would, so the
        # same missing file is reported first.
        parts = list(dict.fromkeys(part for name in names for part in self._parts(name)))
        scanned = self._scan(base, spec, parts)
        return {
            name: [
                [item for part in self._parts(name) for item in scanned[part][c]]
                for c in range(len(spec.class_ids))
            ]
            for name in names
        }

    def list_partition(self, root: Path | None, spec: DatasetSpec, partition: str) -> Listing:
        """List one partition (or ``all``) per class."""
        return self.list_partitions(root, spec, (partition,))[partition]

    def class_order(self, root: Path | None, spec: DatasetSpec, partition: str) -> list[int]:
        """Classes in the order they first appear in a partition's index file.

        Readers whose copies list items per class folder return label order.
        """
        base = require_root(root, spec)
        rows = self._rows(base, spec, partition)
        if rows is None:
            return list(range(len(spec.class_ids)))
        return first_appearance(rows, len(spec.class_ids))

    def _rows(self, base: Path, spec: DatasetSpec, partition: str) -> Rows | None:
        """A partition's rows in index-file order, or ``None`` where there is no such file."""
        return None

    def list_items(self, root: Path | None, spec: DatasetSpec) -> Listing:
        """List every partition pooled."""
        return self.list_partition(root, spec, "all")


@dataclass(frozen=True)
class FolderReader(FileReader):
    """``<root>/<subdir>/<class folder>/<image>``: one folder per class.

    Attributes:
        subdir: folder under the root that holds the class folders ("" for the root).
        folder_of: maps a class id to its folder name (default: the id itself).
        suffix: file suffix used by :meth:`write_synthetic`.
    """

    subdir: str = ""
    folder_of: Callable[[str], str] | None = None
    suffix: str = ".jpg"

    def _folder(self, class_id: str) -> str:
        folder = self.folder_of(class_id) if self.folder_of else class_id
        return f"{self.subdir}/{folder}" if self.subdir else folder

    def list_items(self, root: Path | None, spec: DatasetSpec) -> list[list[str]]:
        """List each class folder's images in sorted order."""
        base = require_root(root, spec)
        listing = []
        for class_id in spec.class_ids:
            folder = self._folder(class_id)
            listing.append([f"{folder}/{name}" for name in listdir_images(base / folder)])
        return listing

    def extra_classes(self, root: Path, spec: DatasetSpec) -> list[str]:
        """Folders next to the class folders that match no class of the spec."""
        base = root / self.subdir if self.subdir else root
        expected = {self.folder_of(c) if self.folder_of else c for c in spec.class_ids}
        if not base.is_dir() or any("/" in name for name in expected):
            return []
        with os.scandir(base) as entries:
            return sorted(e.name for e in entries if e.is_dir() and e.name not in expected)

    def write_synthetic(
        self, root: Path, spec: DatasetSpec, counts: Sequence[int], write: ImageWriter
    ) -> None:
        """Create ``counts[c]`` images in each class folder."""
        for index, (class_id, count) in enumerate(zip(spec.class_ids, counts, strict=True)):
            folder = root / self._folder(class_id)
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(count):
                write(folder / f"img_{i:05d}{self.suffix}", index)
