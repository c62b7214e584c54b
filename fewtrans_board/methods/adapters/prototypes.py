"""Mean-centroid (ProtoNet head): nearest class mean of frozen features, no training.

By default a query's logits are the negative squared Euclidean distances to the class
means (ProtoNet's). BSCD-FSL's mean-centroid classifier (§5.2.1, Eq. 2) computes the means
as ProtoNet does and scores them with the cosine similarity (its distance is the negative
cosine similarity): recipe ``bscd``, the one configuration its ``published`` runs use.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fewtrans_board.api.adapter import Adapter, AdapterConfig, hparam
from fewtrans_board.api.recipe import Recipe

if TYPE_CHECKING:
    import torch

    from fewtrans_board.api.backbone import Backbone
    from fewtrans_board.api.episode_data import ImageSet, SupportSet

DISTANCES = ("euclidean", "cosine")
"""``euclidean``: logits ``-||f(x) - c_k||^2`` (ProtoNet); ``cosine``: ``cos(f(x), c_k)``."""


class CentroidPredictor:
    """Scores each query against the class centroids (:data:`DISTANCES`)."""

    def __init__(
        self,
        backbone: Backbone,
        centroids: torch.Tensor,
        normalize: bool,
        distance: str = "euclidean",
    ) -> None:
        self.backbone = backbone
        self.centroids = centroids
        self.normalize = normalize
        self.distance = distance

    def predict(self, query: ImageSet) -> torch.Tensor:
        """Return ``-||f(x) - c_k||^2`` or ``cos(f(x), c_k)`` for every class ``k``."""
        import torch

        from fewtrans_board.blocks.training import normalized

        features = query.features(self.backbone)
        if self.normalize:
            features = normalized(features)
        if self.distance == "cosine":
            return normalized(features) @ normalized(self.centroids).t()
        return -torch.cdist(features, self.centroids).pow(2)


class MeanCentroidAdapter(Adapter):
    """ProtoNet head: classify by the nearest support-class mean (BSCD-FSL baseline)."""

    name = "mean-centroid"
    description = "Nearest class mean of frozen features (ProtoNet head); no training."
    paper = "Snell et al., Prototypical Networks for Few-shot Learning, NeurIPS 2017"
    code = "https://github.com/IBM/cdfsl-benchmark/blob/master/methods/protonet.py"
    trains = "nothing (class means of frozen features)"
    frozen_backbone = True
    training_free = True
    recipes = (
        Recipe(
            name="bscd",
            source=(
                "Guo et al., BSCD-FSL, ECCV 2020, §5.2.1 'Mean-centroid classifier' (Eq. 2: "
                "the class prototypes computed as in ProtoNet, the mean of the support "
                "embeddings; p(y = k | x) = softmax_k(-d(f(x), c_k)) with d the negative "
                "cosine similarity) and Table 3 'Mean-centroid'; IBM/cdfsl-benchmark "
                "methods/protonet.py (prototypes: the mean of the support features)"
            ),
            values={"distance": "cosine", "normalize": False},
            notes=(
                "Nothing is tuned or trained: the recipe is the paper's one configuration. "
                "Table 3's caption says 'for fine-tuning' and its Linear row is Table 2's "
                "'Ft All'; the paper does not say how a mean-centroid classifier fine-tunes "
                "the backbone (the released code has no mean-centroid script), so the "
                "recipe scores the frozen features (Table 2's fixed extractor). The paper's "
                "backbone is a ResNet-10 pretrained on miniImageNet at 224 px; the recipe "
                "runs on the backbone the submission names."
            ),
        ),
    )

    @dataclass(frozen=True)
    class Config(AdapterConfig):
        """Mean-centroid options (none is tuned by HPE)."""

        normalize: bool = hparam(
            False, "L2-normalise features before averaging (cosine prototypes)."
        )
        distance: str = hparam(
            "euclidean",
            "How a query scores a class mean: euclidean (-squared distance, ProtoNet) or "
            "cosine (cosine similarity, BSCD-FSL Eq. 2).",
            choices=DISTANCES,
        )

    def fit(
        self, backbone: Backbone, support: SupportSet, class_names: Sequence[str], config: Config
    ) -> CentroidPredictor:
        """Average the support features of each class."""
        import torch

        from fewtrans_board.blocks.training import normalized

        features = support.images.features(backbone)
        if config.normalize:
            features = normalized(features)
        labels = support.labels.to(features.device)
        centroids = torch.stack([features[labels == c].mean(0) for c in range(support.n_way)])
        return CentroidPredictor(backbone, centroids, config.normalize, config.distance)
