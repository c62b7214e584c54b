"""``MODEL+unlearn:DATASET[@VARIANT]``: unlearned CLIP models as ordinary model names.

``open-clip:ViT-B-16/openai+unlearn:clip-stanford-dogs`` resolves to a model spec whose
loader builds the base architecture from the recorded unlearned weights, so every adapter
runs on it unchanged; the backbone's provenance (``info["unlearning"]``, stored with every
result) carries the unlearning record.

A variant names how strongly the dataset was unlearned when it is not the paper's default
SSD setting (alpha 30, lambda 1):

- ``@tklN``: the strength was searched so that the validation datasets lose at most N% of
  the original model's zero-shot knowledge (``unlearn --knowledge-loss 0.N``; the paper's
  severities are ``@tkl3``, ``@tkl25``, ``@tkl50``, ``@tkl90``, Fig. 4a);
- ``@oracle``: the strength was searched so that a linear probe on the unlearned model's
  frozen features matches a model trained without the dataset (``unlearn --match-oracle``).

Every variant is its own model: :func:`split_name` returns the forget *tag*
(``DATASET@VARIANT``), so a rule that compares it with a dataset name (the
``unlearned-target`` sub-benchmarks) accepts only the default strength and never mixes
severities; :func:`parse_unlearned` gives the dataset and the variant apart.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fewtrans_board.core.errors import FewtransError

if TYPE_CHECKING:
    from fewtrans_board.api.backbone import Backbone
    from fewtrans_board.api.model_spec import ModelRegistry, ModelSpec

MARK = "+unlearn:"
VARIANT_MARK = "@"
ORACLE_VARIANT = "oracle"
"""The variant of ``unlearn --match-oracle``."""

KNOWLEDGE_LOSS_LEVELS = (0.03, 0.25, 0.5, 0.9)
"""The paper's four severities (Fig. 4a): lose at most 3/25/50/90% of general knowledge."""

_VARIANT = re.compile(r"^(?:tkl([1-9][0-9]?)|oracle)$")


def severity_variant(knowledge_loss: float) -> str:
    """``tklN`` for a knowledge-loss target (a fraction, ``0.25`` -> ``tkl25``).

    Raises:
        FewtransError: a target outside (0, 1) or not a whole percentage.
    """
    percent = round(knowledge_loss * 100)
    if not 0 < knowledge_loss < 1 or abs(percent - knowledge_loss * 100) > 1e-6:
        raise FewtransError(
            f"a knowledge-loss target is a whole percentage between 1% and 99%, got "
            f"{knowledge_loss!r} (the paper's: {', '.join(map(str, KNOWLEDGE_LOSS_LEVELS))})"
        )
    return f"tkl{percent}"


def variant_knowledge_loss(variant: str | None) -> float | None:
    """The knowledge-loss target of a ``tklN`` variant (``None`` for others)."""
    match = _VARIANT.match(variant or "")
    return int(match.group(1)) / 100 if match and match.group(1) else None


@dataclass(frozen=True)
class UnlearnedName:
    """The parts of ``BASE+unlearn:FORGET[@VARIANT]``.

    Attributes:
        base: the base model.
        forget: the unlearned dataset.
        variant: ``tklN``, ``oracle`` or ``None`` (the paper's default strength).
    """

    base: str
    forget: str
    variant: str | None = None

    @property
    def tag(self) -> str:
        """``FORGET`` or ``FORGET@VARIANT`` (what :func:`split_name` returns)."""
        return self.forget + (f"{VARIANT_MARK}{self.variant}" if self.variant else "")

    @property
    def knowledge_loss(self) -> float | None:
        """The knowledge-loss target of a ``tklN`` variant."""
        return variant_knowledge_loss(self.variant)

    def __str__(self) -> str:
        return f"{self.base}{MARK}{self.tag}"


def unlearned_name(base: str, forget: str, variant: str | None = None) -> str:
    """The model name of ``base`` with dataset ``forget`` unlearned (``variant``: its strength).

    Raises:
        FewtransError: an unknown variant.
    """
    if variant is not None and not _VARIANT.match(variant):
        raise FewtransError(
            f"unknown unlearning variant {variant!r}: use tklN (N = 1..99) or {ORACLE_VARIANT}"
        )
    return str(UnlearnedName(base, forget, variant))


def parse_unlearned(name: str) -> UnlearnedName | None:
    """The parts of an unlearned model name, ``None`` for any other name.

    Raises:
        FewtransError: a malformed name (empty base, dataset or variant, two marks, or an
            unknown variant).
    """
    base, sep, rest = name.partition(MARK)
    if not sep:
        return None
    forget, vsep, variant = rest.partition(VARIANT_MARK)
    if not base or not forget or MARK in rest:
        raise FewtransError(
            f"model {name!r}: write an unlearned model as MODEL{MARK}DATASET[@VARIANT], "
            "e.g. open-clip:ViT-B-16/openai+unlearn:clip-stanford-dogs"
        )
    if vsep and not _VARIANT.match(variant):
        raise FewtransError(
            f"model {name!r}: unknown unlearning variant {variant!r}; use @tklN (N = 1..99, "
            f"the knowledge-loss target in percent) or @{ORACLE_VARIANT}"
        )
    return UnlearnedName(base, forget, variant if vsep else None)


def split_name(name: str) -> tuple[str, str | None]:
    """``(base, forget tag)`` of an unlearned name, ``(name, None)`` otherwise.

    The tag is the dataset for the default strength and ``DATASET@VARIANT`` otherwise, so
    comparing it with a dataset name singles out the paper's default setting.

    Raises:
        FewtransError: a malformed name (see :func:`parse_unlearned`).
    """
    parsed = parse_unlearned(name)
    return (name, None) if parsed is None else (parsed.base, parsed.tag)


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
        description=f"{base.name} with {forget} unlearned by SSD (inductive CLIP)"
        + _strength_note(forget)
        + ".",
        family_loader=None,
    )


def _strength_note(tag: str) -> str:
    """How strongly a forget tag's variant unlearned, in words."""
    variant = tag.partition(VARIANT_MARK)[2]
    loss = variant_knowledge_loss(variant)
    if loss is not None:
        return f", strength searched to lose at most {loss:.0%} of general knowledge"
    if variant == ORACLE_VARIANT:
        return ", strength searched to match a model trained without it"
    return ""


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
