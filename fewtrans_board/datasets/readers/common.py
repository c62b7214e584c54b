"""What every reader shares: image suffixes, listing types, root and file checks."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fewtrans_board.core.errors import FewtransError

if TYPE_CHECKING:
    from PIL import Image

    from fewtrans_board.api.dataset_spec import DatasetSpec

IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp"})

ImageWriter = Callable[[Path, int], None]
"""``write(path, class_index)`` creates one small image file (used by synthetic copies)."""

Listing = list[list[str]]
"""Item ids per class, in ``spec.class_ids`` order."""

Rows = list[tuple[int, str]]
"""``(class index, item id)`` pairs in the order a partition's index file lists them."""


@dataclass(frozen=True)
class FileNumbering:
    """File names ``<prefix>_<number><suffix>`` numbered 1, 2, ... without gaps per class.

    An official copy named this way (Caltech-256: ``001.ak47/001_0001.jpg`` ...) tells which
    files a damaged copy lacks: every number below a class's largest one must be there.

    Attributes:
        prefix: the file-name prefix of a class id (Caltech-256: ``"001.ak47"`` -> ``"001"``).
        width: digits of the zero-padded number.
        suffix: the file suffix, e.g. ``".jpg"``.
    """

    prefix: Callable[[str], str]
    width: int
    suffix: str

    def name(self, class_id: str, number: int) -> str:
        """The file name of a class's ``number``-th file."""
        return f"{self.prefix(class_id)}_{number:0{self.width}d}{self.suffix}"

    def number(self, class_id: str, file_name: str) -> int | None:
        """The number in a file name of the class, or ``None`` for a name outside the scheme."""
        head = f"{self.prefix(class_id)}_"
        digits = file_name[len(head) : len(file_name) - len(self.suffix)]
        if (
            file_name.startswith(head)
            and file_name.endswith(self.suffix)
            and len(digits) == self.width
            and digits.isdigit()
        ):
            return int(digits)
        return None

    def gaps(self, class_id: str, file_names: Iterable[str]) -> list[str]:
        """File names missing below the largest number present.

        A missing last file leaves no gap; it shows in the class's count only.
        """
        numbers = {n for name in file_names if (n := self.number(class_id, name)) is not None}
        top = max(numbers, default=0)
        return [self.name(class_id, n) for n in range(1, top) if n not in numbers]


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
    """Decode-check an image file: every pixel decoded, none converted.

    ``Image.verify`` alone passes a truncated JPEG (it reads the headers only), so the
    pixels are decoded too; a truncated file then fails instead of being padded grey.

    Args:
        path: the image file.

    Raises:
        FewtransError: the file is missing or cannot be decoded; the message names it.
    """
    from PIL import Image

    try:
        with Image.open(path) as image:
            image.load()
    except FileNotFoundError:
        raise FewtransError(f"image file {path} does not exist") from None
    # verify() reports corrupt data with assorted exception types, not only OSError.
    except Exception as exc:
        raise FewtransError(f"cannot read image {path}: {exc}") from exc


def require_file(spec: DatasetSpec, path: Path, label: str = "") -> Path:
    """Return ``path`` if it is a file, else raise naming the dataset and the missing file."""
    if not path.is_file():
        what = f"{label} {path}" if label else str(path)
        raise FewtransError(f"dataset {spec.name!r}: missing {what}")
    return path


def listdir_images(directory: Path) -> list[str]:
    """Image file names directly in ``directory`` (sorted; none if it is missing)."""
    if not directory.is_dir():
        return []
    with os.scandir(directory) as entries:
        names = [
            e.name
            for e in entries
            if e.is_file() and os.path.splitext(e.name)[1].lower() in IMAGE_SUFFIXES
        ]
    return sorted(names)
