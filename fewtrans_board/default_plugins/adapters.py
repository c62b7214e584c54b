"""Built-in adapters: baselines, vision PEFT, CLIP prompt learners and CLIP tuning methods."""

from __future__ import annotations

from collections.abc import Callable

from fewtrans_board.adapters.base import Adapter
from fewtrans_board.hookspecs import hookimpl


@hookimpl
def register_adapters(register: Callable[[type[Adapter]], None]) -> None:
    """Register the baselines: centroid, heads, fine-tuning variants and zero-shot CLIP."""
    from fewtrans_board.adapters.builtin.clip_prompts import ADAPTERS as CLIP_PROMPTS
    from fewtrans_board.adapters.builtin.clip_prompts import INDUCTIVE_PAPER_ADAPTERS
    from fewtrans_board.adapters.builtin.clip_tuning import ADAPTERS as CLIP_TUNING
    from fewtrans_board.adapters.builtin.finetune import (
        FinetuneAdapter,
        FinetuneLastKAdapter,
        TransductiveFinetuneAdapter,
    )
    from fewtrans_board.adapters.builtin.heads import CosineClassifierAdapter, LinearProbeAdapter
    from fewtrans_board.adapters.builtin.multi_model import AllEmbeddingsAdapter, ImsfAdapter
    from fewtrans_board.adapters.builtin.prototypes import MeanCentroidAdapter
    from fewtrans_board.adapters.builtin.random_embedding import RandomEmbeddingAdapter
    from fewtrans_board.adapters.builtin.vision_peft import ADAPTERS as VISION_PEFT
    from fewtrans_board.adapters.builtin.zeroshot import ZeroShotClipAdapter
    from fewtrans_board.meta.adapters import ADAPTERS as META_LEARNERS

    builtins: tuple[type[Adapter], ...] = (
        MeanCentroidAdapter,
        CosineClassifierAdapter,
        LinearProbeAdapter,
        FinetuneAdapter,
        FinetuneLastKAdapter,
        TransductiveFinetuneAdapter,
        ZeroShotClipAdapter,
        RandomEmbeddingAdapter,
        AllEmbeddingsAdapter,
        ImsfAdapter,
        *VISION_PEFT,
        *CLIP_PROMPTS,
        *CLIP_TUNING,
        *INDUCTIVE_PAPER_ADAPTERS,
        *META_LEARNERS,
    )
    for adapter in builtins:
        register(adapter)
