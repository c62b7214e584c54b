"""BSCD-FSL's "Random" baseline (Table 2): a linear head on a randomly initialised network.

The backbone's architecture is re-initialised once with a fixed seed and used as a fixed
feature extractor: a lower bound that shows what pretraining buys. Two rules draw the
weights (``init_rule``): ``reset`` calls every module's own ``reset_parameters`` and draws
parameters outside such modules (like ViT position embeddings) from N(0, 0.02); ``bscd``
then redraws every convolution as the released ResNet-10 initialises itself
(IBM/cdfsl-benchmark ``backbone.py``, ``init_layer``: weights N(0, sqrt(2 / (k_h k_w
C_out))), BatchNorm weight 1 and bias 0, which ``reset_parameters`` already sets). The head
is the FewTrans linear probe by default; recipe ``bscd`` trains BSCD-FSL's fixed-feature
classifier instead (``finetune.py --freeze_backbone``: SGD on ``nn.Linear`` over the raw
features).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fewtrans_board.api.adapter import Adapter, AdapterConfig, hparam
from fewtrans_board.api.recipe import Recipe
from fewtrans_board.blocks.training import BSCD_HEAD, HeadTrainingConfig

if TYPE_CHECKING:
    import torch
    from torch import nn

    from fewtrans_board.api.backbone import Backbone
    from fewtrans_board.api.episode_data import ImageSet, SupportSet

LOOSE_PARAMETER_STD = 0.02
INIT_RULES = ("reset", "bscd")
"""How :func:`reinitialized` draws the weights (see the module docstring)."""


def reinitialized(encoder: nn.Module, seed: int, rule: str = "reset") -> nn.Module:
    """A copy of ``encoder`` with freshly drawn weights (seeded; global RNG untouched).

    Args:
        encoder: the pretrained encoder (not modified).
        seed: the initialisation seed.
        rule: one of :data:`INIT_RULES`.

    Raises:
        ValueError: an unknown rule.
    """
    import torch

    if rule not in INIT_RULES:
        raise ValueError(f"unknown init rule {rule!r}; use {' or '.join(INIT_RULES)}")
    fresh = copy.deepcopy(encoder)
    covered: set[int] = set()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for module in fresh.modules():
            reset = getattr(module, "reset_parameters", None)
            if callable(reset):
                reset()
                covered.update(id(p) for p in module.parameters(recurse=False))
        with torch.no_grad():
            for parameter in fresh.parameters():
                if id(parameter) not in covered:
                    parameter.normal_(0.0, LOOSE_PARAMETER_STD)
            if rule == "bscd":
                for module in fresh.modules():
                    if isinstance(module, torch.nn.Conv2d):
                        height, width = module.kernel_size
                        std = math.sqrt(2.0 / float(height * width * module.out_channels))
                        module.weight.normal_(0.0, std)
    fresh.requires_grad_(False)
    return fresh.eval()


def fit_probe_head(
    features: torch.Tensor, labels: torch.Tensor, n_way: int, config: Any, device: str
) -> nn.Module:
    """The linear head trained on fixed features as ``config`` says, frozen afterwards.

    Args:
        features: support features ``[N, D]`` on ``device`` (as the head reads them).
        labels: support labels ``[N]`` on ``device``.
        n_way: number of classes.
        config: a config with ``lr_head``, ``epochs`` and ``batch_size`` (and the optimiser,
            schedule and initialisation of
            :class:`~fewtrans_board.blocks.training.HeadTrainingConfig`, FewTrans's where
            it declares none).
        device: torch device.
    """
    from fewtrans_board.blocks.training import train_linear_head

    return train_linear_head(features, labels, n_way, config).requires_grad_(False)


class RandomEmbeddingPredictor:
    """The trained head on features of the fixed random encoder."""

    def __init__(
        self, encoder: nn.Module, head: nn.Module, device: str, normalize: bool = True
    ) -> None:
        self.encoder = encoder
        self.head = head
        self.device = device
        self.normalize = normalize

    def predict(self, query: ImageSet) -> torch.Tensor:
        """Head logits of the random features of the query images."""
        import torch

        from fewtrans_board.blocks.clip_common import batched_images
        from fewtrans_board.blocks.training import normalized, upcast

        features = batched_images(self.encoder, query.pixels, self.device)
        with torch.no_grad():
            read = normalized(features) if self.normalize else upcast(features)
            return self.head(read)  # type: ignore[no-any-return]


@dataclass(frozen=True)
class _RandomFields(AdapterConfig):
    """Linear-probe hyperparameters and how the random network is drawn."""

    lr_head: float = hparam(0.2, "Learning rate of the head.", hpe="lr")
    epochs: int = hparam(50, "Passes over the support set.", hpe="epochs")
    batch_size: int = hparam(512, "Optimiser batch size.", min=1)
    init_seed: int = hparam(0, "Seed of the random weights (one network for every episode).", min=0)
    init_rule: str = hparam(
        "reset",
        "How the random weights are drawn: reset (every module's reset_parameters) or bscd "
        "(convolutions N(0, sqrt(2 / (k*k*out_channels))), as BSCD-FSL's ResNet-10).",
        choices=INIT_RULES,
    )


class RandomEmbeddingAdapter(Adapter):
    """BSCD-FSL "Random": linear probe on a fixed, randomly initialised copy of the backbone."""

    name = "random"
    description = "BSCD-FSL 'Random': linear head on a fixed randomly re-initialised backbone."
    paper = "Guo et al., BSCD-FSL, ECCV 2020 (Table 2, 'Random')"
    code = "https://github.com/IBM/cdfsl-benchmark"
    trains = "linear head (random-init backbone, frozen)"
    recipes = (
        Recipe(
            name="bscd",
            source=(
                "Guo et al., BSCD-FSL, ECCV 2020, §5.2.1 ('an embedding formed by a randomly "
                "initialized network (termed Random)'; every single-model variant is based "
                "on a linear classifier), §6 (SGD with momentum, lr 0.01, momentum 0.9, 100 "
                "epochs) and Table 2 'Random'; IBM/cdfsl-benchmark finetune.py with "
                "--freeze_backbone (Classifier = nn.Linear on the raw features of the backbone "
                "in eval mode; classifier_opt = SGD(lr 0.01, momentum 0.9, dampening 0.9, "
                "weight_decay 0.001); total_epoch 100; batch_size 4) and backbone.py "
                "(ResNet-10's init_layer: conv weights N(0, sqrt(2 / (k*k*out_channels))), "
                "BatchNorm weight 1, bias 0)"
            ),
            values={**BSCD_HEAD, "init_rule": "bscd"},
            notes=(
                "The paper does not say whether one random network serves every task; the "
                "recipe draws one per run (init_seed 0). Modules other than convolutions and "
                "BatchNorm keep their reset_parameters draws. Support batches follow the "
                "toolkit's RandomState(11) permutation per epoch (finetune.py draws them from "
                "the global NumPy stream seeded once with 10). The paper's network is a "
                "ResNet-10 at 224 px; the recipe re-initialises whatever backbone the "
                "submission names."
            ),
        ),
    )

    @dataclass(frozen=True)
    class Config(HeadTrainingConfig, _RandomFields):
        """Linear-probe hyperparameters, the random network's seed and rule, the head's recipe."""

    def __init__(self) -> None:
        self._encoders: dict[tuple[int, int, str], nn.Module] = {}

    def encoder_for(self, backbone: Backbone, seed: int, rule: str = "reset") -> nn.Module:
        """The random encoder of ``backbone`` for ``seed`` and ``rule``, drawn once per adapter."""
        key = (id(backbone), seed, rule)
        if key not in self._encoders:
            self._encoders[key] = reinitialized(backbone.image_encoder, seed, rule)
        return self._encoders[key]

    def fit(
        self, backbone: Backbone, support: SupportSet, class_names: Sequence[str], config: Any
    ) -> RandomEmbeddingPredictor:
        """Train the head on the random features of the support set, as the config says."""
        from fewtrans_board.blocks.clip_common import batched_images
        from fewtrans_board.blocks.training import head_features

        encoder = self.encoder_for(backbone, config.init_seed, config.init_rule)
        pixels = batched_images(encoder, support.images.pixels, backbone.device)
        features = head_features(pixels, config)
        labels = support.labels.to(features.device)
        head = fit_probe_head(features, labels, support.n_way, config, backbone.device)
        normalize = bool(config.normalize_features)
        return RandomEmbeddingPredictor(encoder, head, backbone.device, normalize)
