"""The ``unlearn`` pipeline: importances, dampening, weights, record, zero-shot before/after."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fewtrans_board import __version__
from fewtrans_board.core.errors import FewtransError
from fewtrans_board.models.unlearned_names import split_name, unlearned_name
from fewtrans_board.models.unlearned_records import SCHEMA, UnlearnedStore, write_record
from fewtrans_board.unlearning.data import LabeledSplit, check_datasets, load_split, root_of
from fewtrans_board.unlearning.importance import ImportanceCache, mean_importance
from fewtrans_board.unlearning.sets import ALPHA, IMPORTANCE_BATCH, LAMBDA
from fewtrans_board.unlearning.ssd import EXCLUDED, dampen
from fewtrans_board.unlearning.zeroshot import zero_shot

if TYPE_CHECKING:
    from fewtrans_board.api.backbone import Backbone
    from fewtrans_board.plugins.registry import Registry

Reporter = Callable[[str], None]


@dataclass
class UnlearnRequest:
    """Inputs of one unlearning.

    Attributes:
        model: base model name (a CLIP-style model, not itself unlearned).
        forget: the dataset to unlearn.
        retain: datasets whose knowledge to keep (their mean importance is F_retain).
        out: where to write the unlearned weights (``.safetensors``); the record goes
            next to it as ``.json``.
        weights: local checkpoint of the base model (offline use).
        data_dir: folder with one local copy per dataset (``DATA_DIR/<dataset>``).
        roots: explicit local copies per dataset (win over ``data_dir``).
        alpha: SSD selection weighting.
        lam: SSD dampening constant.
        batch_size: importance mini-batch size.
        device: torch device.
        evaluate_retain: also measure retain-set zero-shot accuracy before and after.
    """

    model: str
    forget: str
    retain: Sequence[str]
    out: Path
    weights: Path | None = None
    data_dir: Path | None = None
    roots: Mapping[str, Path] = field(default_factory=dict)
    alpha: float = ALPHA
    lam: float = LAMBDA
    batch_size: int = IMPORTANCE_BATCH
    device: str = "cpu"
    evaluate_retain: bool = True


def _check(request: UnlearnRequest) -> None:
    if split_name(request.model)[1] is not None:
        raise FewtransError(f"{request.model!r} is already unlearned; start from the base model")
    if request.forget in request.retain:
        raise FewtransError(
            f"{request.forget!r} cannot be both forgotten (--forget) and retained (--retain)"
        )
    if not request.retain:
        raise FewtransError("SSD for CLIP needs at least one retain dataset (--retain A,B,C)")
    if request.out.suffix != ".safetensors":
        raise FewtransError(f"--out must be a .safetensors file, got {request.out}")
    if request.batch_size < 1:
        raise FewtransError(f"the importance batch size must be >= 1, got {request.batch_size}")


def _splits(
    registry: Registry, request: UnlearnRequest, datasets: Sequence[str], partition: str, size: int
) -> dict[str, LabeledSplit]:
    out = {}
    for name in datasets:
        spec, root = root_of(registry, name, request.data_dir, request.roots)
        out[name] = load_split(spec, root, partition, size)
    return out


def save_weights(model: Any, path: Path) -> None:
    """Write a model's state dict as safetensors (atomically)."""
    from safetensors.torch import save_file

    from fewtrans_board.core.atomic import atomic_path

    state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    with atomic_path(path) as tmp:
        save_file(state, str(tmp))


def unlearn(
    registry: Registry,
    request: UnlearnRequest,
    *,
    cache: ImportanceCache | None = None,
    store: UnlearnedStore | None = None,
    report: Reporter | None = None,
) -> dict[str, Any]:
    """Unlearn ``request.forget`` from ``request.model`` with SSD and record everything.

    Returns:
        The unlearning record (also written next to the weights and registered in the
        store under ``MODEL+unlearn:DATASET``).

    Raises:
        FewtransError: bad inputs, missing datasets, or a model without a text tower.
    """
    import copy

    from fewtrans_board.blocks.clip_common import clip_model
    from fewtrans_board.models.weights import file_sha256

    _check(request)
    check_datasets(
        registry,
        {"--forget": [request.forget], "--retain": request.retain},
        request.data_dir,
        request.roots,
    )
    say = report or (lambda _msg: None)
    cache = cache or ImportanceCache()
    entry = registry.model(request.model)
    if not entry.obj.has_text:
        raise FewtransError(f"{request.model!r} has no text tower; SSD for CLIP needs one")
    backbone = registry.load_model(request.model, request.weights, request.device)
    size = backbone.image_size
    forget = _splits(registry, request, [request.forget], "train", size)[request.forget]
    retain = _splits(registry, request, request.retain, "train", size)
    importances, provenance = {}, {}
    for name, split in {request.forget: forget, **retain}.items():
        say(f"importance of {name} ({len(split.items)} train images)")
        got = cache.get(backbone, split, request.batch_size)
        importances[name] = got.values
        provenance[name] = {**got.record, "cached": got.cached}
    model: Any = copy.deepcopy(clip_model(backbone, "unlearning"))
    stats = dampen(
        dict(model.named_parameters()),
        importances[request.forget],
        mean_importance([importances[name] for name in request.retain]),
        request.alpha,
        request.lam,
    )
    request.out.parent.mkdir(parents=True, exist_ok=True)
    save_weights(model, request.out)
    name = unlearned_name(request.model, request.forget)
    record: dict[str, Any] = {
        "schema": SCHEMA,
        "name": name,
        "base_model": request.model,
        "base_weights_id": backbone.weights_id,
        "forget": request.forget,
        "retain": list(request.retain),
        "alpha": request.alpha,
        "lambda": request.lam,
        "excluded": list(EXCLUDED),
        "importance_batch_size": request.batch_size,
        "importances": provenance,
        "dampening": stats.to_dict(),
        "weights": {"file": request.out.name, "sha256": file_sha256(request.out)},
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "package": {"name": "fewtrans-board", "version": __version__},
    }
    write_record(request.out, record)
    from fewtrans_board.models.unlearned_names import load_unlearned

    after = load_unlearned(entry.obj, name, request.out, request.device, registry=registry)
    evaluated = [request.forget, *(request.retain if request.evaluate_retain else [])]
    tests = _splits(registry, request, evaluated, "test", size)
    record["zero_shot"] = before_after(backbone, after, tests, say)
    write_record(request.out, record)
    (store or UnlearnedStore()).register(request.out)
    return record


def before_after(
    before: Backbone, after: Backbone, splits: Mapping[str, LabeledSplit], say: Reporter
) -> dict[str, dict[str, Any]]:
    """Zero-shot accuracy (mean ± CI) of both models on every split."""
    out = {}
    for name, split in splits.items():
        say(f"zero-shot on {name} ({len(split.items)} test images)")
        out[name] = {
            "before": zero_shot(before, split).summary(),
            "after": zero_shot(after, split).summary(),
        }
    return out
