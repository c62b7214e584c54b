"""Per-dataset parameter importances (diagonal Fisher) of a CLIP model, cached on disk.

For one dataset: mini-batches of its train split (fixed size, a seeded order, the
evaluation transform), cross-entropy of ``logit_scale * cos(image, text)`` against the
prompts of all its class names (one template), gradients through both towers; the
importance of a parameter element is the mean over batches of its squared gradient.

Importances are cached per (model weights, dataset items, transform, template, batch
size, order seed) as a safetensors file plus a JSON provenance record, so trying other
retain mixes costs nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fewtrans_board.core.atomic import atomic_path, write_bytes_atomic
from fewtrans_board.core.errors import FewtransError
from fewtrans_board.core.version import __version__
from fewtrans_board.unlearning.data import LabeledSplit
from fewtrans_board.unlearning.sets import IMPORTANCE_BATCH

if TYPE_CHECKING:
    import torch

    from fewtrans_board.api.backbone import Backbone

Importances = dict[str, "torch.Tensor"]
"""Parameter name -> importance tensor of the parameter's shape (float32, CPU)."""

ORDER_SEED = 0
"""Seed of the batch order (``RandomState(0).permutation``)."""


def default_cache_dir() -> Path:
    """``$FEWTRANS_BOARD_CACHE/importances`` or ``~/.cache/fewtrans-board/importances``."""
    base = os.environ.get("FEWTRANS_BOARD_CACHE")
    return (Path(base) if base else Path.home() / ".cache" / "fewtrans-board") / "importances"


def class_prompt_tokens(backbone: Backbone, split: LabeledSplit) -> torch.Tensor:
    """Token ids of ``template.format(name)`` for every class of the split."""
    assert backbone.text is not None
    return backbone.text.tokenize([split.template.format(n) for n in split.class_names])


def clip_logits(model: Any, pixels: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """``logit_scale * cos(image, text)`` of an open_clip model (differentiable)."""
    import torch.nn.functional as F

    images = F.normalize(model.encode_image(pixels), dim=-1)
    texts = F.normalize(model.encode_text(tokens), dim=-1)
    return model.logit_scale.exp() * images @ texts.t()  # type: ignore[no-any-return]


def compute_importance(
    backbone: Backbone,
    split: LabeledSplit,
    batch_size: int = IMPORTANCE_BATCH,
    seed: int = ORDER_SEED,
    progress: Callable[[int, int], None] | None = None,
) -> Importances:
    """Mean squared gradient of the batch cross-entropy for every parameter of the model.

    Args:
        backbone: a CLIP backbone (its full model is read, never modified).
        split: the dataset's train split.
        batch_size: mini-batch size (64 in the paper).
        seed: seed of the batch order.
        progress: called with (batches done, total batches).

    Returns:
        Importances of every parameter (``logit_scale`` included; SSD skips it).
    """
    import copy
    import math

    import torch
    import torch.nn.functional as F

    from fewtrans_board.blocks.clip_common import clip_model

    model: Any = copy.deepcopy(clip_model(backbone, "unlearning")).eval().requires_grad_(True)
    device = backbone.device
    tokens = class_prompt_tokens(backbone, split).to(device)
    named = dict(model.named_parameters())
    total = {name: torch.zeros_like(p, device="cpu") for name, p in named.items()}
    n_batches = math.ceil(len(split.items) / batch_size)
    for done, (pixels, labels) in enumerate(split.batches(batch_size, seed), start=1):
        model.zero_grad(set_to_none=True)
        logits = clip_logits(model, pixels.to(device), tokens)
        F.cross_entropy(logits, labels.to(device)).backward()  # type: ignore[no-untyped-call]
        for name, param in named.items():
            if param.grad is not None:
                total[name] += param.grad.detach().float().pow(2).cpu()
        if progress is not None:
            progress(done, n_batches)
    return {name: value / n_batches for name, value in total.items()}


@dataclass(frozen=True)
class ImportanceKey:
    """What an importance depends on."""

    weights_id: str
    dataset: str
    partition: str
    items_sha256: str
    preprocessing: dict[str, Any]
    template: str
    batch_size: int
    seed: int

    def digest(self) -> str:
        """sha256 of the canonical JSON of the key."""
        text = json.dumps(self.__dict__, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()


def importance_key(
    backbone: Backbone, split: LabeledSplit, batch_size: int, seed: int
) -> ImportanceKey:
    """The cache key of ``split``'s importance under ``backbone``."""
    return ImportanceKey(
        weights_id=backbone.weights_id,
        dataset=split.name,
        partition=split.partition,
        items_sha256=split.fingerprint(),
        preprocessing=split.preprocessing.to_dict(),
        template=split.template,
        batch_size=batch_size,
        seed=seed,
    )


@dataclass
class CachedImportance:
    """An importance with its provenance.

    Attributes:
        values: the importances.
        record: the provenance record (key, file sha256, counts, time, package version).
        cached: whether it was read from the cache rather than computed.
    """

    values: Importances
    record: dict[str, Any]
    cached: bool


class ImportanceCache:
    """Importances on disk: ``<digest>.safetensors`` and ``<digest>.json`` per key.

    Args:
        folder: the cache folder (created on first write).
    """

    def __init__(self, folder: Path | None = None) -> None:
        self.folder = folder if folder is not None else default_cache_dir()

    def get(
        self,
        backbone: Backbone,
        split: LabeledSplit,
        batch_size: int = IMPORTANCE_BATCH,
        seed: int = ORDER_SEED,
        progress: Callable[[int, int], None] | None = None,
    ) -> CachedImportance:
        """Read the importance of ``split`` from the cache, computing and storing it if absent.

        Raises:
            FewtransError: a cached file whose content hash disagrees with its record.
        """
        from safetensors.torch import load_file, save_file

        from fewtrans_board.models.weights import file_sha256

        key = importance_key(backbone, split, batch_size, seed)
        digest = key.digest()
        tensors, meta = self.folder / f"{digest}.safetensors", self.folder / f"{digest}.json"
        if tensors.is_file() and meta.is_file():
            record = json.loads(meta.read_text(encoding="utf-8"))
            if file_sha256(tensors) != record.get("sha256"):
                raise FewtransError(
                    f"importance cache file {tensors} does not match its record {meta} "
                    "(sha256 differs); delete both files to recompute"
                )
            return CachedImportance(dict(load_file(str(tensors))), record, cached=True)
        values = compute_importance(backbone, split, batch_size, seed, progress)
        self.folder.mkdir(parents=True, exist_ok=True)
        with atomic_path(tensors) as tmp:
            save_file({k: v.contiguous() for k, v in values.items()}, str(tmp))
        record = {
            "key": key.__dict__,
            "digest": digest,
            "sha256": file_sha256(tensors),
            "items": len(split.items),
            "classes": len(split.class_names),
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "package": {"name": "fewtrans-board", "version": __version__},
        }
        write_bytes_atomic(meta, json.dumps(record, indent=2, sort_keys=True).encode())
        return CachedImportance(values, record, cached=False)


def mean_importance(importances: list[Importances]) -> Importances:
    """Element-wise mean of several datasets' importances (the retain importance)."""
    if not importances:
        raise FewtransError("the retain set is empty; SSD needs at least one retain dataset")
    names = importances[0].keys()
    return {name: sum(imp[name] for imp in importances) / len(importances) for name in names}  # type: ignore[misc]
