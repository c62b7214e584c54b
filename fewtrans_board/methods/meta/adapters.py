"""Test-time adapters of the meta-learners: each method's rule on a (meta-trained) backbone.

ProtoNet, MatchingNet, RelationNet and MetaOpt (and their simplified variants) classify with
their episode head on frozen features (so the runner's feature cache serves them; RelationNet
reads pixels, since its relation module compares feature maps); MAML and Proto-MAML adapt a
copy of the encoder and a linear head with a few SGD steps on the support set. With a
``meta-trained`` checkpoint of the same method the learned head comes from it. Without one,
ProtoNet, MatchingNet-no-FCE, MetaOpt (scale 1) and Proto-MAML run on any backbone as they
are; MAML starts its head at zero; MatchingNet (FCE) and RelationNet run freshly initialised
modules (seeded by the runner per configuration), the untrained twin, and say so in each
episode's record.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from fewtrans_board.api.adapter import Adapter, AdapterConfig, hparam
from fewtrans_board.methods.meta.methods import METHODS, MetaMethod

if TYPE_CHECKING:
    import torch
    from torch import nn

    from fewtrans_board.api.backbone import Backbone
    from fewtrans_board.api.episode_data import ImageSet, SupportSet

MAP_BATCH = 64


def meta_train_hint(method: str) -> str:
    """How to get the checkpoint whose head ``method`` needs."""
    return f"meta-train --method {method}, then evaluate --model meta-trained --weights CHECKPOINT"


def learned_head(backbone: Backbone, method: str) -> dict[str, torch.Tensor] | None:
    """The head a ``meta-train`` run of ``method`` stored, or ``None`` for other backbones."""
    from fewtrans_board.methods.meta.model import MetaBackbone

    if isinstance(backbone, MetaBackbone) and backbone.method == method:
        return backbone.head
    return None


def embed(backbone: Backbone, method: MetaMethod, images: ImageSet) -> torch.Tensor:
    """What the method's head compares: pooled features, or feature maps (``method.maps``).

    Maps are computed in eval mode without gradients, in batches of :data:`MAP_BATCH`.
    """
    import torch

    from fewtrans_board.methods.meta.features import feature_maps

    if not method.maps:
        return images.features(backbone)
    encoder = backbone.image_encoder
    was_training = encoder.training
    encoder.eval()
    try:
        with torch.no_grad():
            pixels = images.pixels
            return torch.cat(
                [
                    feature_maps(encoder, pixels[i : i + MAP_BATCH].to(backbone.device))
                    for i in range(0, len(pixels), MAP_BATCH)
                ]
            )
    finally:
        encoder.train(was_training)


@dataclass(eq=False)
class EpisodeHeadPredictor:
    """Scores query features with a meta-learner's episode head."""

    backbone: Backbone
    method: MetaMethod
    head: dict[str, torch.Tensor]
    support: torch.Tensor
    labels: torch.Tensor
    n_way: int
    record: dict[str, Any] | None = None

    def predict(self, query: ImageSet) -> torch.Tensor:
        """Episode-head logits of the query images (each query scored on its own)."""
        import torch

        with torch.no_grad():
            features = embed(self.backbone, self.method, query)
            return self.method.logits(self.head, self.support, self.labels, features, self.n_way)


class _EpisodeHeadAdapter(Adapter):
    """Shared fit of the frozen-feature meta-learners."""

    method: ClassVar[str]
    record_key: ClassVar[str] = "head"
    frozen_backbone = True
    training_free = True  # the head is fixed by meta-training; nothing is fitted per episode
    code = "https://github.com/IBM/cdfsl-benchmark"

    @dataclass(frozen=True)
    class Config(AdapterConfig):
        """No hyperparameters: the head is fixed by meta-training."""

    def head_for(self, backbone: Backbone, support: torch.Tensor) -> dict[str, torch.Tensor]:
        """The learned head; without one, a fresh module (``learned`` methods) or nothing.

        A fresh module is drawn from torch's global generator (seeded by the runner per
        configuration): the untrained twin, which the predictor's ``record`` names.
        """
        head = learned_head(backbone, self.method)
        if head is not None:
            return head
        spec = METHODS[self.method]
        if not spec.learned:
            return {}
        shape = tuple(int(n) for n in support.shape[1:]) if spec.maps else None
        fresh = spec.init_head(backbone.feature_dim, map_shape=shape)  # type: ignore[arg-type]
        return {k: v.to(backbone.device) for k, v in fresh.items()}

    def fit(
        self, backbone: Backbone, support: SupportSet, class_names: Sequence[str], config: Any
    ) -> EpisodeHeadPredictor:
        """Embed the support set; the head needs no training at test time."""
        spec = METHODS[self.method]
        features = embed(backbone, spec, support.images)
        labels = support.labels.to(features.device)
        head = self.head_for(backbone, features)
        predictor = EpisodeHeadPredictor(backbone, spec, head, features, labels, support.n_way)
        if spec.learned:
            trained = learned_head(backbone, self.method) is not None
            predictor.record = {
                self.record_key: "meta-trained"
                if trained
                else f"untrained: {meta_train_hint(self.method)}"
            }
        return predictor


class ProtoNetAdapter(_EpisodeHeadAdapter):
    """ProtoNet: nearest prototype by squared Euclidean distance (BSCD-FSL Table 1)."""

    name = method = "protonet"
    description = (
        "ProtoNet: negative squared distance to class prototypes of meta-trained features."
    )
    paper = METHODS["protonet"].paper
    trains = "nothing at test time (encoder meta-trained by 'meta-train --method protonet')"


class MatchingNetAdapter(_EpisodeHeadAdapter):
    """MatchingNet with full-context embeddings (the paper's and CloserLook's version)."""

    name = method = "matchingnet"
    record_key = "fce"
    description = (
        "MatchingNet: cosine attention between full-context embeddings (bi-LSTM over the "
        "support set, attention-LSTM read-out of each query)."
    )
    paper = METHODS["matchingnet"].paper
    code = METHODS["matchingnet"].code
    trains = "nothing at test time (encoder + FCE LSTMs from 'meta-train --method matchingnet')"


class MatchingNetNoFceAdapter(_EpisodeHeadAdapter):
    """MatchingNet simplified: cosine attention on raw support features (no FCE)."""

    name = method = "matchingnet-nofce"
    description = (
        "MatchingNet without full-context embeddings (simplified variant): cosine attention "
        "over support items."
    )
    paper = METHODS["matchingnet-nofce"].paper
    trains = (
        "nothing at test time (encoder meta-trained by 'meta-train --method matchingnet-nofce')"
    )


class RelationNetAdapter(_EpisodeHeadAdapter):
    """RelationNet: a meta-learned convolutional relation module scores query-class map pairs."""

    name = method = "relationnet"
    record_key = "relation_module"
    frozen_backbone = False  # reads pixels: the relation module compares feature maps
    description = (
        "RelationNet: meta-learned conv relation module on the query's and the class's mean "
        "feature maps."
    )
    paper = METHODS["relationnet"].paper
    code = METHODS["relationnet"].code
    trains = (
        "nothing at test time (encoder + relation module from 'meta-train --method relationnet')"
    )


class RelationNetMlpAdapter(_EpisodeHeadAdapter):
    """RelationNet simplified: an MLP relation module on pooled features."""

    name = method = "relationnet-mlp"
    record_key = "relation_module"
    description = (
        "RelationNet with an MLP relation module on pooled query and class-mean features "
        "(simplified variant)."
    )
    paper = METHODS["relationnet-mlp"].paper
    trains = (
        "nothing at test time (encoder + relation MLP from 'meta-train --method relationnet-mlp')"
    )


class _ScaledHeadAdapter(_EpisodeHeadAdapter):
    def head_for(self, backbone: Backbone, support: torch.Tensor) -> dict[str, torch.Tensor]:
        """The learned logit scale, or scale 1 on other backbones."""
        import torch

        return learned_head(backbone, self.method) or {
            "scale": torch.ones(1, device=backbone.device)
        }


class MetaOptAdapter(_ScaledHeadAdapter):
    """MetaOpt: a multi-class (Crammer-Singer) SVM fit to the support features."""

    name = method = "metaopt"
    description = (
        "MetaOptNet-SVM: Crammer-Singer multi-class SVM (C 0.1) fit to support features, "
        "scaled scores."
    )
    paper = METHODS["metaopt"].paper
    code = METHODS["metaopt"].code
    trains = (
        "an SVM per episode, no gradient steps (encoder + logit scale: 'meta-train --method "
        "metaopt')"
    )


class MetaOptRidgeAdapter(_ScaledHeadAdapter):
    """MetaOpt simplified: closed-form ridge-regression classifier on the support features."""

    name = method = "metaopt-ridge"
    description = (
        "MetaOpt with a closed-form ridge classifier on support features, lambda 50 "
        "(simplified variant)."
    )
    paper = METHODS["metaopt-ridge"].paper
    code = METHODS["metaopt-ridge"].code
    trains = "nothing at test time (encoder + logit scale from 'meta-train --method metaopt-ridge')"


@dataclass(eq=False)
class MamlPredictor:
    """The adapted encoder copy and head rows of one episode."""

    encoder: nn.Module
    rows: dict[str, torch.Tensor]
    device: str
    record: dict[str, Any] | None = None

    def predict(self, query: ImageSet) -> torch.Tensor:
        """Logits of the adapted model (eval mode: no query affects another)."""
        import torch

        self.encoder.eval()
        with torch.no_grad():
            features: torch.Tensor = self.encoder(query.pixels.to(self.device)).float()
            return features @ self.rows["weight"].T + self.rows["bias"]


class _InnerLoopAdapter(Adapter):
    """Shared fit of MAML and Proto-MAML: SGD on a copy of the encoder and a linear head."""

    method: ClassVar[str]
    code = METHODS["maml"].code

    @dataclass(frozen=True)
    class Config(AdapterConfig):
        """MAML's inner loop at test time (CloserLook: 5 steps of lr 0.01)."""

        lr: float = hparam(0.01, "Inner-loop SGD learning rate.", hpe="lr")
        steps: int = hparam(5, "Inner-loop SGD steps on the whole support set.", hpe="epochs")

    def initial_head(
        self, backbone: Backbone, n_way: int
    ) -> tuple[dict[str, torch.Tensor] | None, dict[str, Any] | None]:
        """The head the inner loop starts from (``None``: prototypes) and what to record."""
        return None, None

    def fit(
        self, backbone: Backbone, support: SupportSet, class_names: Sequence[str], config: Any
    ) -> MamlPredictor:
        """Adapt a copy of the encoder (eval-mode BatchNorm) and the head."""
        from fewtrans_board.methods.meta.maml import maml_adapt

        head, record = self.initial_head(backbone, support.n_way)
        encoder, rows = maml_adapt(
            backbone.image_encoder,
            support.images.pixels.to(backbone.device),
            support.labels.to(backbone.device),
            support.n_way,
            config.steps,
            config.lr,
            head,
        )
        encoder.requires_grad_(False)
        rows = {k: v.detach() for k, v in rows.items()}
        return MamlPredictor(encoder, rows, backbone.device, record)


class MamlAdapter(_InnerLoopAdapter):
    """MAML: a few SGD steps on the support set from the meta-learned encoder and linear head."""

    name = method = "maml"
    description = (
        "First-order MAML: SGD steps on the support set from the meta-learned encoder and "
        "linear head (CloserLook)."
    )
    paper = METHODS["maml"].paper
    trains = (
        "encoder + linear head, a few SGD steps from the meta-learned init "
        "('meta-train --method maml'; elsewhere the head starts at zero)"
    )

    def initial_head(
        self, backbone: Backbone, n_way: int
    ) -> tuple[dict[str, torch.Tensor] | None, dict[str, Any] | None]:
        """The meta-learned head when it has ``n_way`` rows, else a zero head (recorded)."""
        import torch

        head = learned_head(backbone, self.method)
        if head is not None and head["weight"].shape == (n_way, backbone.feature_dim):
            return head, {"head_init": "meta-learned"}
        why = (
            f"the checkpoint's head has {len(head['weight'])} ways"
            if head is not None
            else meta_train_hint(self.method)
        )
        zeros = {
            "weight": torch.zeros(n_way, backbone.feature_dim, device=backbone.device),
            "bias": torch.zeros(n_way, device=backbone.device),
        }
        return zeros, {"head_init": f"zeros: {why}"}


class ProtoMamlAdapter(_InnerLoopAdapter):
    """Proto-MAML: MAML whose head starts from the support prototypes in every episode."""

    name = method = "proto-maml"
    description = (
        "First-order Proto-MAML: SGD steps on the support set from the meta-learned encoder, "
        "prototype-initialised head."
    )
    paper = METHODS["proto-maml"].paper
    trains = (
        "encoder + prototype-initialised head, a few SGD steps "
        "(init: 'meta-train --method proto-maml')"
    )


ADAPTERS: tuple[type[Adapter], ...] = (  # registered by default_plugins.adapters
    ProtoNetAdapter,
    MatchingNetAdapter,
    MatchingNetNoFceAdapter,
    RelationNetAdapter,
    RelationNetMlpAdapter,
    MetaOptAdapter,
    MetaOptRidgeAdapter,
    MamlAdapter,
    ProtoMamlAdapter,
)
