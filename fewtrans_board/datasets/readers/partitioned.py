"""Readers of copies with named train/val/test partitions (CoOp's split files and kin)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fewtrans_board.datasets.readers.base import PartitionedReader
from fewtrans_board.datasets.readers.common import (
    ImageWriter,
    Listing,
    Rows,
    listdir_images,
    listing_of,
    require_file,
    require_root,
)
from fewtrans_board.datasets.readers.metadata import (
    metadata_error,
    read_json,
    read_text,
    warn_missing_images,
)

if TYPE_CHECKING:
    from fewtrans_board.api.dataset_spec import DatasetSpec


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
        return {part: listing_of(self._json_rows(base, spec, data, part), n) for part in parts}

    def _rows(self, base: Path, spec: DatasetSpec, partition: str) -> Rows:
        """The json's rows of one partition, in file order."""
        return self._json_rows(base, spec, self._load(base, spec), partition)

    def _load(self, base: Path, spec: DatasetSpec) -> dict[str, list[list[object]]]:
        path = require_file(spec, base / self.split_file, "split file")
        data = read_json(spec, path)
        if not isinstance(data, dict):
            raise metadata_error(spec, path, None, "is not a JSON object of partitions")
        return data

    def _json_rows(
        self, base: Path, spec: DatasetSpec, data: dict[str, list[list[object]]], part: str
    ) -> Rows:
        path = base / self.split_file
        entries = data.get(part)
        if not isinstance(entries, list):
            raise metadata_error(
                spec, path, None, f"has no list {part!r} ([[image path, label, class name], ...])"
            )
        rows, missing = [], []
        for position, entry in enumerate(entries):
            if not (isinstance(entry, list) and len(entry) == 3):
                raise metadata_error(
                    spec,
                    path,
                    None,
                    f"{part}[{position}] is {json.dumps(entry)[:80]}, not [image path, label, "
                    "class name]",
                )
            impath, label, _ = entry
            try:
                index = int(str(label))
            except ValueError:
                index = -1
            if not 0 <= index < len(spec.class_ids):
                raise metadata_error(
                    spec, path, None, f"{part}[{position}] has label {label!r}, not a class index"
                )
            item = f"{self.image_dir}/{impath}" if self.image_dir else str(impath)
            if (base / item).is_file():
                rows.append((index, item))
            else:
                missing.append((f"{part}[{position}]", item))
        warn_missing_images(spec, path, missing)
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

    def _rows(self, base: Path, spec: DatasetSpec, partition: str) -> Rows:
        """``images_variant_<partition>.txt`` rows in file order."""
        index = {name: i for i, name in enumerate(spec.class_names)}
        path = require_file(spec, base / f"images_variant_{partition}.txt", "split file")
        rows, missing = [], []
        for number, line in enumerate(read_text(spec, path).splitlines(), start=1):
            if not line.strip():
                continue
            image_id, _, variant = line.strip().partition(" ")
            if variant not in index:  # a variant outside the spec's classes is not listed
                continue
            item = f"images/{image_id}.jpg"
            if (base / item).is_file():
                rows.append((index[variant], item))
            else:
                missing.append((f"line {number}", item))
        warn_missing_images(spec, path, missing)
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


def _id_table(spec: DatasetSpec, path: Path) -> dict[str, tuple[int, str]]:
    """``<id> <value>`` lines of an index file: ``{id: (line, value)}``."""
    table: dict[str, tuple[int, str]] = {}
    for number, line in enumerate(read_text(spec, path).splitlines(), start=1):
        if not line.strip():
            continue
        parts = line.split(maxsplit=1)
        if len(parts) != 2:
            raise metadata_error(spec, path, number, f"{line.strip()!r} is not '<id> <value>'")
        table[parts[0]] = (number, parts[1].strip())
    return table


def _entry(
    spec: DatasetSpec,
    base: Path,
    tables: dict[str, dict[str, tuple[int, str]]],
    name: str,
    image_id: str,
    line: int,
) -> str:
    """The value ``tables[name]`` holds for ``image_id`` (listed at images.txt ``line``)."""
    found = tables[name].get(image_id)
    if found is None:
        raise metadata_error(
            spec, base / "images.txt", line, f"image {image_id} has no line in {name}"
        )
    return found[1]


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
        tables = {
            name: _id_table(spec, require_file(spec, base / name))
            for name in ("images.txt", "image_class_labels.txt", "train_test_split.txt")
        }
        splits = {"train": {"1"}, "test": {"0"}, "all": {"0", "1"}}
        wanted = {name: splits[name] for name in names}
        listings: dict[str, Listing] = {name: [[] for _ in spec.class_ids] for name in names}
        missing = []
        for image_id, (line, rel) in tables["images.txt"].items():
            split = _entry(spec, base, tables, "train_test_split.txt", image_id, line)
            targets = [name for name, values in wanted.items() if split in values]
            if not targets:
                continue
            item = f"images/{rel}"
            if not (base / item).is_file():
                missing.append((f"line {line}", item))
                continue
            text = _entry(spec, base, tables, "image_class_labels.txt", image_id, line)
            label = int(text) - 1 if text.isdigit() else -1
            if not 0 <= label < len(spec.class_ids):
                raise metadata_error(
                    spec,
                    base / "image_class_labels.txt",
                    tables["image_class_labels.txt"][image_id][0],
                    f"label {text!r} of image {image_id} is not a class number",
                )
            for name in targets:
                listings[name][label].append(item)
        warn_missing_images(spec, base / "images.txt", missing)
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

    def _rows(self, base: Path, spec: DatasetSpec, partition: str) -> Rows:
        """``<partition>_list.mat`` rows in file order (a fault names the file and entry)."""
        import numpy as np
        from scipy.io import loadmat

        path = require_file(spec, base / f"{partition}_list.mat", "list file")
        try:
            mat = loadmat(str(path))
            files, labels = mat["file_list"].ravel(), mat["labels"].ravel()
        except (OSError, ValueError, TypeError, KeyError, NotImplementedError) as exc:
            raise metadata_error(
                spec,
                path,
                None,
                f"is not the official list file ({type(exc).__name__}: {exc}); it needs "
                "'file_list' (image paths under Images/) and 'labels' (1-based)",
            ) from None
        if len(files) != len(labels):
            raise metadata_error(
                spec, path, None, f"has {len(files)} files but {len(labels)} labels"
            )
        rows, missing = [], []
        for position, (entry, label) in enumerate(zip(files, labels, strict=True), start=1):
            cell = np.ravel(entry)
            number = int(label) if np.issubdtype(np.asarray(label).dtype, np.integer) else 0
            if len(cell) != 1 or not isinstance(cell[0], str):
                raise metadata_error(
                    spec, path, None, f"entry {position} of file_list is not an image path"
                )
            if not 1 <= number <= len(spec.class_ids):
                raise metadata_error(
                    spec,
                    path,
                    None,
                    f"entry {position} has label {label!r}, not a class 1-{len(spec.class_ids)}",
                )
            item = f"Images/{cell[0]}"
            if (base / item).is_file():
                rows.append((number - 1, item))
            else:
                missing.append((f"entry {position}", item))
        warn_missing_images(spec, path, missing)
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
                [f"{part}/{cid}/{name}" for name in listdir_images(base / part / cid)]
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
