"""``MODEL+unlearn:DATASET``: unlearned CLIP models as ordinary model names.

``open-clip:ViT-B-16/openai+unlearn:clip-stanford-dogs`` resolves to a model spec whose
loader builds the base architecture from the recorded unlearned weights, so every adapter
runs on it unchanged; the backbone's provenance (``info["unlearning"]``, stored with every
result) carries the unlearning record.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fewtrans_board.core.errors import FewtransError

if TYPE_CHECKING:
    from fewtrans_board.api.backbone import Backbone
    from fewtrans_board.api.model_spec import ModelRegistry, ModelSpec

MARK = "+unlearn:"


def unlearned_name(base: str, forget: str) -> str:
    """The model name of ``base`` with dataset ``forget`` unlearned."""
    return f"{base}{MARK}{forget}"


def split_name(name: str) -> tuple[str, str | None]:
    """``(base, forget dataset)`` of an unlearned name, ``(name, None)`` otherwise.

    Raises:
        FewtransError: a malformed name (empty base or dataset, or two marks).
    """
    base, sep, forget = name.partition(MARK)
    if not sep:
        return name, None
    if not base or not forget or MARK in forget:
        raise FewtransError(
            f"model {name!r}: write an unlearned model as MODEL{MARK}DATASET, "
            "e.g. open-clip:ViT-B-16/openai+unlearn:clip-stanford-dogs"
        )
    return base, forget


def unlearned_spec(base: ModelSpec, name: str, forget: str) -> ModelSpec:
    """The spec of ``base`` with ``forget`` unlearned (weights from the store or --weights).

    Raises:
        FewtransError: ``base`` is not a CLIP-style model.
    """
    if not base.has_text:
        raise FewtransError(
            f"model {name!r}: unlearning needs a CLIP-style model with a text tower; "
            f"{base.name!r} is image-only"
        )
    return dataclasses.replace(
        base,
        name=name,
        loader=functools.partial(load_unlearned, base, name),
        source=f"SSD unlearning of {base.name} (forget {forget}); weights from the store",
        description=f"{base.name} with {forget} unlearned by SSD (inductive CLIP).",
        family_loader=None,
    )


def load_unlearned(
    base: ModelSpec,
    name: str,
    weights: Path | None,
    device: str,
    *,
    registry: ModelRegistry | None = None,
) -> Backbone:
    """Load unlearned weights into the base architecture and attach the record.

    Args:
        base: the base model's spec (its loader builds the architecture from a file).
        name: the unlearned model's name.
        weights: an unlearned weights file with its sidecar record; ``None`` looks the
            name up in the store.
        device: torch device.
        registry: the registry the name was resolved in, handed on to the base loader.

    Raises:
        FewtransError: no record, a record of another model, or changed weights.
    """
    from fewtrans_board.models.unlearned_records import UnlearnedStore, check_weights, read_record

    if weights is None:
        path, record = UnlearnedStore().lookup(name)
    else:
        path, record = weights, read_record(weights)
    if record.get("name") != name:
        raise FewtransError(
            f"{path} holds {record.get('name')!r}, not {name!r}; pick the weights unlearned "
            "from this base model and forget set"
        )
    check_weights(path, record)
    backbone = base.load(weights=path, device=device, registry=registry)
    backbone.name = name
    backbone.info = {**backbone.info, "unlearning": summary(record)}
    return backbone


def summary(record: dict[str, Any]) -> dict[str, Any]:
    """The record without its per-tensor detail (what results carry)."""
    damp = {k: v for k, v in record.get("dampening", {}).items() if k != "per_tensor"}
    return {**record, "dampening": damp}
