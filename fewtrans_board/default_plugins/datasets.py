"""Built-in datasets: FewTrans, BSCD-FSL, few-shot CLIP, and the embedded digits."""

from __future__ import annotations

from collections.abc import Callable

from fewtrans_board.datasets.spec import DatasetSpec
from fewtrans_board.hookspecs import hookimpl


@hookimpl
def register_datasets(register: Callable[[DatasetSpec], None]) -> None:
    """Register every built-in dataset spec."""
    from fewtrans_board.datasets.builtin_bscd import bscd_datasets, miniimagenet
    from fewtrans_board.datasets.builtin_clip import clip_datasets
    from fewtrans_board.datasets.builtin_fewtrans import fewtrans_datasets
    from fewtrans_board.datasets.digits import DIGITS

    for spec in (DIGITS, *fewtrans_datasets(), *bscd_datasets(), miniimagenet(), *clip_datasets()):
        register(spec)
