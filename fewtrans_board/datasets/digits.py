"""The embedded ``digits`` dataset: scikit-learn's bundled 8x8 handwritten digits.

It works offline and powers the demo. Classes 0-4 are *source* classes, reserved for
pretraining the demo backbone; classes 5-9 are the *evaluation* classes the episodes
draw from (``split.base``), so the demo transfers to classes the backbone never saw.
"""

from __future__ import annotations

import importlib.util
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from fewtrans_board.api.dataset_spec import ClassSplit, DatasetSpec
from fewtrans_board.core.errors import FewtransError

if TYPE_CHECKING:
    from PIL import Image

SOURCE_CLASSES = (0, 1, 2, 3, 4)
EVALUATION_CLASSES = (5, 6, 7, 8, 9)
NAMES = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")


def _sklearn_digits() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's digits as ``load_digits`` returns them: images in 0..16, labels.

    Read from the CSV scikit-learn ships (``sklearn/datasets/data/digits.csv.gz``, 64 pixels
    then the label per row) without importing scikit-learn, which costs about a second in
    every process that lists or decodes digits; ``load_digits`` where that file is absent.
    """
    spec = importlib.util.find_spec("sklearn")
    folders = list(spec.submodule_search_locations or []) if spec else []
    shipped = [Path(f) / "datasets" / "data" / "digits.csv.gz" for f in folders]
    if shipped and shipped[0].is_file():
        data = np.loadtxt(shipped[0], delimiter=",")
        return data[:, :-1].reshape(-1, 8, 8), data[:, -1].astype(np.int64)
    from sklearn.datasets import load_digits

    bunch = load_digits()
    return bunch.images, bunch.target


@lru_cache(maxsize=1)
def digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """Return ``(images [1797, 8, 8] uint8 in 0..255, labels [1797])`` from scikit-learn."""
    pixels, labels = _sklearn_digits()
    images = np.clip(np.rint(pixels * (255.0 / 16.0)), 0, 255).astype(np.uint8)
    return images, labels.astype(np.int64)


def item_id(index: int) -> str:
    """Item id of the ``index``-th digit (a virtual relative path)."""
    return f"digits/{index:04d}.png"


def item_index(item: str) -> int:
    """Inverse of :func:`item_id`."""
    try:
        return int(item.removeprefix("digits/").removesuffix(".png"))
    except ValueError:
        raise FewtransError(f"{item!r} is not a digits item id") from None


class DigitsReader:
    """Reader of the embedded digits; ``root`` is ignored."""

    def list_items(self, root: Path | None, spec: DatasetSpec) -> list[list[str]]:
        """List item ids per class in index order."""
        _, labels = digits_arrays()
        return [
            [item_id(int(i)) for i in np.flatnonzero(labels == int(cid))] for cid in spec.class_ids
        ]

    def load_image(self, root: Path | None, item: str) -> Image.Image:
        """Return the 8x8 digit as an RGB image (white strokes on black)."""
        from PIL import Image

        images, _ = digits_arrays()
        index = item_index(item)
        if not 0 <= index < len(images):
            raise FewtransError(f"digits item {item!r} is out of range")
        return Image.fromarray(images[index], mode="L").convert("RGB")


DIGITS = DatasetSpec(
    name="digits",
    title="Handwritten digits (scikit-learn, UCI ML optical recognition)",
    domain="handwriting",
    class_ids=tuple(str(i) for i in range(10)),
    class_names=NAMES,
    split=ClassSplit(base=EVALUATION_CLASSES, novel=SOURCE_CLASSES),
    reader=DigitsReader(),
    layout="Embedded: bundled with scikit-learn (sklearn.datasets.load_digits); no --root needed.",
    license="CC BY 4.0 (UCI Machine Learning Repository)",
    source_url="https://archive.ics.uci.edu/dataset/80/optical+recognition+of+handwritten+digits",
    download="Nothing to download: installed with scikit-learn.",
    benchmarks=("demo",),
    citation="Alpaydin & Kaynak, Optical Recognition of Handwritten Digits, UCI 1998",
    description=(
        "1,797 8x8 grey-scale digits. Classes 0-4 pretrain the demo backbone; episodes draw "
        "from classes 5-9 (split.base), never seen in pretraining."
    ),
    min_items_per_class=170,
    expected_items=1797,
    extra={"embedded": True, "source_classes": list(SOURCE_CLASSES)},
)
