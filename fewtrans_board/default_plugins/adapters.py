"""Built-in adapters: baselines, vision PEFT, CLIP prompt learners and CLIP tuning methods."""

from __future__ import annotations

from collections.abc import Callable

from fewtrans_board.api.adapter import Adapter
from fewtrans_board.api.hookspecs import hookimpl


@hookimpl
def register_adapters(register: Callable[[type[Adapter]], None]) -> None:
    """Register the baselines: centroid, heads, fine-tuning variants and zero-shot CLIP."""
    from fewtrans_board.blocks.finetune import (
        FinetuneAdapter,
        FinetuneLastKAdapter,
        TransductiveFinetuneAdapter,
    )
    from fewtrans_board.methods.adapters.clip_prompts import ADAPTERS as CLIP_PROMPTS
    from fewtrans_board.methods.adapters.clip_prompts import INDUCTIVE_PAPER_ADAPTERS
    from fewtrans_board.methods.adapters.clip_tuning import ADAPTERS as CLIP_TUNING
    from fewtrans_board.methods.adapters.heads import CosineClassifierAdapter, LinearProbeAdapter
    from fewtrans_board.methods.adapters.multi_model import AllEmbeddingsAdapter, ImsfAdapter
    from fewtrans_board.methods.adapters.prototypes import MeanCentroidAdapter
    from fewtrans_board.methods.adapters.random_embedding import RandomEmbeddingAdapter
    from fewtrans_board.methods.adapters.vision_peft import ADAPTERS as VISION_PEFT
    from fewtrans_board.methods.adapters.zeroshot import ZeroShotClipAdapter
    from fewtrans_board.methods.meta.adapters import ADAPTERS as META_LEARNERS

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
