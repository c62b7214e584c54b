"""Mean-centroid (ProtoNet head): nearest class mean of frozen features, no training."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fewtrans_board.api.adapter import Adapter, AdapterConfig, hparam

if TYPE_CHECKING:
    import torch

    from fewtrans_board.api.backbone import Backbone
    from fewtrans_board.api.episode_data import ImageSet, SupportSet


class CentroidPredictor:
    """Negative squared Euclidean distance to each class centroid."""

    def __init__(self, backbone: Backbone, centroids: torch.Tensor, normalize: bool) -> None:
        self.backbone = backbone
        self.centroids = centroids
        self.normalize = normalize

    def predict(self, query: ImageSet) -> torch.Tensor:
        """Return ``-||f(x) - c_k||^2`` for every class ``k``."""
        import torch

        features = query.features(self.backbone)
        if self.normalize:
            from fewtrans_board.blocks.training import normalized

            features = normalized(features)
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

    @dataclass(frozen=True)
    class Config(AdapterConfig):
        """Mean-centroid options (none is tuned by HPE)."""

        normalize: bool = hparam(
            False, "L2-normalise features before averaging (cosine prototypes)."
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
        return CentroidPredictor(backbone, centroids, config.normalize)
