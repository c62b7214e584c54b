"""Write tiny synthetic copies of any built-in dataset in its documented layout (tests)."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from fewtrans_board.api.dataset_spec import DatasetSpec
from fewtrans_board.core.errors import FewtransError


@functools.lru_cache(maxsize=4096)
def class_colour(class_index: int) -> tuple[int, int, int]:
    """A distinct, deterministic RGB colour per class.

    Cached: seeding a generator for every image took half the time of writing a copy.
    """
    rng = np.random.RandomState(class_index + 1)
    return tuple(int(v) for v in rng.randint(0, 256, size=3))  # type: ignore[return-value]


def make_image_writer(image_size: int = 8, seed: int = 0):  # type: ignore[no-untyped-def]
    """Return ``write(path, class_index)`` saving a small noisy image of the class colour."""
    from PIL import Image

    rng = np.random.RandomState(seed)

    def write(path: Path, class_index: int) -> None:
        base = np.array(class_colour(class_index), dtype=np.int16)
        noise = rng.randint(-40, 41, size=(image_size, image_size, 3))
        pixels = np.clip(base + noise, 0, 255).astype(np.uint8)
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(pixels, mode="RGB").save(path)

    return write


def write_synthetic_copy(
    spec: DatasetSpec,
    root: Path,
    per_class: int | Sequence[int] = 6,
    *,
    image_size: int = 8,
    seed: int = 0,
) -> list[int]:
    """Create a tiny copy of ``spec`` under ``root`` in the spec's documented layout.

    Args:
        spec: a built-in (or plugin) dataset whose reader implements ``write_synthetic``.
        root: target folder (created).
        per_class: images per class: one number, or one per class.
        image_size: side of each image in pixels.
        seed: noise seed.

    Returns:
        The number of images written per class.
    """
    writer = getattr(spec.reader, "write_synthetic", None)
    if writer is None:
        raise FewtransError(f"dataset {spec.name!r}: its reader cannot write synthetic copies")
    counts = (
        [int(per_class)] * spec.num_classes
        if isinstance(per_class, int)
        else [int(c) for c in per_class]
    )
    if len(counts) != spec.num_classes:
        raise FewtransError(
            f"per_class has {len(counts)} entries; {spec.name} has {spec.num_classes} classes"
        )
    root.mkdir(parents=True, exist_ok=True)
    writer(root, spec, counts, make_image_writer(image_size, seed))
    return counts
