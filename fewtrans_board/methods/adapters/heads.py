"""Trained heads on frozen features: the FewTrans linear probe and the cosine classifier.

The linear probe also runs BSCD-FSL's fixed-feature baseline (recipe ``bscd``: torch's
``nn.Linear`` on the raw features, SGD with momentum, dampening and weight decay), and the
cosine classifier BSCD-FSL's cosine-similarity classifier (recipe ``bscd``: the same SGD on
scaled cosine similarities).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from fewtrans_board.api.adapter import Adapter, AdapterConfig, Predictor, hparam
from fewtrans_board.api.fit_options import FitOptions
from fewtrans_board.api.recipe import Recipe
from fewtrans_board.blocks.training import BSCD_HEAD, HeadTrainingConfig, OptimiserConfig

if TYPE_CHECKING:
    import torch
    from torch import nn

    from fewtrans_board.api.backbone import Backbone
    from fewtrans_board.api.episode_data import ImageSet, SupportSet


@dataclass(eq=False)
class HeadStack:
    """``M`` heads trained by :func:`train_heads` (linear or cosine), scored together.

    The first predictor asked about a query set computes every head's logits in one batched
    matmul; the others read their slice (the runner asks each configuration in turn).
    """

    backbone: Backbone
    weights: torch.Tensor
    biases: torch.Tensor | None
    cosine_scale: float | None
    normalize: bool = True
    _last: tuple[ImageSet | None, torch.Tensor | None] = field(default=(None, None), init=False)

    def logits(self, query: ImageSet) -> torch.Tensor:
        """Logits ``[M, Q, C]`` of every head on ``query``."""
        import torch

        from fewtrans_board.blocks.batched_heads import stacked_head_logits
        from fewtrans_board.blocks.training import normalized, upcast

        seen, logits = self._last
        if seen is not query or logits is None:
            with torch.no_grad():
                raw = query.features(self.backbone)
                features = normalized(raw) if self.normalize else upcast(raw)
                logits = stacked_head_logits(features, self.weights, self.biases, self.cosine_scale)
            self._last = (query, logits)
        return logits


class StackedHeadPredictor:
    """Head ``index`` of a :class:`HeadStack`."""

    def __init__(self, stack: HeadStack, index: int) -> None:
        self.stack = stack
        self.index = index

    def predict(self, query: ImageSet) -> torch.Tensor:
        """Logits of this head on the query features (normalised unless the recipe says not)."""
        return self.stack.logits(query)[self.index]


def _fit_many_heads(
    backbone: Backbone,
    support: SupportSet,
    configs: Sequence[Any],
    seeds: Sequence[int],
    cosine: bool,
) -> list[StackedHeadPredictor]:
    """Group configurations that differ only in lr/epochs and train each group batched."""
    import torch

    from fewtrans_board.blocks.batched_heads import train_heads
    from fewtrans_board.blocks.training import head_features, make_head, optimiser_of, schedule_of

    raw = support.images.features(backbone)
    labels = support.labels.to(raw.device)
    dim = raw.shape[1]
    predictors: list[StackedHeadPredictor | None] = [None] * len(configs)
    groups: dict[tuple[Any, ...], list[int]] = {}
    for i, config in enumerate(configs):
        fixed = tuple(
            v for k, v in sorted(config.to_dict().items()) if k not in ("lr_head", "epochs")
        )
        groups.setdefault(fixed, []).append(i)
    for members in groups.values():
        first = configs[members[0]]
        features = head_features(raw, first)
        if cosine:
            inits = []
            for i in members:
                # The draws of torch.manual_seed(seed) + CosineHead, from a private
                # generator: reseeding the global one costs more than these heads train.
                generator = torch.Generator(features.device).manual_seed(seeds[i])
                draw = torch.randn(support.n_way, dim, device=features.device, generator=generator)
                inits.append(draw * dim**-0.5)
            weights, biases = torch.stack(inits), None
            scale = float(configs[members[0]].scale)
        elif getattr(first, "head_init", "fewtrans") == "default":
            heads = []
            for i in members:
                # What torch.manual_seed(seed) + make_head draw (nn.Linear on the CPU), from
                # the CPU generator alone, restored afterwards.
                with torch.random.fork_rng(devices=[]):
                    torch.default_generator.manual_seed(seeds[i])
                    heads.append(make_head(dim, support.n_way, str(features.device), "default"))
            weights = torch.stack([h.weight.detach() for h in heads])
            biases = torch.stack([h.bias.detach() for h in heads])
            scale = None
        else:
            weights = torch.ones(len(members), support.n_way, dim, device=features.device)
            biases = torch.zeros(len(members), support.n_way, device=features.device)
            scale = None
        trained_w, trained_b = train_heads(
            features,
            labels,
            weights,
            biases,
            [configs[i].lr_head for i in members],
            [configs[i].epochs for i in members],
            int(first.batch_size),
            cosine_scale=scale,
            optimiser=optimiser_of(first),
            schedule=schedule_of(first),
        )
        normalize = bool(getattr(first, "normalize_features", True))
        stack = HeadStack(backbone, trained_w, trained_b, scale, normalize)
        for j, i in enumerate(members):
            predictors[i] = StackedHeadPredictor(stack, j)
    return [p for p in predictors if p is not None]


class HeadPredictor:
    """Applies a trained head to frozen query features (L2-normalised unless told not to)."""

    def __init__(self, backbone: Backbone, head: nn.Module, normalize: bool = True) -> None:
        self.backbone = backbone
        self.head = head
        self.normalize = normalize

    def predict(self, query: ImageSet) -> torch.Tensor:
        """Return head logits of the query features."""
        import torch

        from fewtrans_board.blocks.training import normalized, upcast

        with torch.no_grad():
            raw = query.features(self.backbone)
            features = normalized(raw) if self.normalize else upcast(raw)
            return self.head(features)  # type: ignore[no-any-return]


class CosineHead:
    """Weight-normalised linear layer on normalised features with a fixed scale."""

    def __init__(self, dim: int, n_way: int, scale: float, device: str) -> None:
        import torch

        self.weight = torch.nn.Parameter(torch.randn(n_way, dim, device=device) * dim**-0.5)
        self.scale = scale

    def __call__(self, features: torch.Tensor) -> torch.Tensor:
        """Scaled cosine similarity to each class vector."""
        from fewtrans_board.blocks.batched_heads import head_logits

        return head_logits(features, self.weight, None, self.scale)


class _HeadAdapter(Adapter):
    """Trains heads on cached frozen features; ``fit_many`` trains the grid's heads batched."""

    cosine: ClassVar[bool] = False
    frozen_backbone = True

    def fit_many(
        self,
        backbone: Backbone,
        support: SupportSet,
        class_names: Sequence[str],
        configs: Sequence[Any],
        seeds: Sequence[int],
        *,
        options: FitOptions | None = None,
    ) -> list[Predictor]:
        """Train every configuration's head at once; equal to the loop (see batched_heads)."""
        if not (options or FitOptions()).lockstep.heads:
            return super().fit_many(backbone, support, class_names, configs, seeds)
        return list(_fit_many_heads(backbone, support, configs, seeds, cosine=self.cosine))


@dataclass(frozen=True)
class _LinearProbeFields(AdapterConfig):
    """Linear-probe hyperparameters; the defaults are the HPE centre."""

    lr_head: float = hparam(0.2, "Learning rate of the head.", hpe="lr")
    epochs: int = hparam(50, "Passes over the support set.", hpe="epochs")
    batch_size: int = hparam(512, "Optimiser batch size.", min=1)


class LinearProbeAdapter(_HeadAdapter):
    """FewTrans linear probe: a linear head on frozen, L2-normalised features."""

    name = "linear-probe"
    trains = "linear head (backbone frozen)"
    description = "Linear head on frozen L2-normalised features (FewTrans recipe, Adam + cosine)."
    paper = "Luo et al., FewTrans (arXiv:2603.00478), mode 'linear'"
    code = "https://github.com/Frankluox/FewTrans"
    recipes = (
        Recipe(
            name="bscd",
            source=(
                "IBM/cdfsl-benchmark finetune.py with --freeze_backbone (Classifier = "
                "nn.Linear(final_feat_dim, n_way) on the raw features of the backbone in "
                "eval mode; classifier_opt = SGD(lr 0.01, momentum 0.9, dampening 0.9, "
                "weight_decay 0.001); total_epoch 100; batch_size 4; np.random.permutation "
                "per epoch); Guo et al., BSCD-FSL, ECCV 2020, §5.2.1 ('Fixed feature "
                "extractor'), §6 and Table 2 'Fixed'"
            ),
            values=BSCD_HEAD,
            notes=(
                "Support batches follow the toolkit's RandomState(11) permutation per epoch "
                "(finetune.py draws them from the global NumPy stream seeded once with 10). "
                "finetune.py runs a ResNet-10 pretrained on miniImageNet at 224 px; the "
                "recipe runs on whatever backbone the submission names."
            ),
        ),
    )

    @dataclass(frozen=True)
    class Config(HeadTrainingConfig, _LinearProbeFields):
        """Linear-probe hyperparameters; the defaults are the HPE centre and FewTrans's recipe."""

    def fit(
        self, backbone: Backbone, support: SupportSet, class_names: Sequence[str], config: Config
    ) -> HeadPredictor:
        """Train the head on cached support features."""
        from fewtrans_board.blocks.training import head_features, train_linear_head

        features = head_features(support.images.features(backbone), config)
        labels = support.labels.to(features.device)
        head = train_linear_head(features, labels, support.n_way, config)
        return HeadPredictor(backbone, head, config.normalize_features)


BSCD_COSINE = {
    **{k: v for k, v in BSCD_HEAD.items() if k not in ("normalize_features", "head_init")},
    "scale": 2.0,
}
"""BSCD-FSL's cosine classifier: the linear classifier's SGD (``classifier_opt``, 100 epochs
of batch 4) on scaled cosine similarities, distLinear's scale 2 (at most 200 classes)."""


@dataclass(frozen=True)
class _CosineFields(AdapterConfig):
    """Cosine-classifier hyperparameters; the defaults are the HPE centre."""

    lr_head: float = hparam(0.01, "Learning rate of the class weights.", hpe="lr")
    epochs: int = hparam(50, "Passes over the support set.", hpe="epochs")
    scale: float = hparam(10.0, "Fixed temperature multiplying cosine similarities.", above=0)
    batch_size: int = hparam(512, "Optimiser batch size.", min=1)


@dataclass(frozen=True)
class _CosineTraining(OptimiserConfig):
    """:class:`OptimiserConfig` plus SGD's dampening (BSCD-FSL's ``classifier_opt``)."""

    dampening: float = hparam(
        0.0, "SGD dampening of the momentum buffer (sgd only; BSCD-FSL: 0.9).", min=0, max=1
    )


class CosineClassifierAdapter(_HeadAdapter):
    """Baseline++ cosine classifier trained on the support set (BSCD-FSL baseline)."""

    name = "cosine-classifier"
    trains = "weight-normalised class vectors (backbone frozen)"
    description = "Cosine-similarity classifier (Baseline++) trained on frozen normalised features."
    paper = "Chen et al., A Closer Look at Few-shot Classification, ICLR 2019"
    code = "https://github.com/IBM/cdfsl-benchmark"
    cosine = True
    recipes = (
        Recipe(
            name="bscd",
            source=(
                "Guo et al., BSCD-FSL, ECCV 2020, §5.2.1 ('Cosine-similarity based "
                "classifier': class weight vectors initialised randomly, softmax of the "
                "cosine similarity of the feature to each), §6 (SGD with momentum, lr 0.01, "
                "momentum 0.9, 100 epochs) and Table 3 'Cosine-similarity'; IBM/cdfsl-benchmark "
                "methods/baselinefinetune.py with loss_type 'dist' (backbone.distLinear, "
                "CloserLookFewShot's: scale factor 2 for at most 200 classes; SGD(lr 0.01, "
                "momentum 0.9, dampening 0.9, weight_decay 0.001), 100 epochs of batch 4 on "
                "the fixed support features)"
            ),
            values=BSCD_COSINE,
            notes=(
                "The head is the paper's plain cosine (scale * cos(f(x), w_k)): distLinear's "
                "learned per-class weight norm (WeightNorm's g) is not taken, and the class "
                "vectors are drawn N(0, 1/D) rather than by nn.Linear (only their direction "
                "matters to a cosine). Table 3's caption says 'for fine-tuning' and its Linear "
                "row is Table 2's 'Ft All'; the paper does not say how a cosine classifier "
                "fine-tunes the backbone, and the released code trains it on fixed features, "
                "as here. Support batches follow the toolkit's RandomState(11) permutation per "
                "epoch. The paper's backbone is a ResNet-10 pretrained on miniImageNet at "
                "224 px; the recipe runs on the backbone the submission names."
            ),
        ),
    )

    @dataclass(frozen=True)
    class Config(_CosineTraining, _CosineFields):
        """Cosine-classifier hyperparameters; the defaults are the HPE centre (Adam, cosine)."""

    def fit(
        self, backbone: Backbone, support: SupportSet, class_names: Sequence[str], config: Config
    ) -> HeadPredictor:
        """Train weight-normalised class vectors on cached support features."""
        import torch.nn.functional as F

        from fewtrans_board.blocks.training import (
            normalized,
            optimiser_of,
            run_training,
            schedule_of,
        )

        features = normalized(support.images.features(backbone))
        labels = support.labels.to(features.device)
        head = CosineHead(features.shape[1], support.n_way, config.scale, str(features.device))

        def loss_of(batch: Any) -> torch.Tensor:
            return F.cross_entropy(head(features[batch]), labels[batch])

        params = [([head.weight], config.lr_head)]
        run_training(
            params,
            loss_of,
            len(labels),
            config.batch_size,
            config.epochs,
            optimiser_of(config),
            schedule_of(config),
        )
        return HeadPredictor(backbone, head)  # type: ignore[arg-type]
