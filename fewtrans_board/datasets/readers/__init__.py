"""Readers of local dataset copies, one per documented on-disk layout.

Every reader lists item ids (POSIX paths relative to the root) per class of the spec's
explicit class list, in the dataset's canonical order, and can write a tiny synthetic copy
of its layout for tests (:meth:`write_synthetic`). Class folders are looked up by name;
the class order never comes from a directory listing.

Modules: :mod:`.common` (shared helpers and types), :mod:`.base` (file, partitioned and
folder-per-class readers), :mod:`.annotated` (labels in an annotation file) and
:mod:`.partitioned` (copies with named train/val/test partitions).
"""

from fewtrans_board.datasets.readers.annotated import (
    ChestXReader,
    CocoJsonReader,
    OneHotCsvReader,
    VggFlowerReader,
    category_number,
)
from fewtrans_board.datasets.readers.base import FileReader, FolderReader, PartitionedReader
from fewtrans_board.datasets.readers.common import (
    IMAGE_SUFFIXES,
    FileNumbering,
    ImageWriter,
    Listing,
    Rows,
    check_image,
    first_appearance,
    listing_of,
    open_rgb,
    require_root,
)
from fewtrans_board.datasets.readers.partitioned import (
    AircraftVariantReader,
    CubOfficialReader,
    MatListReader,
    SplitJsonReader,
    TrainTestFolderReader,
)

__all__ = [
    "IMAGE_SUFFIXES",
    "AircraftVariantReader",
    "ChestXReader",
    "CocoJsonReader",
    "CubOfficialReader",
    "FileNumbering",
    "FileReader",
    "FolderReader",
    "ImageWriter",
    "Listing",
    "MatListReader",
    "OneHotCsvReader",
    "PartitionedReader",
    "Rows",
    "SplitJsonReader",
    "TrainTestFolderReader",
    "VggFlowerReader",
    "category_number",
    "check_image",
    "first_appearance",
    "listing_of",
    "open_rgb",
    "require_root",
]
