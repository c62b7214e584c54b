"""``DatasetSpec``: everything fewtrans-board knows about a dataset, without touching disk.

A spec fixes the class list explicitly (never derived from directory listings, whose order
and splitting of names containing ``/`` differ between machines), the natural-language
class names used by CLIP methods, the base/novel split, and a reader that lists the items
of a user's local copy laid out as documented in ``layout``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from fewtrans_board.core.errors import FewtransError, RegistrationError

if TYPE_CHECKING:
    from PIL import Image


@runtime_checkable
class DatasetReader(Protocol):
    """Reads a user's local copy of a dataset laid out as its spec documents.

    Item ids are POSIX paths relative to the dataset root (or opaque ids for embedded
    datasets); they are what manifests store.
    """

    def list_items(self, root: Path | None, spec: DatasetSpec) -> list[list[str]]:
        """Return, for each class of ``spec.class_ids`` in order, its item ids.

        Items of a class are in the dataset's canonical order (sorted paths unless the
        dataset defines another order). Missing classes yield empty lists; the caller
        decides whether that is an error.
        """
        ...

    def load_image(self, root: Path | None, item: str) -> Image.Image:
        """Open one item as an RGB PIL image."""
        ...


@dataclass(frozen=True)
class ClassSplit:
    """Base/novel partition of a dataset's classes, as indices into ``class_ids``.

    Attributes:
        base: indices of the evaluation ("base") classes in their protocol order. For
            FewTrans datasets this is the order of ``RandomState(22).choice``, which the
            episode sampler depends on.
        novel: indices of the held-back classes (base-to-novel experiments), sorted.
    """

    base: tuple[int, ...]
    novel: tuple[int, ...]

    def check(self, n_classes: int) -> None:
        """Raise if the split is not a partition of ``range(n_classes)``."""
        everything = list(self.base) + list(self.novel)
        if sorted(everything) != list(range(n_classes)):
            raise RegistrationError(
                f"class split is not a partition of {n_classes} classes "
                f"({len(self.base)} base + {len(self.novel)} novel, duplicates or gaps)"
            )


@dataclass(frozen=True)
class DatasetSpec:
    """Metadata and reader of one dataset.

    Attributes:
        name: registry name, e.g. ``"dtd"`` or ``"bscd-isic"``.
        title: human title, e.g. ``"Describable Textures (DTD)"``.
        domain: short domain label (``"natural"``, ``"texture"``, ``"remote-sensing"`` ...).
        class_ids: on-disk class keys in canonical order (folder names, label ids).
        class_names: natural-language names, same order and length as ``class_ids``.
        split: base/novel split over ``class_ids``.
        reader: lists items of a local copy and opens images.
        layout: the documented on-disk layout under ``--root``.
        license: the dataset's license terms, in short.
        source_url: where to obtain the data.
        download: how to obtain and prepare the data.
        benchmarks: benchmark families that use it (``"fewtrans"``, ``"bscd"``, ``"clip"``).
        citation: the paper to cite.
        description: one paragraph for listings and the site.
        min_items_per_class: smallest class size a correct copy has (``check`` uses it).
        expected_items: total item count of a complete copy, if known.
        extra: dataset-specific metadata (e.g. WordNet ids), JSON-serialisable.
    """

    name: str
    title: str
    domain: str
    class_ids: tuple[str, ...]
    class_names: tuple[str, ...]
    split: ClassSplit
    reader: DatasetReader
    layout: str
    license: str
    source_url: str
    download: str
    benchmarks: tuple[str, ...] = ()
    citation: str = ""
    description: str = ""
    min_items_per_class: int = 1
    expected_items: int | None = None
    extra: Mapping[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if len(self.class_ids) != len(self.class_names):
            raise RegistrationError(
                f"dataset {self.name!r}: {len(self.class_ids)} class ids but "
                f"{len(self.class_names)} class names"
            )
        if len(set(self.class_ids)) != len(self.class_ids):
            raise RegistrationError(f"dataset {self.name!r}: duplicate class ids")
        self.split.check(len(self.class_ids))

    @property
    def num_classes(self) -> int:
        """Number of classes in the full dataset."""
        return len(self.class_ids)

    def classes_of(self, part: str) -> tuple[int, ...]:
        """Return class indices of ``"base"``, ``"novel"`` or ``"all"`` in protocol order."""
        if part == "base":
            return self.split.base
        if part == "novel":
            return self.split.novel
        if part == "all":
            return tuple(range(self.num_classes))
        raise ValueError(f"unknown class split part {part!r}; use base, novel or all")

    def names_of(self, indices: Sequence[int]) -> list[str]:
        """Return natural-language names of the given class indices."""
        return [self.class_names[i] for i in indices]

    @property
    def partitions(self) -> tuple[str, ...]:
        """Partitions the reader distinguishes (``("all",)`` or ``("train", "val", "test")``)."""
        return tuple(getattr(self.reader, "partitions", ("all",)))

    def list_items(self, root: Path | None, partition: str = "all") -> list[list[str]]:
        """List item ids per class (``class_ids`` order) of a local copy.

        Args:
            root: the local copy (``None`` for embedded datasets).
            partition: ``"all"`` or one of :attr:`partitions`.

        Raises:
            FewtransError: the root is missing or lacks required files.
        """
        if partition == "all":
            return self.reader.list_items(root, self)
        self._check_partition(partition)
        return self.reader.list_partition(root, self, partition)  # type: ignore[attr-defined,no-any-return]

    def list_partitions(
        self, root: Path | None, partitions: Sequence[str]
    ) -> dict[str, list[list[str]]]:
        """List several partitions, reading the copy once where the reader can.

        Each listing equals what :meth:`list_items` returns for that partition.

        Args:
            root: the local copy (``None`` for embedded datasets).
            partitions: ``"all"`` and/or names from :attr:`partitions`.

        Raises:
            FewtransError: an unknown partition, or the root is missing or lacks files.
        """
        for name in partitions:
            if name != "all":
                self._check_partition(name)
        many = getattr(self.reader, "list_partitions", None)
        if many is None:
            return {name: self.list_items(root, name) for name in dict.fromkeys(partitions)}
        return many(root, self, partitions)  # type: ignore[no-any-return]

    def class_order(self, root: Path | None, partition: str) -> tuple[int, ...]:
        """Class indices in the order each first appears in a partition's index file.

        CoOp's few-shot sampling (Dassl) walks classes in this order; readers without an
        index file (one folder per class, embedded data) give label order.

        Args:
            root: the local copy.
            partition: one of :attr:`partitions`.

        Raises:
            FewtransError: an unknown partition, or the root is missing or lacks files.
        """
        self._check_partition(partition)
        order = getattr(self.reader, "class_order", None)
        if order is None:
            return tuple(range(self.num_classes))
        return tuple(order(root, self, partition))

    def _check_partition(self, partition: str) -> None:
        if partition not in self.partitions:
            raise FewtransError(
                f"dataset {self.name!r} has no partition {partition!r}; "
                f"it has {', '.join(self.partitions)}"
            )

    def summary(self) -> dict[str, object]:
        """Return a JSON-friendly summary for listings."""
        return {
            "name": self.name,
            "title": self.title,
            "domain": self.domain,
            "classes": self.num_classes,
            "base": len(self.split.base),
            "novel": len(self.split.novel),
            "benchmarks": list(self.benchmarks),
            "license": self.license,
            "source_url": self.source_url,
            "layout": self.layout,
            "reader": type(self.reader).__name__,
        }
