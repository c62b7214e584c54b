"""BSCD-FSL's transfer from multiple pretrained models: IMS-f and "all embeddings".

Both fine-tune every model of a library (``library:MODEL+MODEL...``; any single model is a
library of one) on the support set with the FewTrans fine-tuning recipe, then train a linear
head on the concatenation of globally pooled block outputs: IMS-f on the layers its two-stage
selection picks (:mod:`.layer_selection`), "all embeddings" on every layer. IMS-f's choice is
kept in the results' provenance (``adapter_records``) for every episode and configuration.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from fewtrans_board.api.adapter import Adapter, AdapterConfig, hparam

if TYPE_CHECKING:
    import torch
    from torch import nn

    from fewtrans_board.api.backbone import Backbone
    from fewtrans_board.api.episode_data import ImageSet, SupportSet
    from fewtrans_board.models.library import LibraryMember


def finetuned_member(
    member: LibraryMember, support: SupportSet, config: Any, device: str
) -> nn.Module:
    """A copy of a member encoder fine-tuned on the support set (FewTrans recipe)."""
    import torch.nn.functional as F

    from fewtrans_board.api.episode_data import ImageSet, SupportSet
    from fewtrans_board.blocks.finetune import encoder_plan
    from fewtrans_board.blocks.lockstep.plan import train_plan
    from fewtrans_board.blocks.training import make_head, train_only
    from fewtrans_board.models.library import resize_pixels

    encoder = copy.deepcopy(member.encoder).to(device).eval()
    if not config.finetune:
        return encoder.requires_grad_(False)
    trainable = train_only(encoder.parameters(), list(encoder.parameters()))
    head = make_head(member.feature_dim, support.n_way, device)
    resized = SupportSet(
        ImageSet(resize_pixels(support.images.pixels, member.image_size)),
        support.labels,
        support.n_way,
    )

    def head_loss(features: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(head(features), labels)

    plan = encoder_plan(encoder, trainable, head, head_loss, resized, config, device, lambda: None)
    train_plan(plan)  # trains encoder and head, then freezes them
    return encoder


class MultiModelPredictor:
    """Pooled layers of the fine-tuned members, concatenated, through the trained head."""

    def __init__(
        self,
        members: list[tuple[nn.Module, int]],
        selected: list[tuple[int, int]],
        head: nn.Module,
        device: str,
        record: dict[str, Any],
    ) -> None:
        self.members = members
        self.selected = selected
        self.head = head
        self.device = device
        self.record = record

    def features(self, pixels: torch.Tensor) -> np.ndarray:
        """Concatenated selected-layer features ``[N, D]`` (see ``layer_selection``)."""
        from fewtrans_board.methods.adapters.layer_selection import concatenate

        return concatenate(_selected_features(self.members, self.selected, pixels, self.device))

    def predict(self, query: ImageSet) -> torch.Tensor:
        """Head logits of the query images (eval mode; queries do not interact)."""
        import torch

        features = torch.as_tensor(self.features(query.pixels), device=self.device)
        with torch.no_grad():
            return self.head(features.float())  # type: ignore[no-any-return]


def _layer_features(
    members: list[tuple[nn.Module, int]], pixels: torch.Tensor, device: str
) -> list[list[np.ndarray]]:
    from fewtrans_board.blocks.layers import block_features
    from fewtrans_board.models.library import resize_pixels

    return [
        [f.cpu().numpy() for f in block_features(encoder, resize_pixels(pixels, size), device)]
        for encoder, size in members
    ]


def _selected_features(
    members: list[tuple[nn.Module, int]],
    selected: list[tuple[int, int]],
    pixels: torch.Tensor,
    device: str,
) -> list[np.ndarray]:
    per_member = _layer_features(members, pixels, device)
    return [per_member[m][layer] for m, layer in selected]


class AllEmbeddingsAdapter(Adapter):
    """BSCD-FSL's "All embeddings": every pooled layer of every fine-tuned model, one head."""

    name = "all-embeddings"
    description = "All pooled layers of every fine-tuned library model, concatenated, linear head."
    paper = "Guo et al., BSCD-FSL, ECCV 2020 (Table 4, 'All embeddings')"
    code = "https://github.com/IBM/cdfsl-benchmark/blob/master/multi_model_selection.py"
    trains = "every library model (fine-tuned on the support set) + linear head on all layers"

    @dataclass(frozen=True)
    class Config(AdapterConfig):
        """Fine-tuning of each model and the final head (FewTrans recipe)."""

        lr_backbone: float = hparam(1e-5, "Adam learning rate of each model's encoder.", hpe="lr")
        lr_head: float = hparam(2e-3, "Adam learning rate of the heads.", hpe="lr")
        epochs: int = hparam(
            70, "Passes over the support set (fine-tuning and head).", hpe="epochs"
        )
        batch_size: int = hparam(64, "Optimiser batch size.", min=1)
        finetune: bool = hparam(True, "Fine-tune each model first (the '-f' of IMS-f).")

    def select(
        self, candidates: list[list[np.ndarray]], labels: np.ndarray
    ) -> tuple[list[tuple[int, int]], dict[str, Any]]:
        """Every layer of every model."""
        selected = [
            (m, layer) for m, layers in enumerate(candidates) for layer in range(len(layers))
        ]
        return selected, {"selected": [{"model": m, "layer": layer} for m, layer in selected]}

    def fit(
        self,
        backbone: Backbone,
        support: SupportSet,
        class_names: Sequence[str],
        config: Any,
    ) -> MultiModelPredictor:
        """Fine-tune the members, choose layers, train the head on their concatenation."""
        import torch

        from fewtrans_board.methods.adapters.layer_selection import concatenate
        from fewtrans_board.methods.adapters.random_embedding import fit_probe_head
        from fewtrans_board.models.library import library_members

        device = backbone.device
        library = library_members(backbone)
        members = [(finetuned_member(m, support, config, device), m.image_size) for m in library]
        labels = support.labels.cpu().numpy()
        candidates = _layer_features(members, support.images.pixels, device)
        selected, record = self.select(candidates, labels)
        features = torch.as_tensor(
            concatenate([candidates[m][layer] for m, layer in selected]), device=device
        ).float()
        head = fit_probe_head(features, support.labels.to(device), support.n_way, config, device)
        record = {
            **record,
            "models": [m.name for m in library],
            "layers": [len(c) for c in candidates],
            "feature_dim": int(features.shape[1]),
        }
        return MultiModelPredictor(members, selected, head, device, record)


class ImsfAdapter(AllEmbeddingsAdapter):
    """BSCD-FSL's IMS-f: incremental multi-model selection over fine-tuned models' layers."""

    name = "ims-f"
    description = "IMS-f: two-stage CV selection of layers across fine-tuned library models."
    paper = "Guo et al., BSCD-FSL, ECCV 2020 (§5.2.2, Table 4, Incremental Multi-model Selection)"
    trains = "every library model (fine-tuned) + linear head on the selected layers"

    def select(
        self, candidates: list[list[np.ndarray]], labels: np.ndarray
    ) -> tuple[list[tuple[int, int]], dict[str, Any]]:
        """The two-stage incremental selection."""
        from fewtrans_board.methods.adapters.layer_selection import select_layers

        return select_layers(candidates, labels)
