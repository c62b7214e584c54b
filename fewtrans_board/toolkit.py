"""The building blocks plugin authors may import: ``from fewtrans_board.toolkit import ...``.

``fewtrans_board`` itself exports the contract (``Adapter``, ``AdapterConfig``, ``hparam``,
``Backbone``, ``ModelSpec``, ``DatasetSpec``, ``SupportSet``, ``ImageSet``, ``hookimpl``,
``PlannedAdapter``, ``TrainingPlan``). This module adds the pieces the built-in methods are
made of, so a third-party method can reuse them instead of copying them:

* errors: :class:`FewtransError`, the base of every user-facing error (the CLI prints it
  as ``Error: ...`` instead of a traceback);
* datasets: :class:`FolderReader` (one folder per class) and the :class:`DatasetReader`
  protocol for readers of other layouts;
* models: :func:`load_timm_backbone` (any timm architecture, hub or local checkpoint),
  :func:`load_open_clip_backbone`, and :func:`registry_in_force` for a model built from
  other models (it resolves them in the caller's registry, as ``library:`` does);
* the FewTrans training recipe: :func:`run_adam` (one Adam per parameter group, per-step
  cosine to zero, ``RandomState(11)`` support order), :func:`make_head`,
  :func:`normalized`, :func:`autocast`, :func:`train_only`, :func:`upcast`,
  :func:`epoch_batches`, :func:`cosine_lr`, :func:`total_steps`;
* batched HPE: :class:`PlannedAdapter`, :class:`TrainingPlan`, :func:`run_plan`,
  :func:`lockstep_settings`, :func:`recording`; :class:`FinetuneAdapter` (override
  ``trainable`` to tune part of a deep-copied encoder) and :func:`encoder_plan`;
* ViT hook points and PEFT blocks: :func:`vit_parts` (:class:`VitParts`,
  :class:`BlockParts`), :func:`require_vit`, :func:`place`, bottleneck adapters
  (:class:`Bottleneck`, :class:`SequentialAdapter`, :class:`ParallelAdapter`,
  :func:`attach_sequential`, :func:`attach_parallel`) and deep visual prompts
  (:class:`DeepVisualPrompts`);
* CLIP text tower: :func:`require_text`, :func:`clip_model`,
  :func:`encode_text_embeddings`, :func:`class_prompts`,
  :func:`handcrafted_text_features`, :class:`ClipPredictor`, :class:`NamePredictor`,
  :class:`TextPrompter`, :func:`attach_deep_text_prompts`, :func:`frozen_text_copy`;
* smoke-test fixtures: :func:`tiny_vit_backbone`, :func:`tiny_clip_backbone`,
  :func:`toy_episode` (the contract checks stay in :mod:`fewtrans_board.testing`).

Every name is the very object the built-ins use (re-exported, never copied), imported on
first access: ``import fewtrans_board.toolkit`` does not import torch, timm or open_clip.
Still import the torch-based blocks inside ``load``/``fit``, as for torch itself.

Stability:
    Stable: every name in ``__all__``, its documented arguments and behaviour (the
    training recipe helpers reproduce the FewTrans recipe exactly; a change to that
    would be a new protocol version, not an edit). New optional arguments and new
    names may be added in any release.

    May change without notice: where a name is defined (import it from here, not from
    ``fewtrans_board.methods.adapters...``), everything not in ``__all__``, private
    attributes, and the text of error messages.

    Deprecation: a name that is renamed or removed keeps working for one release and
    warns with a ``DeprecationWarning`` saying what to use instead; it is removed in the
    release after.
"""

from __future__ import annotations

import importlib
import warnings
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fewtrans_board.api.dataset_spec import DatasetReader
    from fewtrans_board.blocks.bottleneck import (
        Bottleneck,
        ParallelAdapter,
        SequentialAdapter,
        attach_parallel,
        attach_sequential,
    )
    from fewtrans_board.blocks.clip_common import (
        ClipPredictor,
        NamePredictor,
        class_prompts,
        clip_model,
        encode_text_embeddings,
        handcrafted_text_features,
        require_text,
    )
    from fewtrans_board.blocks.deep_prompts import DeepVisualPrompts
    from fewtrans_board.blocks.finetune import FinetuneAdapter, encoder_plan
    from fewtrans_board.blocks.lockstep import (
        PlannedAdapter,
        TrainingPlan,
        lockstep_settings,
        recording,
        run_plan,
    )
    from fewtrans_board.blocks.prompter import (
        TextPrompter,
        attach_deep_text_prompts,
        frozen_text_copy,
    )
    from fewtrans_board.blocks.training import (
        autocast,
        cosine_lr,
        epoch_batches,
        make_head,
        normalized,
        run_adam,
        total_steps,
        train_only,
        upcast,
    )
    from fewtrans_board.blocks.vit_hooks import place, require_vit
    from fewtrans_board.blocks.vit_parts import BlockParts, VitParts, vit_parts
    from fewtrans_board.core.errors import FewtransError
    from fewtrans_board.datasets.readers import FolderReader
    from fewtrans_board.models.open_clip_family import load_open_clip_backbone
    from fewtrans_board.models.timm_family import load_timm_backbone
    from fewtrans_board.plugins.registry import registry_in_force
    from fewtrans_board.testing import tiny_clip_backbone, tiny_vit_backbone, toy_episode

# Where each public name lives; a test checks this table against the imports above.
_SOURCES: dict[str, tuple[str, ...]] = {
    "fewtrans_board.blocks.clip_common": (
        "ClipPredictor",
        "NamePredictor",
        "class_prompts",
        "clip_model",
        "encode_text_embeddings",
        "handcrafted_text_features",
        "require_text",
    ),
    "fewtrans_board.blocks.prompter": (
        "TextPrompter",
        "attach_deep_text_prompts",
        "frozen_text_copy",
    ),
    "fewtrans_board.blocks.deep_prompts": ("DeepVisualPrompts",),
    "fewtrans_board.blocks.finetune": ("FinetuneAdapter", "encoder_plan"),
    "fewtrans_board.blocks.training": (
        "autocast",
        "cosine_lr",
        "epoch_batches",
        "make_head",
        "normalized",
        "run_adam",
        "total_steps",
        "train_only",
        "upcast",
    ),
    "fewtrans_board.blocks.bottleneck": (
        "Bottleneck",
        "ParallelAdapter",
        "SequentialAdapter",
        "attach_parallel",
        "attach_sequential",
    ),
    "fewtrans_board.blocks.vit_hooks": ("place", "require_vit"),
    "fewtrans_board.blocks.vit_parts": ("BlockParts", "VitParts", "vit_parts"),
    "fewtrans_board.blocks.lockstep": (
        "PlannedAdapter",
        "TrainingPlan",
        "lockstep_settings",
        "recording",
        "run_plan",
    ),
    "fewtrans_board.datasets.readers": ("FolderReader",),
    "fewtrans_board.api.dataset_spec": ("DatasetReader",),
    "fewtrans_board.core.errors": ("FewtransError",),
    "fewtrans_board.models.open_clip_family": ("load_open_clip_backbone",),
    "fewtrans_board.models.timm_family": ("load_timm_backbone",),
    "fewtrans_board.plugins.registry": ("registry_in_force",),
    "fewtrans_board.testing": ("tiny_clip_backbone", "tiny_vit_backbone", "toy_episode"),
}

_HOME = {name: module for module, names in _SOURCES.items() for name in names}

_DEPRECATED: dict[str, tuple[str, str]] = {}
"""Old name -> (``"module:attribute"`` it resolves to, what to use instead).

An entry lives for one release after its name leaves ``__all__``, then it is deleted.
"""

__all__ = [
    "BlockParts",
    "Bottleneck",
    "ClipPredictor",
    "DatasetReader",
    "DeepVisualPrompts",
    "FewtransError",
    "FinetuneAdapter",
    "FolderReader",
    "NamePredictor",
    "ParallelAdapter",
    "PlannedAdapter",
    "SequentialAdapter",
    "TextPrompter",
    "TrainingPlan",
    "VitParts",
    "attach_deep_text_prompts",
    "attach_parallel",
    "attach_sequential",
    "autocast",
    "class_prompts",
    "clip_model",
    "cosine_lr",
    "encode_text_embeddings",
    "encoder_plan",
    "epoch_batches",
    "frozen_text_copy",
    "handcrafted_text_features",
    "load_open_clip_backbone",
    "load_timm_backbone",
    "lockstep_settings",
    "make_head",
    "normalized",
    "place",
    "recording",
    "registry_in_force",
    "require_text",
    "require_vit",
    "run_adam",
    "run_plan",
    "tiny_clip_backbone",
    "tiny_vit_backbone",
    "total_steps",
    "toy_episode",
    "train_only",
    "upcast",
    "vit_parts",
]


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
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def _public_dir() -> list[str]:
    """Module attributes plus the public names not imported yet, for ``dir()`` and IDEs."""
    return sorted({*globals(), *__all__})


if not TYPE_CHECKING:
    # Hidden from type checkers, which then see only the typed imports above and report a
    # misspelt name instead of typing it ``Any``.
    __getattr__ = _public_attribute
    __dir__ = _public_dir
