"""``reproduce --smoke``: every step of a target on tiny backbones, one episode, minutes.

A smoke swaps each model the target names for the random-init smoke backbone of its family
(``smoke-clip.random`` for open_clip models, ``smoke-resnet.random`` for convolutional timm
models, ``smoke-vit.random`` for the other timm models and the iBOT and EsViT loaders), keeps the demo and meta-trained
models (small already), runs one episode of one dataset with one epoch per configuration,
and uses the adapters' default centres. Its report says it is a smoke.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from fewtrans_board.core.errors import FewtransError
from fewtrans_board.reproduce.target import Target

if TYPE_CHECKING:
    from fewtrans_board.registry.lookup import Registry

CONVOLUTIONAL = re.compile(r"resnet|convnext|bit|resnetv2|efficientnet|regnet", re.IGNORECASE)


def model_names(target: Target) -> list[str]:
    """Every base model name a target uses (rows, library members and preparations)."""
    names: list[str] = []
    templates = [target.row_model(r) for r in target.rows]
    for step in target.prepare:
        templates += [
            a for i, a in enumerate(step.command) if i and step.command[i - 1] == "--model"
        ]
    for template in templates:
        if template.startswith("library:"):
            names += [m.partition("=")[0] for m in template.removeprefix("library:").split("+")]
        else:
            names.append(template.partition("+")[0])
    return list(dict.fromkeys(names))


def smoke_model(name: str, registry: Registry) -> str | None:
    """The smoke backbone standing in for ``name`` (``None``: keep it)."""
    try:
        spec = registry.model(name).obj
    except FewtransError:
        return None
    family = spec.family
    if family == "open_clip":
        return "smoke-clip.random"
    if family not in ("timm", "esvit", "ibot") or name.startswith("smoke-"):
        return None
    architecture = f"{name} {spec.architecture}"
    return "smoke-resnet.random" if CONVOLUTIONAL.search(architecture) else "smoke-vit.random"


def smoke_swaps(target: Target, registry: Registry) -> dict[str, str]:
    """``model -> smoke backbone`` for every model of ``target`` that has one."""
    swaps = {}
    for name in model_names(target):
        replacement = smoke_model(name, registry)
        if replacement is not None:
            swaps[name] = replacement
    return swaps


def smallest_dataset(target: Target, registry: Registry) -> str:
    """The dataset a smoke runs on: the target's one with the fewest classes (first on ties)."""
    from fewtrans_board.reproduce.plan import manifests_of

    datasets = list(dict.fromkeys(m.dataset for m in manifests_of(target)))

    def classes(name: str) -> int:
        try:
            return int(registry.datasets.get(name).obj.num_classes)
        except FewtransError:
            return 10**9

    return min(datasets, key=classes)
