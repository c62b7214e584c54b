"""Write CIFAR-100's official python batches as PNG folders (the layout ``cifar100`` reads).

``python -m fewtrans_board.datasets.cifar SOURCE ROOT --batch train`` reads
``SOURCE/train`` and ``SOURCE/meta`` (the extracted ``cifar-100-python`` folder) and writes
``ROOT/<fine label>/<file name>.png``, the layout FewTrans's ``prepare_datasets.py`` writes
for the test batch. The pickles are read with an unpickler that builds only plain
containers and numpy arrays, so a tampered file cannot run code.
"""

from __future__ import annotations

import argparse
import pickle
from pathlib import Path
from typing import Any

from fewtrans_board.core.errors import FewtransError

BATCHES = ("train", "test")
ALLOWED_GLOBALS = frozenset(
    {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("_codecs", "encode"),
    }
)
"""What the official batches pickle: numpy arrays (and, from Python 2, ``encode``)."""


class _BatchUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in ALLOWED_GLOBALS:
            raise pickle.UnpicklingError(f"refusing {module}.{name}")
        return super().find_class(module, name)


def read_batch(path: Path) -> dict[str, Any]:
    """One official batch (``train``, ``test`` or ``meta``) with ``str`` keys.

    Raises:
        FewtransError: the file is missing, is not a CIFAR batch, or pickles anything
            beyond containers and numpy arrays.
    """
    if not path.is_file():
        raise FewtransError(f"CIFAR batch {path} does not exist")
    try:
        with path.open("rb") as handle:
            data = _BatchUnpickler(handle, encoding="bytes").load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError) as exc:
        raise FewtransError(f"cannot read CIFAR batch {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise FewtransError(f"CIFAR batch {path} is not a dict")
    return {k.decode() if isinstance(k, bytes) else str(k): v for k, v in data.items()}


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def write_cifar_folders(
    source: Path, root: Path, batch: str = "train", size: int | None = None
) -> int:
    """Write one batch of the official CIFAR-100 python copy as PNGs per fine label.

    Args:
        source: the extracted ``cifar-100-python`` folder (``train``, ``test``, ``meta``).
        root: where the class folders go (created).
        batch: ``"train"`` or ``"test"``.
        size: resize each 32 px image to ``size`` px with LANCZOS (FewTrans: 84); ``None``
            keeps the original pixels.

    Returns:
        The number of images written.

    Raises:
        FewtransError: an unknown batch, or a missing or malformed batch file.
    """
    import numpy as np
    from PIL import Image

    if batch not in BATCHES:
        raise FewtransError(f"unknown CIFAR batch {batch!r}; use {' or '.join(BATCHES)}")
    names = [_text(n) for n in read_batch(source / "meta").get("fine_label_names", [])]
    data = read_batch(source / batch)
    try:
        pixels = np.asarray(data["data"], dtype=np.uint8).reshape(-1, 3, 32, 32)
        labels = [int(x) for x in data["fine_labels"]]
        files = [_text(f) for f in data["filenames"]]
    except (KeyError, ValueError) as exc:
        raise FewtransError(f"CIFAR batch {source / batch} is malformed: {exc}") from exc
    if not (len(pixels) == len(labels) == len(files)) or max(labels, default=0) >= len(names):
        raise FewtransError(f"CIFAR batch {source / batch}: data, labels and names disagree")
    for image, label, file_name in zip(pixels, labels, files, strict=True):
        picture = Image.fromarray(image.transpose(1, 2, 0), mode="RGB")
        if size is not None:
            picture = picture.resize((size, size), resample=Image.Resampling.LANCZOS)
        folder = root / names[label]
        folder.mkdir(parents=True, exist_ok=True)
        picture.save(folder / Path(file_name).name)
    return len(files)


def main(argv: list[str] | None = None) -> None:
    """Command-line entry: ``python -m fewtrans_board.datasets.cifar SOURCE ROOT``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path, help="the extracted cifar-100-python folder")
    parser.add_argument("root", type=Path, help="output folder (--root of the dataset)")
    parser.add_argument("--batch", choices=BATCHES, default="train")
    parser.add_argument("--size", type=int, default=None, help="resize to SIZE px (LANCZOS)")
    args = parser.parse_args(argv)
    try:
        count = write_cifar_folders(args.source, args.root, args.batch, args.size)
    except FewtransError as exc:
        parser.exit(1, f"error: {exc}\n")
    print(f"wrote {count} images under {args.root}")


if __name__ == "__main__":
    main()
