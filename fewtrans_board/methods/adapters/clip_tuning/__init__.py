"""CLIP tuning adapters: TaskRes, CLIP-Adapter, CLIP-LoRA and FewTrans CLIP fine-tuning.

Importing this package is light (torch, open_clip and peft load inside ``fit``), except
:mod:`fewtrans_board.blocks.unfuse`, a torch module imported only when CLIP-LoRA runs.
"""

from __future__ import annotations

from fewtrans_board.methods.adapters.clip_tuning.clip_adapter import ClipAdapterAdapter
from fewtrans_board.methods.adapters.clip_tuning.clip_lora import ClipLoraAdapter
from fewtrans_board.methods.adapters.clip_tuning.finetune_clip import (
    FinetuneClipAdapter,
    FinetuneClipTextAdapter,
    FinetuneClipVisualAdapter,
)
from fewtrans_board.methods.adapters.clip_tuning.taskres import TaskResAdapter

ADAPTERS = (
    TaskResAdapter,
    ClipAdapterAdapter,
    ClipLoraAdapter,
    FinetuneClipVisualAdapter,
    FinetuneClipTextAdapter,
    FinetuneClipAdapter,
)
"""The adapter classes of this package, for registration."""

__all__ = [
    "ADAPTERS",
    "ClipAdapterAdapter",
    "ClipLoraAdapter",
    "FinetuneClipAdapter",
    "FinetuneClipTextAdapter",
    "FinetuneClipVisualAdapter",
    "TaskResAdapter",
]
