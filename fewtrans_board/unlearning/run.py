"""The ``unlearn`` pipeline: importances, dampening, weights, record, zero-shot before/after.

The strength is the paper's (alpha 30, lambda 1) or given, or searched
(:mod:`.strength`): ``knowledge_loss`` targets a share of general knowledge lost on the
validation datasets (name ``MODEL+unlearn:DATASET@tklN``), ``match_oracle`` a linear probe
as good as on a model trained without the dataset, on the forget dataset's train split
(name ``MODEL+unlearn:DATASET@oracle``). The record keeps every strength tried.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fewtrans_board.core.errors import FewtransError
from fewtrans_board.core.version import __version__
from fewtrans_board.models.unlearned_names import (
    ORACLE_VARIANT,
    severity_variant,
    split_name,
    unlearned_name,
)
from fewtrans_board.models.unlearned_records import SCHEMA, UnlearnedStore, write_record
from fewtrans_board.unlearning.data import LabeledSplit, check_datasets, load_split, root_of
from fewtrans_board.unlearning.importance import ImportanceCache, Importances, mean_importance
from fewtrans_board.unlearning.sets import (
    ALPHA,
    IMPORTANCE_BATCH,
    KNOWLEDGE_LOSS_TOLERANCE,
    LAMBDA,
    ORACLE_GAP_TOLERANCE,
    default_validation,
)
from fewtrans_board.unlearning.ssd import EXCLUDED, dampen
from fewtrans_board.unlearning.strength import MAX_EVALUATIONS, StrengthSearch, search_strength
from fewtrans_board.unlearning.zeroshot import zero_shot

if TYPE_CHECKING:
    from fewtrans_board.api.backbone import Backbone
    from fewtrans_board.registry.lookup import Registry

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
        knowledge_loss: search the strength so that the validation datasets lose at most
            this share of their zero-shot knowledge (``0.03``, ``0.25``, ``0.5``, ``0.9``).
        match_oracle: search the strength so that a probe on the unlearned model matches
            this model, trained without the forget classes.
        oracle_weights: local checkpoint of the ``match_oracle`` model.
        oracle_adapter: the probe of ``match_oracle`` (a frozen-feature adapter).
        validation: where knowledge loss is measured (``None``: the default for ``forget``).
        weighting: the TKL weighting the knowledge-loss search targets (``mmd``, ``uniform``).
        tolerance: how close a search must come (a fraction of knowledge, or probe points;
            ``None``: the defaults of :mod:`.sets`).
        max_evaluations: at most this many strengths a search evaluates (``None``: the
            default of :mod:`.strength`); a search stopped short keeps the closest point.
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
    knowledge_loss: float | None = None
    match_oracle: str | None = None
    oracle_weights: Path | None = None
    oracle_adapter: str = "linear-probe"
    validation: Sequence[str] | None = None
    weighting: str = "mmd"
    tolerance: float | None = None
    max_evaluations: int | None = None

    @property
    def variant(self) -> str | None:
        """The name's variant: ``tklN``, ``oracle`` or ``None`` (a fixed strength)."""
        if self.knowledge_loss is not None:
            return severity_variant(self.knowledge_loss)
        return ORACLE_VARIANT if self.match_oracle else None

    @property
    def searched(self) -> bool:
        """Whether the strength is searched rather than fixed."""
        return self.knowledge_loss is not None or self.match_oracle is not None

    def validation_sets(self) -> list[str]:
        """The validation datasets (given, or the default of the forget dataset)."""
        return list(self.validation) if self.validation else list(default_validation(self.forget))


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
    if request.knowledge_loss is not None and request.match_oracle is not None:
        raise FewtransError(
            "--knowledge-loss and --match-oracle each choose the strength; give one of them"
        )
    if request.searched and (request.alpha != ALPHA or request.lam != LAMBDA):
        raise FewtransError(
            "--alpha/--lambda fix the SSD strength, --knowledge-loss/--match-oracle search it; "
            "give one or the other"
        )
    steering = (request.validation, request.tolerance, request.max_evaluations)
    if not request.searched and any(value is not None for value in steering):
        raise FewtransError(
            "--validation, --tolerance and --max-evaluations steer a --knowledge-loss/"
            "--match-oracle search; a fixed strength uses none of them (measure its loss with 'fewtrans-board tkl')"
        )
    if request.knowledge_loss is not None:
        severity_variant(request.knowledge_loss)  # a whole percentage between 1 and 99
    if request.searched and request.forget in request.validation_sets():
        raise FewtransError(
            f"{request.forget!r} is the forget set; knowledge loss is measured on other "
            "datasets (--validation)"
        )
    if request.match_oracle is not None and split_name(request.match_oracle)[1] is not None:
        raise FewtransError(
            f"--match-oracle names a model trained without the forget classes, not the "
            f"unlearned model {request.match_oracle!r}"
        )


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
    from fewtrans_board.models.unlearned_names import load_unlearned

    entry = _checked_inputs(registry, request)
    say = report or (lambda _msg: None)
    backbone = registry.load_model(request.model, request.weights, request.device)
    size = backbone.image_size
    forget = _splits(registry, request, [request.forget], "train", size)[request.forget]
    retain = _splits(registry, request, request.retain, "train", size)
    importances, provenance = _importances(
        cache or ImportanceCache(), backbone, {request.forget: forget, **retain}, request, say
    )
    retained = mean_importance([importances[name] for name in request.retain])
    search: dict[str, Any] | None = None
    alpha, lam = request.alpha, request.lam
    if request.searched:
        search = choose_strength(
            registry, request, backbone, forget, importances[request.forget], retained, say
        )
        alpha, lam = search["chosen"]["alpha"], search["chosen"]["lambda"]
    model: Any = copy.deepcopy(clip_model(backbone, "unlearning"))
    stats = dampen(
        dict(model.named_parameters()), importances[request.forget], retained, alpha, lam
    )
    request.out.parent.mkdir(parents=True, exist_ok=True)
    save_weights(model, request.out)
    name = unlearned_name(request.model, request.forget, request.variant)
    record = _record(request, name, backbone.weights_id, (alpha, lam), provenance, stats.to_dict())
    if search is not None:
        record["variant"] = request.variant
        record["search"] = search
    write_record(request.out, record)
    after = load_unlearned(entry.obj, name, request.out, request.device, registry=registry)
    evaluated = [request.forget, *(request.retain if request.evaluate_retain else [])]
    tests = _splits(registry, request, evaluated, "test", size)
    record["zero_shot"] = before_after(backbone, after, tests, say)
    write_record(request.out, record)
    (store or UnlearnedStore()).register(request.out)
    return record


def _checked_inputs(registry: Registry, request: UnlearnRequest) -> Any:
    """Refuse bad inputs before any work; the registry entry of the model to unlearn."""
    _check(request)
    named: dict[str, Sequence[str]] = {"--forget": [request.forget], "--retain": request.retain}
    if request.searched:
        named["--validation"] = request.validation_sets()
    check_datasets(registry, named, request.data_dir, request.roots)
    if request.match_oracle is not None:
        registry.model(request.match_oracle)  # an unknown oracle is refused before any work
    entry = registry.model(request.model)
    if not entry.obj.has_text:
        raise FewtransError(f"{request.model!r} has no text tower; SSD for CLIP needs one")
    return entry


def _importances(
    cache: ImportanceCache,
    backbone: Any,
    splits: dict[str, Any],
    request: UnlearnRequest,
    say: Reporter,
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """Each split's parameter importances (cached) and where each came from."""
    importances, provenance = {}, {}
    for name, split in splits.items():
        say(f"importance of {name} ({len(split.items)} train images)")
        got = cache.get(backbone, split, request.batch_size)
        importances[name] = got.values
        provenance[name] = {**got.record, "cached": got.cached}
    return importances, provenance


def _record(
    request: UnlearnRequest,
    name: str,
    base_weights_id: str,
    strength: tuple[float, float],
    provenance: dict[str, dict[str, Any]],
    dampening: dict[str, Any],
) -> dict[str, Any]:
    """The unlearning record of the weights just written to ``request.out``."""
    from fewtrans_board.models.weights import file_sha256

    alpha, lam = strength
    return {
        "schema": SCHEMA,
        "name": name,
        "base_model": request.model,
        "base_weights_id": base_weights_id,
        "forget": request.forget,
        "retain": list(request.retain),
        "alpha": alpha,
        "lambda": lam,
        "excluded": list(EXCLUDED),
        "importance_batch_size": request.batch_size,
        "importances": provenance,
        "dampening": dampening,
        "weights": {"file": request.out.name, "sha256": file_sha256(request.out)},
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "package": {"name": "fewtrans-board", "version": __version__},
    }


def choose_strength(
    registry: Registry,
    request: UnlearnRequest,
    backbone: Backbone,
    forget_train: LabeledSplit,
    forget_importance: Importances,
    retain_importance: Importances,
    say: Reporter,
) -> dict[str, Any]:
    """Search the strength (:mod:`.strength`) for a knowledge-loss target or the oracle.

    Knowledge loss is read on the validation datasets' test splits (and, for MMD weights,
    their train splits); the oracle probe on the forget dataset's train split. Nothing reads
    the forget dataset's test split. ``backbone`` is dampened in place per point and
    restored.

    Returns:
        The record's ``search`` entry: mode, target, tolerance, every point, the chosen one,
        whether it was reached, the knowledge baseline and, for the oracle, the probe setup
        and the gap at the paper's default strength.
    """
    from fewtrans_board.unlearning.targets import (
        Dampener,
        knowledge_baseline,
        knowledge_loss_measure,
        oracle_measure,
        oracle_probe,
    )

    size = backbone.image_size
    validation = request.validation_sets()
    say(f"knowledge baseline on {', '.join(validation)} ({request.weighting} weights)")
    baseline = knowledge_baseline(
        backbone,
        forget_train,
        _splits(registry, request, validation, "train", size) if request.weighting == "mmd" else {},
        _splits(registry, request, validation, "test", size),
        request.weighting,
    )
    dampener = Dampener(backbone, forget_importance, retain_importance)
    result: StrengthSearch
    extra: dict[str, Any] = {"knowledge": baseline.to_dict()}
    budget = request.max_evaluations or MAX_EVALUATIONS
    if request.knowledge_loss is not None:
        tolerance = KNOWLEDGE_LOSS_TOLERANCE if request.tolerance is None else request.tolerance
        measure = knowledge_loss_measure(dampener, backbone, baseline, say)
        result = search_strength(
            measure, request.knowledge_loss, tolerance, "at-most", max_evaluations=budget
        )
        mode = "knowledge-loss"
    else:
        assert request.match_oracle is not None
        say(f"{request.oracle_adapter} on {request.match_oracle} (the oracle), train split")
        scratch = registry.load_model(request.match_oracle, request.oracle_weights, request.device)
        probe = oracle_probe(
            registry, request.match_oracle, scratch, forget_train, request.oracle_adapter
        )
        tolerance = ORACLE_GAP_TOLERANCE if request.tolerance is None else request.tolerance
        measure = oracle_measure(registry, dampener, backbone, probe, say)
        result = search_strength(measure, 0.0, tolerance, "nearest", max_evaluations=budget)
        with dampener.applied(result.chosen.alpha, result.chosen.lam):
            result.chosen.detail.update(baseline.measure(backbone))
        mode = "oracle"
        extra["oracle"] = probe.to_dict()
    out = {"mode": mode, **result.to_dict(), **extra}
    default = next((p for p in result.points if p.alpha == ALPHA), None)
    if default is not None:
        out["at_default_strength"] = default.to_dict()
    if not result.reached:
        say(
            f"the search did not reach its target within {tolerance:g}; kept the closest "
            f"strength (alpha={result.chosen.alpha:.4g})"
        )
    return out


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
