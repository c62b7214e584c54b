"""A labelled split of a dataset (train or test), streamed in batches under one transform."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from fewtrans_board.api.backbone import Preprocessing
from fewtrans_board.api.dataset_spec import DatasetSpec
from fewtrans_board.core.errors import FewtransError, UnknownNameError
from fewtrans_board.unlearning.sets import template_for

if TYPE_CHECKING:
    import numpy as np
    import torch

    from fewtrans_board.datasets.images import ImageStore
    from fewtrans_board.registry.lookup import Registry

PREPROCESSING = "fewtrans"
"""The transform of the ``clip-kshot`` protocol (what few-shot evaluation feeds the model)."""


@dataclass
class LabeledSplit:
    """Items of one partition with their class labels, class names and zero-shot template.

    Attributes:
        spec: the dataset.
        root: its local copy (``None`` for embedded datasets).
        partition: ``"train"``, ``"test"`` or ``"all"``.
        items: item ids, class by class in ``spec`` order.
        labels: class index of every item.
        preprocessing: the evaluation transform.
    """

    spec: DatasetSpec
    root: Path | None
    partition: str
    items: list[str]
    labels: list[int]
    preprocessing: Preprocessing
    _store: ImageStore | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        """The dataset's registry name."""
        return self.spec.name

    @property
    def class_names(self) -> list[str]:
        """Natural-language class names in label order."""
        return list(self.spec.class_names)

    @property
    def template(self) -> str:
        """The dataset's zero-shot template."""
        return template_for(self.spec.name)

    def fingerprint(self) -> str:
        """sha256 of the item list with labels (part of cache keys)."""
        text = "\n".join(
            f"{label}\t{item}" for item, label in zip(self.items, self.labels, strict=True)
        )
        return hashlib.sha256(text.encode()).hexdigest()

    def pixels(self, index: np.ndarray) -> torch.Tensor:
        """Normalised pixels of the items at ``index``."""
        from fewtrans_board.datasets.images import ImageStore

        if self._store is None:
            self._store = ImageStore(self.spec, self.root, self.preprocessing, max_bytes=1 << 30)
        return self._store.pixels([self.items[i] for i in index])

    def batches(
        self, batch_size: int, seed: int | None = None
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Yield ``(pixels, labels)`` batches; ``seed`` shuffles with ``RandomState(seed)``.

        Every batch has ``batch_size`` items except possibly the last.
        """
        import numpy as np
        import torch

        order = (
            np.arange(len(self.items))
            if seed is None
            else np.random.RandomState(seed).permutation(len(self.items))
        )
        labels = torch.as_tensor(self.labels)
        for start in range(0, len(order), batch_size):
            index = order[start : start + batch_size]
            yield self.pixels(index), labels[torch.as_tensor(index)]


def load_split(
    spec: DatasetSpec, root: Path | None, partition: str, image_size: int
) -> LabeledSplit:
    """List a partition of a local copy as a :class:`LabeledSplit`.

    Raises:
        FewtransError: an unknown partition or an empty listing (wrong ``root``).
    """
    if spec.partitions == ("all",):
        partition = "all"  # a dataset without splits: every item serves both roles
    listing = spec.list_items(root, partition)
    items = [item for per_class in listing for item in per_class]
    if not items:
        raise FewtransError(
            f"dataset {spec.name!r} ({partition} split) has no items under {root}; "
            f"expected layout: {spec.layout}"
        )
    labels = [c for c, per_class in enumerate(listing) for _ in per_class]
    return LabeledSplit(
        spec, root, partition, items, labels, Preprocessing.named(PREPROCESSING, image_size)
    )


def root_of(
    registry: Registry, dataset: str, data_dir: Path | None, roots: Mapping[str, Path]
) -> tuple[DatasetSpec, Path | None]:
    """The spec of ``dataset`` and where its local copy lives.

    Embedded datasets need no root; others use ``roots[dataset]`` or ``data_dir/dataset``.

    Raises:
        FewtransError: a non-embedded dataset without a root.
    """
    spec = registry.datasets.get(dataset).obj
    if spec.extra.get("embedded"):
        return spec, None
    if dataset in roots:
        return spec, Path(roots[dataset])
    if data_dir is not None:
        return spec, data_dir / dataset
    raise FewtransError(
        f"dataset {dataset!r} needs its local copy: pass --data-dir DIR (with DIR/{dataset}) "
        f"or --root {dataset}=PATH"
    )


def check_datasets(
    registry: Registry,
    named: Mapping[str, Sequence[str]],
    data_dir: Path | None,
    roots: Mapping[str, Path],
) -> None:
    """Fail before any work on a dataset or local copy that cannot serve.

    Args:
        registry: the installed datasets.
        named: the datasets a command reads, by the option that named them
            (``{"--forget": [...], "--retain": [...]}``).
        data_dir: ``--data-dir``, if given.
        roots: the ``--root DATASET=PATH`` pairs.

    Raises:
        FewtransError: an option naming no dataset or an unregistered one; a ``--root``
            for a dataset the command does not read, or for an embedded one; a local copy
            that is not a folder.
    """
    for option, names in named.items():
        if not names:
            raise FewtransError(f"{option} names no dataset; give one or more as A,B")
        for name in names:
            try:
                registry.datasets.get(name)
            except UnknownNameError as exc:
                raise FewtransError(f"{option}: {exc}") from None
    used = list(dict.fromkeys(n for names in named.values() for n in names))
    for name, path in roots.items():
        if name not in used:
            raise FewtransError(
                f"--root {name}={path}: this command reads only {', '.join(used)}; "
                "drop it or correct the dataset name"
            )
    for name in used:
        _, root = root_of(registry, name, data_dir, roots)
        if root is None and name in roots:
            raise FewtransError(
                f"--root {name}={roots[name]}: {name!r} is embedded in its package and needs "
                "no local copy; drop the option"
            )
        if root is not None and not root.is_dir():
            option = f"--root {name}=PATH" if name in roots else "--data-dir"
            raise FewtransError(
                f"the local copy of {name!r} at {root} is not a folder; correct {option}"
            )
