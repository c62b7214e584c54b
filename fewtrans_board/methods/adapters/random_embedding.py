"""BSCD-FSL's "Random" baseline (Table 2): a linear head on a randomly initialised network.

The backbone's architecture is re-initialised once with a fixed seed (every module's own
``reset_parameters``; parameters outside such modules, like ViT position embeddings, are
drawn from N(0, 0.02)) and used as a fixed feature extractor: a lower bound that shows what
pretraining buys. The head is the FewTrans linear probe.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fewtrans_board.api.adapter import Adapter, AdapterConfig, hparam

if TYPE_CHECKING:
    import torch
    from torch import nn

    from fewtrans_board.api.backbone import Backbone
    from fewtrans_board.api.episode_data import ImageSet, SupportSet

LOOSE_PARAMETER_STD = 0.02


def reinitialized(encoder: nn.Module, seed: int) -> nn.Module:
    """A copy of ``encoder`` with freshly drawn weights (seeded; global RNG untouched).

    Args:
        encoder: the pretrained encoder (not modified).
        seed: the initialisation seed.
    """
    import torch

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
    fresh.requires_grad_(False)
    return fresh.eval()


def fit_probe_head(
    features: torch.Tensor, labels: torch.Tensor, n_way: int, config: Any, device: str
) -> nn.Module:
    """The FewTrans linear head trained on fixed features, frozen afterwards.

    Args:
        features: L2-normalised support features ``[N, D]`` on ``device``.
        labels: support labels ``[N]`` on ``device``.
        n_way: number of classes.
        config: a config with ``lr_head``, ``epochs`` and ``batch_size``.
        device: torch device.
    """
    from fewtrans_board.blocks.training import train_linear_head

    return train_linear_head(features, labels, n_way, config).requires_grad_(False)


class RandomEmbeddingPredictor:
    """The trained head on features of the fixed random encoder."""

    def __init__(self, encoder: nn.Module, head: nn.Module, device: str) -> None:
        self.encoder = encoder
        self.head = head
        self.device = device

    def predict(self, query: ImageSet) -> torch.Tensor:
        """Head logits of the random features of the query images."""
        import torch

        from fewtrans_board.blocks.clip_common import batched_images
        from fewtrans_board.blocks.training import normalized

        features = batched_images(self.encoder, query.pixels, self.device)
        with torch.no_grad():
            return self.head(normalized(features))  # type: ignore[no-any-return]


class RandomEmbeddingAdapter(Adapter):
    """BSCD-FSL "Random": linear probe on a fixed, randomly initialised copy of the backbone."""

    name = "random"
    description = "BSCD-FSL 'Random': linear head on a fixed randomly re-initialised backbone."
    paper = "Guo et al., BSCD-FSL, ECCV 2020 (Table 2, 'Random')"
    code = "https://github.com/IBM/cdfsl-benchmark"
    trains = "linear head (random-init backbone, frozen)"

    @dataclass(frozen=True)
    class Config(AdapterConfig):
        """Linear-probe hyperparameters and the initialisation seed."""

        lr_head: float = hparam(0.2, "Adam learning rate of the head.", hpe="lr")
        epochs: int = hparam(50, "Passes over the support set.", hpe="epochs")
        batch_size: int = hparam(512, "Optimiser batch size.", min=1)
        init_seed: int = hparam(
            0, "Seed of the random weights (one network for every episode).", min=0
        )

    def __init__(self) -> None:
        self._encoders: dict[tuple[int, int], nn.Module] = {}

    def encoder_for(self, backbone: Backbone, seed: int) -> nn.Module:
        """The random encoder of ``backbone`` for ``seed``, drawn once per adapter instance."""
        key = (id(backbone), seed)
        if key not in self._encoders:
            self._encoders[key] = reinitialized(backbone.image_encoder, seed)
        return self._encoders[key]

    def fit(
        self, backbone: Backbone, support: SupportSet, class_names: Sequence[str], config: Any
    ) -> RandomEmbeddingPredictor:
        """Train the FewTrans linear head on the random features of the support set."""
        from fewtrans_board.blocks.clip_common import batched_images
        from fewtrans_board.blocks.training import normalized

        encoder = self.encoder_for(backbone, config.init_seed)
        features = normalized(batched_images(encoder, support.images.pixels, backbone.device))
        labels = support.labels.to(features.device)
        head = fit_probe_head(features, labels, support.n_way, config, backbone.device)
        return RandomEmbeddingPredictor(encoder, head, backbone.device)
