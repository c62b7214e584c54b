"""fewtrans-example: the copy-me template for fewtrans-board plugins.

Registers one model (timm's ResNet-10t, ImageNet-1k weights), one adapter (SimpleShot:
centred, L2-normalised nearest-centroid classification) and one command
(``fewtrans-board simpleshot-toy``, a smoke test that needs no data). Heavy libraries
(torch, timm) are imported inside ``load``/``fit`` and the command only, so
``fewtrans-board --help`` stays fast.

It imports only the public API: ``fewtrans_board`` (the plugin contract) and
``fewtrans_board.toolkit`` (building blocks such as ``load_timm_backbone``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import click

from fewtrans_board import (
    Adapter,
    AdapterConfig,
    Backbone,
    ImageSet,
    ModelSpec,
    SupportSet,
    hookimpl,
    hparam,
)

if TYPE_CHECKING:
    import torch

__version__ = "0.1.0"


def load_resnet10t(weights: Path | None, device: str) -> Backbone:
    """Load timm ``resnet10t.c3_in1k`` (hub when online, or a local checkpoint)."""
    from fewtrans_board.toolkit import load_timm_backbone

    return load_timm_backbone(
        "resnet10t.c3_in1k", weights, device, name="example-resnet10t.c3_in1k"
    )


RESNET10T = ModelSpec(
    name="example-resnet10t.c3_in1k",
    loader=load_resnet10t,
    family="timm",
    architecture="resnet10t",
    source="hf-hub:timm/resnet10t.c3_in1k",
    license="apache-2.0",
    description="ResNet-10t (timm), ImageNet-1k weights; small and fast on CPU.",
    paper="https://arxiv.org/abs/1812.01187",
)


class SimpleShotPredictor:
    """Scores query features against the class centroids of the support set."""

    def __init__(
        self,
        backbone: Backbone,
        centroids: torch.Tensor,
        transform: Callable[[torch.Tensor], torch.Tensor],
        temperature: float,
    ) -> None:
        self.backbone = backbone
        self.centroids = centroids
        self.transform = transform
        self.temperature = temperature

    def predict(self, query: ImageSet) -> torch.Tensor:
        """Return negative squared distances to centroids, scaled, as logits."""
        import torch

        features = self.transform(query.features(self.backbone))
        return -self.temperature * torch.cdist(features, self.centroids).pow(2)


class SimpleShotAdapter(Adapter):
    """SimpleShot (Wang et al., 2019): nearest centroid on centred, L2-normalised features."""

    name = "simpleshot"
    trains = "nothing (centroids of centred, normalised features)"
    description = "Nearest centroid on centred, L2-normalised frozen features (no training)."
    paper = "Wang et al., SimpleShot, arXiv:1911.04623"
    code = "https://github.com/mileyan/simple_shot"
    frozen_backbone = True
    training_free = True

    @dataclass(frozen=True)
    class Config(AdapterConfig):
        """SimpleShot options."""

        center: bool = hparam(
            True, "Subtract the support-set mean feature before L2 normalisation (CL2N)."
        )
        temperature: float = hparam(1.0, "Scale applied to negative squared distances.", above=0)

    def fit(
        self,
        backbone: Backbone,
        support: SupportSet,
        class_names: Sequence[str],
        config: Config,
    ) -> SimpleShotPredictor:
        """Compute class centroids of transformed support features."""
        import torch
        import torch.nn.functional as F

        features = support.images.features(backbone)
        mean = features.mean(0, keepdim=True) if config.center else torch.zeros_like(features[:1])

        def transform(x: torch.Tensor) -> torch.Tensor:
            return F.normalize(x - mean, dim=-1)

        z = transform(features)
        labels = support.labels.to(z.device)
        centroids = torch.stack([z[labels == c].mean(0) for c in range(support.n_way)])
        return SimpleShotPredictor(backbone, centroids, transform, config.temperature)


@hookimpl
def register_models(register: Callable[[ModelSpec], None]) -> None:
    """Register the example backbone."""
    register(RESNET10T)


@hookimpl
def register_adapters(register: Callable[[type[Adapter]], None]) -> None:
    """Register the SimpleShot adapter."""
    register(SimpleShotAdapter)


@hookimpl
def register_commands(cli: click.Group) -> None:
    """Register ``fewtrans-board simpleshot-toy``."""

    @cli.command("simpleshot-toy")
    @click.option(
        "--episodes",
        type=click.IntRange(1, 100),
        default=5,
        show_default=True,
        help="Toy episodes to run.",
    )
    @click.option(
        "--seed",
        type=click.IntRange(0, 2**32 - 1),
        default=0,
        show_default=True,
        help="Seed of the backbone and the first episode.",
    )
    @click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
    def simpleshot_toy(episodes: int, seed: int, as_json: bool) -> None:
        """Run SimpleShot on toy episodes with a tiny random ViT; print its mean accuracy.

        A smoke test of the adapter that needs no dataset and no weights.
        """
        import json

        from fewtrans_board.toolkit import tiny_vit_backbone, toy_episode

        backbone = tiny_vit_backbone(seed)
        adapter, config = SimpleShotAdapter(), SimpleShotAdapter.Config()
        accuracies = []
        for index in range(episodes):
            episode = toy_episode(seed=seed + index)
            predictor = adapter.fit(backbone, episode.support, episode.class_names, config)
            hits = predictor.predict(episode.query).argmax(1) == episode.query_labels
            accuracies.append(100.0 * float(hits.float().mean()))
        mean = sum(accuracies) / len(accuracies)
        if as_json:
            click.echo(json.dumps({"episodes": episodes, "accuracy": mean}))
        else:
            click.echo(f"SimpleShot on {episodes} toy episodes: {mean:.1f}% accuracy")
