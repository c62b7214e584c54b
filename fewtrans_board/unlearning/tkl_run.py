"""The ``tkl`` pipeline: zero-shot drops on the validation datasets under all four weightings."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fewtrans_board.core.errors import FewtransError
from fewtrans_board.models.unlearned_names import unlearned_name
from fewtrans_board.unlearning.data import LabeledSplit, check_datasets, load_split, root_of
from fewtrans_board.unlearning.sets import VALIDATION_DATASETS
from fewtrans_board.unlearning.similarity import (
    DatasetFeatures,
    NltkWordNet,
    Taxonomy,
    mmd_distance,
    proxy_a_distance,
    wordnet_distance,
)
from fewtrans_board.unlearning.tkl import WEIGHTINGS, knowledge_loss, tkl_under
from fewtrans_board.unlearning.zeroshot import zero_shot

if TYPE_CHECKING:
    from fewtrans_board.api.backbone import Backbone
    from fewtrans_board.registry.lookup import Registry


@dataclass
class TklRequest:
    """Inputs of a total-knowledge-loss measurement.

    Attributes:
        model: the original (base) model name.
        forget: the forgotten dataset; the unlearned model is ``model+unlearn:forget``.
        unlearned_weights: its weights file (with sidecar record); ``None``: the store.
        validation: the validation datasets (default: the paper's five).
        weights: local checkpoint of the base model.
        data_dir: folder with one local copy per dataset.
        roots: explicit local copies per dataset.
        wordnet: a WordNet database folder for the WordNet weighting (``None``: nltk's).
        device: torch device.
        variant: the unlearned model's strength variant (``tklN``, ``oracle``; ``None``:
            the paper's default strength).
    """

    model: str
    forget: str
    unlearned_weights: Path | None = None
    validation: Sequence[str] = VALIDATION_DATASETS
    weights: Path | None = None
    data_dir: Path | None = None
    roots: Mapping[str, Path] = field(default_factory=dict)
    wordnet: Path | None = None
    device: str = "cpu"
    variant: str | None = None


def dataset_features(backbone: Backbone, split: LabeledSplit) -> DatasetFeatures:
    """Un-normalised image features of a train split and text features of bare class names."""
    import numpy as np
    import torch

    assert backbone.text is not None
    images = [backbone.embed(pixels).cpu().numpy() for pixels, _ in split.batches(256)]
    with torch.no_grad():
        texts = backbone.text.encode(backbone.text.tokenize(split.class_names)).float()
    return DatasetFeatures(
        split.name, np.concatenate(images), texts.cpu().numpy(), split.class_names
    )


def distances(
    forget: DatasetFeatures,
    validation: Mapping[str, DatasetFeatures],
    taxonomy: Callable[[], Taxonomy],
) -> dict[str, dict[str, float] | str]:
    """Distances of every validation dataset to the forget set, per weighting.

    A weighting that cannot be computed (e.g. no WordNet database) maps to the reason.
    """
    out: dict[str, dict[str, float] | str] = {
        "mmd": {v: mmd_distance(forget, f) for v, f in validation.items()},
        "uniform": {v: 1.0 for v in validation},
    }
    try:
        out["pad"] = {v: proxy_a_distance(forget.images, f.images) for v, f in validation.items()}
    except FewtransError as exc:
        out["pad"] = f"unavailable: {exc}"
    try:
        wordnet = taxonomy()
        out["wordnet"] = {
            v: wordnet_distance(wordnet, forget.class_names, f.class_names).distance
            for v, f in validation.items()
        }
    except FewtransError as exc:
        out["wordnet"] = f"unavailable: {exc}"
    return out


def _taxonomy(folder: Path | None) -> Callable[[], Taxonomy]:
    """WordNet for the WordNet weighting: opened now when ``--wordnet`` names a folder.

    Without ``--wordnet`` an unreadable WordNet leaves that weighting unavailable (reported
    with the reason); a folder the user named must serve, so it fails (FewtransError) before
    any work.
    """
    if folder is None:
        return lambda: NltkWordNet(None)
    try:
        wordnet = NltkWordNet(folder)
    except FewtransError as exc:
        raise FewtransError(f"--wordnet {folder}: {exc}") from None
    return lambda: wordnet


def run_tkl(
    registry: Registry, request: TklRequest, report: Callable[[str], None] | None = None
) -> dict[str, Any]:
    """Measure TKL of ``model+unlearn:forget`` on the validation datasets.

    Returns:
        ``{"model", "unlearned", "forget", "losses", "tkl", "forget_zero_shot"}``.
    """
    say = report or (lambda _msg: None)
    if request.forget in request.validation:
        raise FewtransError(
            f"{request.forget!r} is the forget set (--forget); it cannot also validate "
            "(--validation)"
        )
    check_datasets(
        registry,
        {"--forget": [request.forget], "--validation": request.validation},
        request.data_dir,
        request.roots,
    )
    taxonomy = _taxonomy(request.wordnet)
    original = registry.load_model(request.model, request.weights, request.device)
    name = unlearned_name(request.model, request.forget, request.variant)
    unlearned = registry.load_model(name, request.unlearned_weights, request.device)
    size = original.image_size

    def split(dataset: str, partition: str) -> LabeledSplit:
        spec, root = root_of(registry, dataset, request.data_dir, request.roots)
        return load_split(spec, root, partition, size)

    say(f"features of {request.forget}")
    forget_features = dataset_features(original, split(request.forget, "train"))
    features, losses = {}, {}
    for dataset in request.validation:
        say(f"features and zero-shot of {dataset}")
        features[dataset] = dataset_features(original, split(dataset, "train"))
        test = split(dataset, "test")
        losses[dataset] = knowledge_loss(zero_shot(original, test), zero_shot(unlearned, test))
    forget_test = split(request.forget, "test")
    distance = distances(forget_features, features, taxonomy)
    return {
        "model": request.model,
        "unlearned": name,
        "forget": request.forget,
        "losses": [loss.__dict__ for loss in losses.values()],
        "tkl": [tkl_under(w, losses, distance[w]).to_dict() for w in WEIGHTINGS],
        "forget_zero_shot": {
            "before": zero_shot(original, forget_test).summary(),
            "after": zero_shot(unlearned, forget_test).summary(),
        },
    }
