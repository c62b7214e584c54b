"""Readers of layouts whose labels live in an annotation file (.mat, COCO json, csv)."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fewtrans_board.datasets.readers.base import FileReader
from fewtrans_board.datasets.readers.common import ImageWriter, require_file, require_root
from fewtrans_board.datasets.readers.metadata import (
    csv_rows,
    metadata_error,
    parse_value,
    read_json,
    warn_missing_images,
)

if TYPE_CHECKING:
    from fewtrans_board.api.dataset_spec import DatasetSpec


@dataclass(frozen=True)
class VggFlowerReader(FileReader):
    """Oxford 102 Flowers: ``imagelabels.mat`` plus ``jpg/image_{05d}.jpg``.

    Items of a class follow ``imagelabels.mat`` order (FewTrans/Meta-Dataset order).
    """

    def list_items(self, root: Path | None, spec: DatasetSpec) -> list[list[str]]:
        """Group image files by their 1-based label in ``imagelabels.mat``."""
        from scipy.io import loadmat

        base = require_root(root, spec)
        mat = require_file(spec, base / "imagelabels.mat")
        try:
            labels = loadmat(str(mat))["labels"].ravel()
        except (OSError, ValueError, KeyError) as exc:
            raise metadata_error(
                spec, mat, None, f"is not the official label file ({type(exc).__name__}: {exc})"
            ) from None
        listing: list[list[str]] = [[] for _ in spec.class_ids]
        missing = []
        for position, label in enumerate(labels, start=1):
            if not 1 <= int(label) <= len(spec.class_ids):
                raise metadata_error(
                    spec, mat, None, f"label {int(label)} of image {position} is not a class"
                )
            item = f"jpg/image_{position:05d}.jpg"
            if (base / item).is_file():
                listing[int(label) - 1].append(item)
            else:
                missing.append((f"image {position}", item))
        warn_missing_images(spec, mat, missing)
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
            path = require_file(spec, base / name, "annotation file")
            data = read_json(spec, path)
            try:
                files = {im["id"]: im["file_name"] for im in data["images"]}
                pairs = [(int(a["category_id"]), files[a["image_id"]]) for a in data["annotations"]]
            except (KeyError, TypeError, ValueError) as exc:
                raise metadata_error(
                    spec,
                    path,
                    None,
                    f"is not a COCO annotation file ({type(exc).__name__}: {exc}); it needs "
                    "'images' with id and file_name and 'annotations' with image_id and "
                    "category_id",
                ) from None
            missing = []
            for number, (category, item) in enumerate(pairs):
                position = index.get(category)
                if position is None:
                    continue
                if (base / item).is_file():
                    listing[position].append(item)
                else:
                    missing.append((f"annotation {number}", item))
            if missing:
                warn_missing_images(spec, path, missing)
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
class CsvRowsReader(FileReader):
    """A layout labelled by the rows of one CSV file (subclasses read the rows).

    Attributes:
        csv_path: the CSV, relative to the root.
    """

    csv_path: str = ""

    def _rows(self, base: Path, spec: DatasetSpec) -> Iterator[tuple[int, int, str]]:
        """``(line, class index, item)`` of every kept row, each value checked."""
        raise NotImplementedError

    def list_items(self, root: Path | None, spec: DatasetSpec) -> list[list[str]]:
        """The kept rows' items per class, in CSV order.

        Rows whose image file is missing are left out with a warning counting them
        (``datasets scan`` lists them and fails).
        """
        base = require_root(root, spec)
        listing: list[list[str]] = [[] for _ in spec.class_ids]
        missing = []
        for line, label, item in self._rows(base, spec):
            if (base / item).is_file():
                listing[label].append(item)
            else:
                missing.append((f"line {line}", item))
        warn_missing_images(spec, base / self.csv_path, missing)
        return listing


@dataclass(frozen=True)
class OneHotCsvReader(CsvRowsReader):
    """ISIC 2018 Task 3: a CSV with an image column and one-hot class columns.

    Attributes:
        csv_path: the ground-truth CSV, relative to the root.
        image_dir: folder of the images, relative to the root.
        suffix: image file suffix.
    """

    csv_path: str = "ISIC2018_Task3_Training_GroundTruth/ISIC2018_Task3_Training_GroundTruth.csv"
    image_dir: str = "ISIC2018_Task3_Training_Input"
    suffix: str = ".jpg"

    def _rows(self, base: Path, spec: DatasetSpec) -> Iterator[tuple[int, int, str]]:
        """``(line, class index, item)`` of every CSV row, each value checked."""
        path = require_file(spec, base / self.csv_path, "label file")
        for line, row in csv_rows(spec, path, ("image", *spec.class_ids)):
            scores = [parse_value(spec, path, line, cid, row[cid], float) for cid in spec.class_ids]
            if not row["image"].strip():
                raise metadata_error(spec, path, line, "column 'image' is empty")
            yield line, scores.index(max(scores)), f"{self.image_dir}/{row['image']}{self.suffix}"

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
class ChestXReader(CsvRowsReader):
    """ChestX-ray14 (BSCD-FSL): ``Data_Entry_2017.csv`` plus a flat ``images/`` folder.

    Only single-label rows whose label is one of the spec's classes are kept, as in
    BSCD-FSL ("No Finding" and multi-label rows are dropped). Items follow CSV order.
    """

    csv_path: str = "Data_Entry_2017.csv"
    image_dir: str = "images"

    def _rows(self, base: Path, spec: DatasetSpec) -> Iterator[tuple[int, int, str]]:
        """``(line, class index, item)`` of every kept (single-label, listed class) row."""
        path = require_file(spec, base / self.csv_path, "label file")
        index = {cid: i for i, cid in enumerate(spec.class_ids)}
        for line, row in csv_rows(spec, path, ("Image Index", "Finding Labels")):
            label = row["Finding Labels"]
            if label in index:
                if not row["Image Index"].strip():
                    raise metadata_error(spec, path, line, "column 'Image Index' is empty")
                yield line, index[label], f"{self.image_dir}/{row['Image Index']}"

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
