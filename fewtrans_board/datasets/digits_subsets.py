"""Class subsets of the embedded digits with a fixed train/test split (the inductive miniature).

The inductive-CLIP benchmark unlearns a *target dataset* while keeping *retain datasets*,
each with a train split (unlearning importances, few-shot support) and a test split
(zero-shot accuracy, few-shot queries). On the embedded digits the target is
``digits-5-9`` and the retain set ``digits-0-4``: two embedded datasets whose items are the
``digits`` items of those classes (same item ids), split per class by position in index
order: even positions train, odd positions test.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from fewtrans_board.api.dataset_spec import ClassSplit, DatasetSpec
from fewtrans_board.core.errors import FewtransError
from fewtrans_board.datasets.digits import DIGITS, NAMES

if TYPE_CHECKING:
    from PIL import Image

PARTITIONS = ("train", "test")


class DigitsSubsetReader:
    """Reads the digits of some classes, with a train/test split; ``root`` is ignored.

    Args:
        digits: the digit classes (``0..9``) of the subset, in label order.
    """

    partitions = PARTITIONS

    def __init__(self, digits: Sequence[int]) -> None:
        self.digits = tuple(digits)

    def _per_class(self) -> list[list[str]]:
        listing = DIGITS.list_items(None)
        return [listing[d] for d in self.digits]

    def list_items(self, root: Path | None, spec: DatasetSpec) -> list[list[str]]:
        """All items per class, in index order."""
        return self._per_class()

    def list_partition(
        self, root: Path | None, spec: DatasetSpec, partition: str
    ) -> list[list[str]]:
        """Items per class of ``"train"`` (even positions) or ``"test"`` (odd positions)."""
        if partition not in PARTITIONS:
            raise FewtransError(f"{spec.name} has no partition {partition!r}; use train or test")
        offset = PARTITIONS.index(partition)
        return [items[offset::2] for items in self._per_class()]

    def load_image(self, root: Path | None, item: str) -> Image.Image:
        """The digit image (as the ``digits`` reader returns it)."""
        return DIGITS.reader.load_image(None, item)


def digits_subset(digits: Sequence[int], role: str) -> DatasetSpec:
    """The embedded dataset ``digits-<first>-<last>`` of the given digit classes.

    Args:
        digits: consecutive digit classes, e.g. ``range(5, 10)``.
        role: one sentence on its role in the miniature, for listings.
    """
    digits = tuple(digits)
    name = f"digits-{digits[0]}-{digits[-1]}"
    return DatasetSpec(
        name=name,
        title=f"Handwritten digits {digits[0]}-{digits[-1]} (train/test halves)",
        domain="handwriting",
        class_ids=tuple(str(d) for d in digits),
        class_names=tuple(NAMES[d] for d in digits),
        split=ClassSplit(base=tuple(range(len(digits))), novel=()),
        reader=DigitsSubsetReader(digits),
        layout="Embedded: the digits items of these classes; no --root needed.",
        license=DIGITS.license,
        source_url=DIGITS.source_url,
        download=DIGITS.download,
        benchmarks=("demo-inductive",),
        citation=DIGITS.citation,
        description=(
            f"The digits {digits[0]}-{digits[-1]} of the embedded digits; per class, items at "
            f"even positions (index order) form the train split, odd positions the test split. {role}"
        ),
        min_items_per_class=170,
        extra={"embedded": True, "digits": list(digits)},
    )


DIGITS_0_4 = digits_subset(range(5), "The retain set of the inductive miniature.")
DIGITS_5_9 = digits_subset(range(5, 10), "The forget (target) set of the inductive miniature.")
