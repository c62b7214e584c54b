"""Base readers: files under the root, named partitions, and one folder per class."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from fewtrans_board.core.errors import FewtransError
from fewtrans_board.datasets.readers.common import (
    FileNumbering,
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

    def missing_items(self, root: Path, spec: DatasetSpec, listing: Listing) -> list[str]:
        """Items the copy's label files list whose image file the copy lacks.

        The copy is listed again with the label files' missing rows collected (the
        readers report them through :func:`~.metadata.warn_missing_images`); ``listing``
        is what :meth:`list_items` found (readers that check numbering use it).
        """
        from fewtrans_board.datasets.readers.metadata import collecting_missing

        with collecting_missing() as found:
            self.list_items(root, spec)  # type: ignore[attr-defined]
        return list(dict.fromkeys(found))


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
        ignored: folders of an official copy that hold no class of the spec (Caltech-256's
            ``257.clutter``, the ImageNet synsets outside a class subset): not read, not
            reported as extra, and written by :meth:`write_synthetic` like a real copy.
        numbering: how an official copy numbers each class's files, if it does; then
            :meth:`missing_items` names every file missing from a class's sequence.
    """

    subdir: str = ""
    folder_of: Callable[[str], str] | None = None
    suffix: str = ".jpg"
    ignored: tuple[str, ...] = ()
    numbering: FileNumbering | None = None

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
        """Folders next to the class folders that match no class of the spec (nor ``ignored``)."""
        base = root / self.subdir if self.subdir else root
        expected = {self.folder_of(c) if self.folder_of else c for c in spec.class_ids}
        if not base.is_dir() or any("/" in name for name in expected):
            return []
        known = expected | set(self.ignored)
        with os.scandir(base) as entries:
            return sorted(e.name for e in entries if e.is_dir() and e.name not in known)

    def missing_items(self, root: Path, spec: DatasetSpec, listing: Listing) -> list[str]:
        """Item ids an official copy has and this one lacks: the gaps in each class's numbering.

        Args:
            root: the local copy.
            spec: the dataset.
            listing: what :meth:`list_items` found in ``root``.

        Returns:
            The missing item ids, class by class (none without a :attr:`numbering`).
        """
        if self.numbering is None:
            return []
        missing = []
        for class_id, items in zip(spec.class_ids, listing, strict=True):
            folder = self._folder(class_id)
            names = [item.rsplit("/", 1)[-1] for item in items]
            missing += [f"{folder}/{name}" for name in self.numbering.gaps(class_id, names)]
        return missing

    def write_synthetic(
        self, root: Path, spec: DatasetSpec, counts: Sequence[int], write: ImageWriter
    ) -> None:
        """Create ``counts[c]`` images in each class folder and one in each ignored folder."""
        for index, (class_id, count) in enumerate(zip(spec.class_ids, counts, strict=True)):
            folder = root / self._folder(class_id)
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(count):
                numbering = self.numbering
                name = numbering.name(class_id, i + 1) if numbering else f"img_{i:05d}{self.suffix}"
                write(folder / name, index)
        base = root / self.subdir if self.subdir else root
        for name in self.ignored:
            write(base / name / f"img_00000{self.suffix}", 0)
