"""Readers of local dataset copies, one per documented on-disk layout.

Every reader lists item ids (POSIX paths relative to the root) per class of the spec's
explicit class list, in the dataset's canonical order, and can write a tiny synthetic copy
of its layout for tests (:meth:`write_synthetic`). Class folders are looked up by name;
the class order never comes from a directory listing.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from fewtrans_board.errors import FewtransError

if TYPE_CHECKING:
    from PIL import Image

    from fewtrans_board.datasets.spec import DatasetSpec

IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp"})

ImageWriter = Callable[[Path, int], None]
"""``write(path, class_index)`` creates one small image file (used by synthetic copies)."""

Listing = list[list[str]]
"""Item ids per class, in ``spec.class_ids`` order."""

Rows = list[tuple[int, str]]
"""``(class index, item id)`` pairs in the order a partition's index file lists them."""


def listing_of(rows: Iterable[tuple[int, str]], n_classes: int) -> Listing:
    """Group rows by class, keeping file order within each class."""
    listing: Listing = [[] for _ in range(n_classes)]
    for label, item in rows:
        listing[label].append(item)
    return listing


def first_appearance(rows: Iterable[tuple[int, str]], n_classes: int) -> list[int]:
    """Classes in the order they first appear in ``rows``; absent classes last, by label.

    This is the order Dassl (CoOp's data library) walks classes in when it samples a
    few-shot split: it groups a split list into a label-keyed dict in list order.
    """
    seen = dict.fromkeys(label for label, _ in rows)
    return [*seen, *(c for c in range(n_classes) if c not in seen)]


def require_root(root: Path | None, spec: DatasetSpec) -> Path:
    """Return ``root`` or raise a clear error saying what the dataset needs."""
    if root is None:
        raise FewtransError(
            f"dataset {spec.name!r} needs --root pointing at your local copy; "
            f"expected layout:\n{spec.layout}\nHow to obtain it: {spec.download}"
        )
    if not root.is_dir():
        raise FewtransError(
            f"dataset {spec.name!r}: root {root} is not a directory. Expected layout:\n"
            f"{spec.layout}"
        )
    return root


def open_rgb(path: Path) -> Image.Image:
    """Open an image file as RGB, with an error naming the file if it is unreadable."""
    from PIL import Image

    try:
        with Image.open(path) as image:
            return image.convert("RGB")
    except FileNotFoundError:
        raise FewtransError(f"image file {path} does not exist") from None
    except OSError as exc:
        raise FewtransError(f"cannot read image {path}: {exc}") from exc


def check_image(path: Path) -> None:
    """Decode-check an image file without converting it.

    Args:
        path: the image file.

    Raises:
        FewtransError: the file is missing or cannot be decoded; the message names it.
    """
    from PIL import Image

    try:
        with Image.open(path) as image:
            image.verify()
    except FileNotFoundError:
        raise FewtransError(f"image file {path} does not exist") from None
    # verify() reports corrupt data with assorted exception types, not only OSError.
    except Exception as exc:
        raise FewtransError(f"cannot read image {path}: {exc}") from exc


def _require_file(spec: DatasetSpec, path: Path, label: str = "") -> Path:
    """Return ``path`` if it is a file, else raise naming the dataset and the missing file."""
    if not path.is_file():
        what = f"{label} {path}" if label else str(path)
        raise FewtransError(f"dataset {spec.name!r}: missing {what}")
    return path


def _listdir_images(directory: Path) -> list[str]:
    if not directory.is_dir():
        return []
    with os.scandir(directory) as entries:
        names = [
            e.name
            for e in entries
            if e.is_file() and os.path.splitext(e.name)[1].lower() in IMAGE_SUFFIXES
        ]
    return sorted(names)


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
    implement :meth:`_scan`, which lists several partitions in one pass over the copy.
    """

    partitions: ClassVar[tuple[str, ...]] = ()

    def _parts(self, partition: str) -> tuple[str, ...]:
        return self.partitions if partition == "all" else (partition,)

    def _scan(self, base: Path, spec: DatasetSpec, parts: Sequence[str]) -> dict[str, Listing]:
        raise NotImplementedError

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
            listing.append([f"{folder}/{name}" for name in _listdir_images(base / folder)])
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


@dataclass(frozen=True)
class VggFlowerReader(FileReader):
    """Oxford 102 Flowers: ``imagelabels.mat`` plus ``jpg/image_{05d}.jpg``.

    Items of a class follow ``imagelabels.mat`` order (FewTrans/Meta-Dataset order).
    """

    def list_items(self, root: Path | None, spec: DatasetSpec) -> list[list[str]]:
        """Group image files by their 1-based label in ``imagelabels.mat``."""
        from scipy.io import loadmat

        base = require_root(root, spec)
        mat = _require_file(spec, base / "imagelabels.mat")
        labels = loadmat(str(mat))["labels"].ravel()
        listing: list[list[str]] = [[] for _ in spec.class_ids]
        for position, label in enumerate(labels, start=1):
            item = f"jpg/image_{position:05d}.jpg"
            if (base / item).is_file():
                listing[int(label) - 1].append(item)
        return listing

    def write_synthetic(
        self, root: Path, spec: DatasetSpec, counts: Sequence[int], write: ImageWriter
    ) -> None:
        """Write ``imagelabels.mat`` and the numbered images."""
        import numpy as np
        from scipy.io import savemat

        labels = [c + 1 for c, n in enumerate(counts) for _ in range(n)]
        order = np.random.RandomState(0).permutation(len(labels))
        shuffled = [labels[i] for i in order]
        (root / "jpg").mkdir(parents=True, exist_ok=True)
        savemat(str(root / "imagelabels.mat"), {"labels": np.array([shuffled], dtype=np.uint8)})
        for position, label in enumerate(shuffled, start=1):
            write(root / "jpg" / f"image_{position:05d}.jpg", label - 1)


def category_number(class_id: str) -> int:
    """Category id encoded as the ``NNNN.`` prefix of a class id (``"0042.Amanita muscaria"``)."""
    return int(class_id.split(".", 1)[0])


@dataclass(frozen=True)
class CocoJsonReader(FileReader):
    """FGVCx Fungi 2018: ``train.json`` and ``val.json`` (COCO-style), images pooled.

    Class ids are ``"{category_id:04d}.{name}"``; items follow json order, train first,
    as FewTrans/Meta-Dataset pool them.
    """

    annotation_files: tuple[str, ...] = ("train.json", "val.json")

    def list_items(self, root: Path | None, spec: DatasetSpec) -> list[list[str]]:
        """Read the annotation files and group file names by category id."""
        base = require_root(root, spec)
        index = {category_number(cid): i for i, cid in enumerate(spec.class_ids)}
        listing: list[list[str]] = [[] for _ in spec.class_ids]
        for name in self.annotation_files:
            path = _require_file(spec, base / name, "annotation file")
            data = json.loads(path.read_text(encoding="utf-8"))
            files = {im["id"]: im["file_name"] for im in data["images"]}
            for ann in data["annotations"]:
                position = index.get(int(ann["category_id"]))
                item = files[ann["image_id"]]
                if position is not None and (base / item).is_file():
                    listing[position].append(item)
        return listing

    def write_synthetic(
        self, root: Path, spec: DatasetSpec, counts: Sequence[int], write: ImageWriter
    ) -> None:
        """Write both annotation files, splitting each class's images between them."""
        categories = [
            {"id": category_number(cid), "name": cid.split(".", 1)[1]} for cid in spec.class_ids
        ]
        parts: dict[str, dict[str, list[dict[str, object]]]] = {
            name: {"images": [], "annotations": [], "categories": categories}
            for name in self.annotation_files
        }
        image_id = 0
        for c, count in enumerate(counts):
            for i in range(count):
                part = self.annotation_files[i % len(self.annotation_files)]
                file_name = f"images/{c:04d}/img_{i:05d}.jpg"
                write(root / file_name, c)
                parts[part]["images"].append({"id": image_id, "file_name": file_name})
                parts[part]["annotations"].append(
                    {"image_id": image_id, "category_id": category_number(spec.class_ids[c])}
                )
                image_id += 1
        for name, data in parts.items():
            (root / name).write_text(json.dumps(data), encoding="utf-8")


@dataclass(frozen=True)
class OneHotCsvReader(FileReader):
    """ISIC 2018 Task 3: a CSV with an image column and one-hot class columns.

    Attributes:
        csv_path: the ground-truth CSV, relative to the root.
        image_dir: folder of the images, relative to the root.
        suffix: image file suffix.
    """

    csv_path: str = "ISIC2018_Task3_Training_GroundTruth/ISIC2018_Task3_Training_GroundTruth.csv"
    image_dir: str = "ISIC2018_Task3_Training_Input"
    suffix: str = ".jpg"

    def list_items(self, root: Path | None, spec: DatasetSpec) -> list[list[str]]:
        """Assign each CSV row to the argmax of its one-hot columns (CSV order)."""
        base = require_root(root, spec)
        path = _require_file(spec, base / self.csv_path, "label file")
        listing: list[list[str]] = [[] for _ in spec.class_ids]
        with path.open(newline="", encoding="utf-8") as handle:
            for row in csv.DictReader(handle):
                scores = [float(row[cid]) for cid in spec.class_ids]
                item = f"{self.image_dir}/{row['image']}{self.suffix}"
                if (base / item).is_file():
                    listing[scores.index(max(scores))].append(item)
        return listing

    def write_synthetic(
        self, root: Path, spec: DatasetSpec, counts: Sequence[int], write: ImageWriter
    ) -> None:
        """Write the CSV and one image per row."""
        (root / self.csv_path).parent.mkdir(parents=True, exist_ok=True)
        (root / self.image_dir).mkdir(parents=True, exist_ok=True)
        with (root / self.csv_path).open("w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(["image", *spec.class_ids])
            n = 0
            for c, count in enumerate(counts):
                for _ in range(count):
                    name = f"ISIC_{n:07d}"
                    writer.writerow(
                        [name, *("1.0" if j == c else "0.0" for j in range(len(counts)))]
                    )
                    write(root / self.image_dir / f"{name}{self.suffix}", c)
                    n += 1


@dataclass(frozen=True)
class ChestXReader(FileReader):
    """ChestX-ray14 (BSCD-FSL): ``Data_Entry_2017.csv`` plus a flat ``images/`` folder.

    Only single-label rows whose label is one of the spec's classes are kept, as in
    BSCD-FSL ("No Finding" and multi-label rows are dropped). Items follow CSV order.
    """

    csv_path: str = "Data_Entry_2017.csv"
    image_dir: str = "images"

    def list_items(self, root: Path | None, spec: DatasetSpec) -> list[list[str]]:
        """Read single-label rows of the CSV."""
        base = require_root(root, spec)
        path = _require_file(spec, base / self.csv_path, "label file")
        index = {cid: i for i, cid in enumerate(spec.class_ids)}
        listing: list[list[str]] = [[] for _ in spec.class_ids]
        with path.open(newline="", encoding="utf-8") as handle:
            for row in csv.DictReader(handle):
                label = row["Finding Labels"]
                item = f"{self.image_dir}/{row['Image Index']}"
                if label in index and (base / item).is_file():
                    listing[index[label]].append(item)
        return listing

    def write_synthetic(
        self, root: Path, spec: DatasetSpec, counts: Sequence[int], write: ImageWriter
    ) -> None:
        """Write the CSV (with a multi-label and a No Finding row) and the images."""
        (root / self.image_dir).mkdir(parents=True, exist_ok=True)
        with (root / self.csv_path).open("w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(["Image Index", "Finding Labels", "Patient ID"])
            n = 0
            for c, count in enumerate(counts):
                for _ in range(count):
                    name = f"{n:08d}_000.png"
                    writer.writerow([name, spec.class_ids[c], n])
                    write(root / self.image_dir / name, c)
                    n += 1
            for extra in ("No Finding", f"{spec.class_ids[0]}|{spec.class_ids[1]}"):
                name = f"{n:08d}_000.png"
                writer.writerow([name, extra, n])
                write(root / self.image_dir / name, 0)
                n += 1


@dataclass(frozen=True)
class SplitJsonReader(PartitionedReader):
    """CoOp-style split file: ``{"train"|"val"|"test": [[impath, label, classname], ...]}``.

    Attributes:
        split_file: the split json, relative to the root
            (e.g. ``split_zhou_DescribableTextures.json``).
        image_dir: folder the json's image paths are relative to.
    """

    split_file: str
    image_dir: str

    partitions = ("train", "val", "test")

    def _scan(self, base: Path, spec: DatasetSpec, parts: Sequence[str]) -> dict[str, Listing]:
        """List ``parts`` per class in json order, reading the split file once."""
        data = self._load(base, spec)
        n = len(spec.class_ids)
        return {part: listing_of(self._json_rows(base, data, part), n) for part in parts}

    def _rows(self, base: Path, spec: DatasetSpec, partition: str) -> Rows:
        """The json's rows of one partition, in file order."""
        return self._json_rows(base, self._load(base, spec), partition)

    def _load(self, base: Path, spec: DatasetSpec) -> dict[str, list[list[object]]]:
        path = _require_file(spec, base / self.split_file, "split file")
        data: dict[str, list[list[object]]] = json.loads(path.read_text(encoding="utf-8"))
        return data

    def _json_rows(self, base: Path, data: dict[str, list[list[object]]], part: str) -> Rows:
        rows = []
        for impath, label, _ in data[part]:
            item = f"{self.image_dir}/{impath}" if self.image_dir else str(impath)
            if (base / item).is_file():
                rows.append((int(str(label)), item))
        return rows

    def write_synthetic(
        self, root: Path, spec: DatasetSpec, counts: Sequence[int], write: ImageWriter
    ) -> None:
        """Write images and a split file putting half in train, a quarter each in val/test."""
        data: dict[str, list[list[object]]] = {p: [] for p in self.partitions}
        for c, count in enumerate(counts):
            for i in range(count):
                impath = f"c{c:03d}/img_{i:05d}.jpg"
                target = root / self.image_dir / impath if self.image_dir else root / impath
                target.parent.mkdir(parents=True, exist_ok=True)
                write(target, c)
                part = "train" if i % 4 < 2 else ("val" if i % 4 == 2 else "test")
                data[part].append([impath, c, spec.class_names[c]])
        (root / self.split_file).write_text(json.dumps(data), encoding="utf-8")


@dataclass(frozen=True)
class AircraftVariantReader(PartitionedReader):
    """FGVC-Aircraft as CoOp reads it: ``images/<id>.jpg`` plus ``images_variant_<part>.txt``.

    Each line of a partition file is ``<image id> <variant name>``; class ids are the
    spec's variant names (``/`` replaced by ``_``), class names the original variants.
    """

    partitions = ("train", "val", "test")

    def _scan(self, base: Path, spec: DatasetSpec, parts: Sequence[str]) -> dict[str, Listing]:
        """List ``parts`` per class, each in its file's order."""
        n = len(spec.class_ids)
        return {part: listing_of(self._rows(base, spec, part), n) for part in parts}

    def _rows(self, base: Path, spec: DatasetSpec, partition: str) -> Rows:
        """``images_variant_<partition>.txt`` rows in file order."""
        index = {name: i for i, name in enumerate(spec.class_names)}
        path = _require_file(spec, base / f"images_variant_{partition}.txt", "split file")
        rows = []
        for line in path.read_text(encoding="utf-8").splitlines():
            image_id, _, variant = line.strip().partition(" ")
            item = f"images/{image_id}.jpg"
            if variant in index and (base / item).is_file():
                rows.append((index[variant], item))
        return rows

    def write_synthetic(
        self, root: Path, spec: DatasetSpec, counts: Sequence[int], write: ImageWriter
    ) -> None:
        """Write images and the three partition files."""
        (root / "images").mkdir(parents=True, exist_ok=True)
        lines: dict[str, list[str]] = {p: [] for p in self.partitions}
        n = 0
        for c, count in enumerate(counts):
            for i in range(count):
                image_id = f"{n:07d}"
                write(root / "images" / f"{image_id}.jpg", c)
                part = self.partitions[i % 3]
                lines[part].append(f"{image_id} {spec.class_names[c]}")
                n += 1
        for part, rows in lines.items():
            (root / f"images_variant_{part}.txt").write_text(
                "\n".join(rows) + "\n", encoding="utf-8"
            )


@dataclass(frozen=True)
class CubOfficialReader(PartitionedReader):
    """CUB-200-2011 read through its official index files.

    Layout: ``images.txt``, ``image_class_labels.txt``, ``train_test_split.txt`` and
    ``images/<class folder>/<file>``. Partitions: ``train`` and ``test`` from the
    official split (no ``val``).
    """

    partitions = ("train", "test")

    def list_partitions(
        self, root: Path | None, spec: DatasetSpec, names: Sequence[str]
    ) -> dict[str, Listing]:
        """List several partitions (or ``all``) per class in ``images.txt`` order, in one pass.

        ``all`` keeps ``images.txt`` order rather than pooling train then test.
        """
        base = require_root(root, spec)
        tables = {}
        for name in ("images.txt", "image_class_labels.txt", "train_test_split.txt"):
            path = _require_file(spec, base / name)
            tables[name] = dict(
                line.split(maxsplit=1)
                for line in path.read_text(encoding="utf-8").splitlines()
                if line.strip()
            )
        splits = {"train": {"1"}, "test": {"0"}, "all": {"0", "1"}}
        wanted = {name: splits[name] for name in names}
        listings: dict[str, Listing] = {name: [[] for _ in spec.class_ids] for name in names}
        for image_id, rel in tables["images.txt"].items():
            split = tables["train_test_split.txt"][image_id].strip()
            targets = [name for name, values in wanted.items() if split in values]
            if targets:
                item = f"images/{rel.strip()}"
                if (base / item).is_file():
                    label = int(tables["image_class_labels.txt"][image_id]) - 1
                    for name in targets:
                        listings[name][label].append(item)
        return listings

    def write_synthetic(
        self, root: Path, spec: DatasetSpec, counts: Sequence[int], write: ImageWriter
    ) -> None:
        """Write images and the three official index files (every other image is train)."""
        images, labels, split = [], [], []
        n = 1
        for c, count in enumerate(counts):
            for i in range(count):
                rel = f"{spec.class_ids[c]}/img_{i:05d}.jpg"
                write(root / "images" / rel, c)
                images.append(f"{n} {rel}")
                labels.append(f"{n} {c + 1}")
                split.append(f"{n} {1 - i % 2}")
                n += 1
        for name, rows in (
            ("images.txt", images),
            ("image_class_labels.txt", labels),
            ("train_test_split.txt", split),
        ):
            (root / name).write_text("\n".join(rows) + "\n", encoding="utf-8")


@dataclass(frozen=True)
class MatListReader(PartitionedReader):
    """Stanford Dogs: ``train_list.mat`` / ``test_list.mat`` and ``Images/<folder>/<file>``.

    Each mat file has ``file_list`` (relative paths) and 1-based ``labels``.
    """

    partitions = ("train", "test")

    def _scan(self, base: Path, spec: DatasetSpec, parts: Sequence[str]) -> dict[str, Listing]:
        """List ``parts`` per class in mat-file order."""
        n = len(spec.class_ids)
        return {part: listing_of(self._rows(base, spec, part), n) for part in parts}

    def _rows(self, base: Path, spec: DatasetSpec, partition: str) -> Rows:
        """``<partition>_list.mat`` rows in file order."""
        import numpy as np
        from scipy.io import loadmat

        mat = loadmat(str(_require_file(spec, base / f"{partition}_list.mat")))
        rows = []
        for entry, label in zip(mat["file_list"].ravel(), mat["labels"].ravel(), strict=True):
            item = f"Images/{np.ravel(entry)[0]}"
            if (base / item).is_file():
                rows.append((int(label) - 1, item))
        return rows

    def write_synthetic(
        self, root: Path, spec: DatasetSpec, counts: Sequence[int], write: ImageWriter
    ) -> None:
        """Write images and both mat lists (every other image is train)."""
        import numpy as np
        from scipy.io import savemat

        lists: dict[str, tuple[list[str], list[int]]] = {p: ([], []) for p in self.partitions}
        for c, count in enumerate(counts):
            for i in range(count):
                rel = f"{spec.class_ids[c]}/img_{i:05d}.jpg"
                write(root / "Images" / rel, c)
                files, labels = lists[self.partitions[i % 2]]
                files.append(rel)
                labels.append(c + 1)
        for part, (files, labels) in lists.items():
            cells = np.empty((len(files), 1), dtype=object)
            for j, rel in enumerate(files):
                cells[j, 0] = np.array([rel])
            savemat(
                str(root / f"{part}_list.mat"),
                {"file_list": cells, "labels": np.array(labels)[:, None]},
            )


@dataclass(frozen=True)
class TrainTestFolderReader(PartitionedReader):
    """PlantDoc-style ``<root>/train/<class>/<img>`` and ``<root>/test/<class>/<img>``."""

    partitions = ("train", "test")

    def _scan(self, base: Path, spec: DatasetSpec, parts: Sequence[str]) -> dict[str, Listing]:
        """List ``parts`` per class, sorted file names."""
        return {
            part: [
                [f"{part}/{cid}/{name}" for name in _listdir_images(base / part / cid)]
                for cid in spec.class_ids
            ]
            for part in parts
        }

    def write_synthetic(
        self, root: Path, spec: DatasetSpec, counts: Sequence[int], write: ImageWriter
    ) -> None:
        """Write class folders under train/ and test/ (every third image is test)."""
        for c, count in enumerate(counts):
            for i in range(count):
                part = "test" if i % 3 == 2 else "train"
                write(root / part / spec.class_ids[c] / f"img_{i:05d}.jpg", c)
