"""Test-time adapters of the meta-learners: each method's rule on a (meta-trained) backbone.

ProtoNet, MatchingNet, RelationNet and MetaOpt classify with their episode head on frozen
features (so the runner's feature cache serves them); MAML adapts a copy of the encoder and
its head with a few SGD steps on the support set. With a ``meta-trained`` checkpoint the
learned head comes from it; ProtoNet, MatchingNet, MetaOpt (scale 1) and MAML also run on
any backbone (MAML then adapts from the backbone's own weights). RelationNet needs the
relation module of its own checkpoint; without one it runs an untrained module and says so in
each episode's record.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from fewtrans_board.api.adapter import Adapter, AdapterConfig, hparam
from fewtrans_board.methods.meta.methods import METHODS

if TYPE_CHECKING:
    import torch
    from torch import nn

    from fewtrans_board.api.backbone import Backbone
    from fewtrans_board.api.episode_data import ImageSet, SupportSet

META_TRAIN_HINT = (
    "meta-train --method relationnet, then evaluate --model meta-trained --weights CHECKPOINT"
)


def learned_head(backbone: Backbone, method: str) -> dict[str, torch.Tensor] | None:
    """The head a ``meta-train`` run of ``method`` stored, or ``None`` for other backbones."""
    from fewtrans_board.methods.meta.model import MetaBackbone

    if isinstance(backbone, MetaBackbone) and backbone.method == method:
        return backbone.head
    return None


class EpisodeHeadPredictor:
    """Scores query features with a meta-learner's episode head."""

    def __init__(
        self,
        backbone: Backbone,
        method: str,
        head: dict[str, torch.Tensor],
        support: torch.Tensor,
        labels: torch.Tensor,
        n_way: int,
    ) -> None:
        self.backbone = backbone
        self.method = METHODS[method]
        self.head = head
        self.support = support
        self.labels = labels
        self.n_way = n_way
        self.record: dict[str, Any] | None = None

    def predict(self, query: ImageSet) -> torch.Tensor:
        """Episode-head logits of the query images (each query scored on its own)."""
        import torch

        with torch.no_grad():
            features = query.features(self.backbone)
            return self.method.logits(self.head, self.support, self.labels, features, self.n_way)


class _EpisodeHeadAdapter(Adapter):
    """Shared fit of the frozen-feature meta-learners."""

    method: ClassVar[str]
    frozen_backbone = True
    training_free = True  # the head is fixed by meta-training; nothing is fitted per episode
    code = "https://github.com/IBM/cdfsl-benchmark"

    @dataclass(frozen=True)
    class Config(AdapterConfig):
        """No hyperparameters: the head is fixed by meta-training."""

    def head_for(self, backbone: Backbone) -> dict[str, torch.Tensor]:
        """The learned head, or what the method uses without one."""
        return learned_head(backbone, self.method) or {}

    def fit(
        self,
        backbone: Backbone,
        support: SupportSet,
        class_names: Sequence[str],
        config: Any,
    ) -> EpisodeHeadPredictor:
        """Embed the support set; the head needs no training at test time."""
        features = support.images.features(backbone)
        labels = support.labels.to(features.device)
        head = self.head_for(backbone)
        return EpisodeHeadPredictor(backbone, self.method, head, features, labels, support.n_way)


class ProtoNetAdapter(_EpisodeHeadAdapter):
    """ProtoNet: nearest prototype by squared Euclidean distance (BSCD-FSL Table 1)."""

    name = method = "protonet"
    description = (
        "ProtoNet: negative squared distance to class prototypes of meta-trained features."
    )
    paper = METHODS["protonet"].paper
    trains = "nothing at test time (encoder meta-trained by 'meta-train --method protonet')"


class MatchingNetAdapter(_EpisodeHeadAdapter):
    """MatchingNet: softmax attention over support items by cosine similarity."""

    name = method = "matchingnet"
    description = "MatchingNet: cosine attention over support items (no full-context embeddings)."
    paper = METHODS["matchingnet"].paper
    trains = "nothing at test time (encoder meta-trained by 'meta-train --method matchingnet')"


class RelationNetAdapter(_EpisodeHeadAdapter):
    """RelationNet: a meta-learned relation module scores query-class pairs."""

    name = method = "relationnet"
    description = "RelationNet: meta-learned relation module on query and summed class features."
    paper = METHODS["relationnet"].paper
    trains = (
        "nothing at test time (encoder + relation module from 'meta-train --method relationnet')"
    )

    def head_for(self, backbone: Backbone) -> dict[str, torch.Tensor]:
        """The relation module of a relationnet checkpoint, else an untrained one.

        RelationNet has no head-only version: without its checkpoint the module is freshly
        initialised (seeded by the runner per configuration), which is the untrained twin;
        the predictor's ``record`` says so in the results' provenance.
        """
        from fewtrans_board.methods.meta.methods import METHODS

        head = learned_head(backbone, self.method)
        if head is not None:
            return head
        fresh = METHODS[self.method].init_head(backbone.feature_dim)
        return {k: v.detach().to(backbone.device) for k, v in fresh.items()}

    def fit(
        self,
        backbone: Backbone,
        support: SupportSet,
        class_names: Sequence[str],
        config: Any,
    ) -> EpisodeHeadPredictor:
        """Embed the support set and record whether the relation module was meta-trained."""
        predictor = super().fit(backbone, support, class_names, config)
        trained = learned_head(backbone, self.method) is not None
        predictor.record = {
            "relation_module": "meta-trained" if trained else f"untrained: {META_TRAIN_HINT}"
        }
        return predictor


class MetaOptAdapter(_EpisodeHeadAdapter):
    """MetaOpt: closed-form ridge-regression classifier on the support features."""

    name = method = "metaopt"
    description = "MetaOptNet-RR: closed-form ridge classifier on support features (lambda 50)."
    paper = METHODS["metaopt"].paper
    code = METHODS["metaopt"].code
    trains = "nothing at test time (encoder + logit scale from 'meta-train --method metaopt')"

    def head_for(self, backbone: Backbone) -> dict[str, torch.Tensor]:
        """The learned logit scale, or scale 1 on other backbones."""
        import torch

        return learned_head(backbone, self.method) or {
            "scale": torch.ones(1, device=backbone.device)
        }


class MamlPredictor:
    """The adapted encoder copy and head rows of one episode."""

    def __init__(self, encoder: nn.Module, rows: dict[str, torch.Tensor], device: str) -> None:
        self.encoder = encoder
        self.rows = rows
        self.device = device

    def predict(self, query: ImageSet) -> torch.Tensor:
        """Logits of the adapted model (eval mode: no query affects another)."""
        import torch

        self.encoder.eval()
        with torch.no_grad():
            features: torch.Tensor = self.encoder(query.pixels.to(self.device)).float()
            return features @ self.rows["weight"].T + self.rows["bias"]


class MamlAdapter(Adapter):
    """MAML: a few SGD steps from the meta-learned initialisation on the support set."""

    name = "maml"
    description = "First-order MAML: SGD steps on the support set from the meta-learned init (Proto-MAML head)."
    paper = METHODS["maml"].paper
    code = METHODS["maml"].code
    trains = (
        "encoder + prototype-initialised head, a few SGD steps (init: 'meta-train --method maml')"
    )

    @dataclass(frozen=True)
    class Config(AdapterConfig):
        """MAML's inner loop at test time (CloserLook: 5 steps of lr 0.01)."""

        lr: float = hparam(0.01, "Inner-loop SGD learning rate.", hpe="lr")
        steps: int = hparam(5, "Inner-loop SGD steps on the whole support set.", hpe="epochs")

    def fit(
        self,
        backbone: Backbone,
        support: SupportSet,
        class_names: Sequence[str],
        config: Any,
    ) -> MamlPredictor:
        """Adapt a copy of the encoder (eval-mode BatchNorm) and a prototype-initialised head."""
        from fewtrans_board.methods.meta.maml import maml_adapt

        encoder, rows = maml_adapt(
            backbone.image_encoder,
            support.images.pixels.to(backbone.device),
            support.labels.to(backbone.device),
            support.n_way,
            config.steps,
            config.lr,
        )
        encoder.requires_grad_(False)
        return MamlPredictor(encoder, {k: v.detach() for k, v in rows.items()}, backbone.device)


ADAPTERS: tuple[type[Adapter], ...] = (  # registered by default_plugins.adapters
    ProtoNetAdapter,
    MatchingNetAdapter,
    RelationNetAdapter,
    MetaOptAdapter,
    MamlAdapter,
)
