"""Built-in datasets: FewTrans, BSCD-FSL (targets and sources), few-shot CLIP, the digits."""

from __future__ import annotations

from collections.abc import Callable

from fewtrans_board.api.dataset_spec import DatasetSpec
from fewtrans_board.api.hookspecs import hookimpl


@hookimpl
def register_datasets(register: Callable[[DatasetSpec], None]) -> None:
    """Register every built-in dataset spec."""
    from fewtrans_board.datasets.builtin_bscd import bscd_datasets, miniimagenet
    from fewtrans_board.datasets.builtin_clip import clip_datasets
    from fewtrans_board.datasets.builtin_fewtrans import fewtrans_datasets
    from fewtrans_board.datasets.builtin_sources import source_datasets
    from fewtrans_board.datasets.digits import DIGITS
    from fewtrans_board.datasets.digits_subsets import DIGITS_0_4, DIGITS_5_9

    embedded = (DIGITS, DIGITS_0_4, DIGITS_5_9)
    local = (
        *fewtrans_datasets(),
        *bscd_datasets(),
        miniimagenet(),
        *source_datasets(),
        *clip_datasets(),
    )
    for spec in (*embedded, *local):
        register(spec)
