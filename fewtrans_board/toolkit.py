"""The building blocks plugin authors may import: ``from fewtrans_board.toolkit import ...``.

CONTRIBUTING.md ("The toolkit") explains it: the pieces the built-in methods are made of,
re-exported (the very objects, never copies) and imported on first access, so importing this
module does not import torch, timm or open_clip; stable names (``__all__``) and provisional
ones, and how a stable name is deprecated. :data:`NAMES` is the one table of them: where
each lives, how stable it is, and its group (CONTRIBUTING's toolkit table is generated from
it by ``python -m fewtrans_board.jobs.docs``). Where a name is defined may change without
notice (import it from here, not from ``fewtrans_board.blocks...``), as may private
attributes and error messages.
"""

from __future__ import annotations

import importlib
import warnings
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

if TYPE_CHECKING:  # what type checkers and IDEs see; a test holds it to NAMES
    from fewtrans_board.api.dataset_spec import DatasetReader as DatasetReader
    from fewtrans_board.api.fit_options import FitOptions as FitOptions
    from fewtrans_board.api.fit_options import GroupReport as GroupReport
    from fewtrans_board.api.fit_options import LockstepSettings as LockstepSettings
    from fewtrans_board.api.model_spec import ModelRegistry as ModelRegistry
    from fewtrans_board.blocks.bottleneck import Bottleneck as Bottleneck
    from fewtrans_board.blocks.bottleneck import ParallelAdapter as ParallelAdapter
    from fewtrans_board.blocks.bottleneck import SequentialAdapter as SequentialAdapter
    from fewtrans_board.blocks.bottleneck import attach_parallel as attach_parallel
    from fewtrans_board.blocks.bottleneck import attach_sequential as attach_sequential
    from fewtrans_board.blocks.clip_common import ClipPredictor as ClipPredictor
    from fewtrans_board.blocks.clip_common import NamePredictor as NamePredictor
    from fewtrans_board.blocks.clip_common import class_prompts as class_prompts
    from fewtrans_board.blocks.clip_common import clip_model as clip_model
    from fewtrans_board.blocks.clip_common import encode_text_embeddings as encode_text_embeddings
    from fewtrans_board.blocks.clip_common import (
        handcrafted_text_features as handcrafted_text_features,
    )
    from fewtrans_board.blocks.clip_common import require_text as require_text
    from fewtrans_board.blocks.deep_prompts import DeepVisualPrompts as DeepVisualPrompts
    from fewtrans_board.blocks.finetune import FinetuneAdapter as FinetuneAdapter
    from fewtrans_board.blocks.finetune import encoder_plan as encoder_plan
    from fewtrans_board.blocks.lockstep import PlannedAdapter as PlannedAdapter
    from fewtrans_board.blocks.lockstep import TrainingPlan as TrainingPlan
    from fewtrans_board.blocks.lockstep import run_plan as run_plan
    from fewtrans_board.blocks.prompter import TextPrompter as TextPrompter
    from fewtrans_board.blocks.prompter import attach_deep_text_prompts as attach_deep_text_prompts
    from fewtrans_board.blocks.prompter import frozen_text_copy as frozen_text_copy
    from fewtrans_board.blocks.training import autocast as autocast
    from fewtrans_board.blocks.training import cosine_lr as cosine_lr
    from fewtrans_board.blocks.training import epoch_batches as epoch_batches
    from fewtrans_board.blocks.training import make_head as make_head
    from fewtrans_board.blocks.training import normalized as normalized
    from fewtrans_board.blocks.training import run_adam as run_adam
    from fewtrans_board.blocks.training import total_steps as total_steps
    from fewtrans_board.blocks.training import train_only as train_only
    from fewtrans_board.blocks.training import upcast as upcast
    from fewtrans_board.blocks.vit_hooks import place as place
    from fewtrans_board.blocks.vit_hooks import require_vit as require_vit
    from fewtrans_board.blocks.vit_parts import BlockParts as BlockParts
    from fewtrans_board.blocks.vit_parts import VitParts as VitParts
    from fewtrans_board.blocks.vit_parts import vit_parts as vit_parts
    from fewtrans_board.core.errors import FewtransError as FewtransError
    from fewtrans_board.datasets.readers import FolderReader as FolderReader
    from fewtrans_board.models.open_clip_family import (
        load_open_clip_backbone as load_open_clip_backbone,
    )
    from fewtrans_board.models.timm_family import load_timm_backbone as load_timm_backbone
    from fewtrans_board.registry.lookup import registry_or_installed as registry_or_installed
    from fewtrans_board.testing import tiny_clip_backbone as tiny_clip_backbone
    from fewtrans_board.testing import tiny_vit_backbone as tiny_vit_backbone
    from fewtrans_board.testing import toy_episode as toy_episode


STABLE: Literal["stable"] = "stable"
PROVISIONAL: Literal["provisional"] = "provisional"
_TUNING = "fine-tuning and batched HPE"
_CLIP_TEXT = "CLIP text tower"


class Name(NamedTuple):
    """One toolkit name: its home module, its stability and its group in the docs."""

    home: str
    stability: Literal["stable", "provisional"]
    group: str


NAMES: dict[str, Name] = {
    "FewtransError": Name("fewtrans_board.core.errors", STABLE, "errors"),
    "FolderReader": Name("fewtrans_board.datasets.readers", STABLE, "datasets"),
    "DatasetReader": Name("fewtrans_board.api.dataset_spec", STABLE, "datasets"),
    "load_timm_backbone": Name("fewtrans_board.models.timm_family", STABLE, "models"),
    "load_open_clip_backbone": Name("fewtrans_board.models.open_clip_family", STABLE, "models"),
    "ModelRegistry": Name("fewtrans_board.api.model_spec", PROVISIONAL, "models"),
    "registry_or_installed": Name("fewtrans_board.registry.lookup", PROVISIONAL, "models"),
    "run_adam": Name("fewtrans_board.blocks.training", STABLE, "FewTrans recipe"),
    "make_head": Name("fewtrans_board.blocks.training", STABLE, "FewTrans recipe"),
    "normalized": Name("fewtrans_board.blocks.training", STABLE, "FewTrans recipe"),
    "autocast": Name("fewtrans_board.blocks.training", PROVISIONAL, "FewTrans recipe"),
    "train_only": Name("fewtrans_board.blocks.training", PROVISIONAL, "FewTrans recipe"),
    "upcast": Name("fewtrans_board.blocks.training", PROVISIONAL, "FewTrans recipe"),
    "epoch_batches": Name("fewtrans_board.blocks.training", PROVISIONAL, "FewTrans recipe"),
    "cosine_lr": Name("fewtrans_board.blocks.training", PROVISIONAL, "FewTrans recipe"),
    "total_steps": Name("fewtrans_board.blocks.training", PROVISIONAL, "FewTrans recipe"),
    "FinetuneAdapter": Name("fewtrans_board.blocks.finetune", STABLE, _TUNING),
    "encoder_plan": Name("fewtrans_board.blocks.finetune", PROVISIONAL, _TUNING),
    "PlannedAdapter": Name("fewtrans_board.blocks.lockstep", PROVISIONAL, _TUNING),
    "TrainingPlan": Name("fewtrans_board.blocks.lockstep", PROVISIONAL, _TUNING),
    "run_plan": Name("fewtrans_board.blocks.lockstep", PROVISIONAL, _TUNING),
    "FitOptions": Name("fewtrans_board.api.fit_options", PROVISIONAL, _TUNING),
    "LockstepSettings": Name("fewtrans_board.api.fit_options", PROVISIONAL, _TUNING),
    "GroupReport": Name("fewtrans_board.api.fit_options", PROVISIONAL, _TUNING),
    "vit_parts": Name("fewtrans_board.blocks.vit_parts", STABLE, "ViT hooks, PEFT"),
    "VitParts": Name("fewtrans_board.blocks.vit_parts", PROVISIONAL, "ViT hooks, PEFT"),
    "BlockParts": Name("fewtrans_board.blocks.vit_parts", PROVISIONAL, "ViT hooks, PEFT"),
    "require_vit": Name("fewtrans_board.blocks.vit_hooks", STABLE, "ViT hooks, PEFT"),
    "place": Name("fewtrans_board.blocks.vit_hooks", STABLE, "ViT hooks, PEFT"),
    "attach_sequential": Name("fewtrans_board.blocks.bottleneck", STABLE, "ViT hooks, PEFT"),
    "attach_parallel": Name("fewtrans_board.blocks.bottleneck", PROVISIONAL, "ViT hooks, PEFT"),
    "Bottleneck": Name("fewtrans_board.blocks.bottleneck", PROVISIONAL, "ViT hooks, PEFT"),
    "SequentialAdapter": Name("fewtrans_board.blocks.bottleneck", PROVISIONAL, "ViT hooks, PEFT"),
    "ParallelAdapter": Name("fewtrans_board.blocks.bottleneck", PROVISIONAL, "ViT hooks, PEFT"),
    "DeepVisualPrompts": Name("fewtrans_board.blocks.deep_prompts", PROVISIONAL, "ViT hooks, PEFT"),
    "require_text": Name("fewtrans_board.blocks.clip_common", PROVISIONAL, _CLIP_TEXT),
    "clip_model": Name("fewtrans_board.blocks.clip_common", PROVISIONAL, _CLIP_TEXT),
    "encode_text_embeddings": Name("fewtrans_board.blocks.clip_common", PROVISIONAL, _CLIP_TEXT),
    "class_prompts": Name("fewtrans_board.blocks.clip_common", PROVISIONAL, _CLIP_TEXT),
    "handcrafted_text_features": Name("fewtrans_board.blocks.clip_common", PROVISIONAL, _CLIP_TEXT),
    "ClipPredictor": Name("fewtrans_board.blocks.clip_common", PROVISIONAL, _CLIP_TEXT),
    "NamePredictor": Name("fewtrans_board.blocks.clip_common", PROVISIONAL, _CLIP_TEXT),
    "TextPrompter": Name("fewtrans_board.blocks.prompter", PROVISIONAL, _CLIP_TEXT),
    "attach_deep_text_prompts": Name("fewtrans_board.blocks.prompter", PROVISIONAL, _CLIP_TEXT),
    "frozen_text_copy": Name("fewtrans_board.blocks.prompter", PROVISIONAL, _CLIP_TEXT),
    "tiny_vit_backbone": Name("fewtrans_board.testing", STABLE, "smoke tests"),
    "tiny_clip_backbone": Name("fewtrans_board.testing", STABLE, "smoke tests"),
    "toy_episode": Name("fewtrans_board.testing", STABLE, "smoke tests"),
}
"""Every toolkit name, in the order the docs list them."""

_DEPRECATED: dict[str, tuple[str, str]] = {}
"""Old name -> (``"module:attribute"`` it resolves to, what to use instead).

An entry lives for one release after its name leaves ``__all__``, then it is deleted.
"""

__all__ = sorted(name for name, entry in NAMES.items() if entry.stability == STABLE)


def _public_attribute(name: str) -> Any:
    """Import a public name from its home module on first access (PEP 562 ``__getattr__``)."""
    if name in _DEPRECATED:
        target, advice = _DEPRECATED[name]
        warnings.warn(
            f"fewtrans_board.toolkit.{name} is deprecated and goes in the next release; {advice}",
            DeprecationWarning,
            stacklevel=2,
        )
        module, _, attribute = target.partition(":")
        return getattr(importlib.import_module(module), attribute)
    entry = NAMES.get(name)
    if entry is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(entry.home), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def _public_dir() -> list[str]:
    """Module attributes plus the public names not imported yet, for ``dir()`` and IDEs."""
    return sorted({*globals(), *NAMES})


if not TYPE_CHECKING:
    # Hidden from type checkers, which then see only the typed imports above and report a
    # misspelt name instead of typing it ``Any``.
    __getattr__ = _public_attribute
    __dir__ = _public_dir
