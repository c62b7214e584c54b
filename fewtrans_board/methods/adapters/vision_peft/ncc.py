"""Nearest-centroid (NCC) head of TSA: identity-initialised transform + prototype cosine."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def ncc_logits(features: torch.Tensor, prototypes: torch.Tensor, scale: float) -> torch.Tensor:
    """``scale * cos(features, prototypes)``: ``[N, D] x [C, D] -> [N, C]``."""
    return scale * F.normalize(features, dim=-1) @ F.normalize(prototypes, dim=-1).T


def class_means(
    features: torch.Tensor, labels: torch.Tensor, n_way: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-class mean features ``[C, D]`` and per-class counts ``[C]`` (0 for absent classes)."""
    onehot = F.one_hot(labels, n_way).to(features.dtype)
    counts = onehot.sum(0)
    return (onehot.T @ features) / counts.clamp(min=1).unsqueeze(1), counts


def identity_transform(dim: int, device: str | torch.device = "cpu") -> nn.Linear:
    """A bias-free ``Linear(dim, dim)`` initialised to the identity (draws no random numbers)."""
    transform: nn.Linear = nn.utils.skip_init(  # type: ignore[no-untyped-call]
        nn.Linear, dim, dim, bias=False, device=device
    )
    with torch.no_grad():
        transform.weight.copy_(torch.eye(dim, device=device))
    return transform


class NccHead(nn.Module):
    """Maps L2-normalised features to ``scale * cos(W f, prototype_c)``.

    Args:
        dim: feature size D (``W`` is ``D x D``, identity at init).
        n_way: number of classes.
        scale: logit multiplier (10 in TSA/FewTrans).
        device: torch device.
    """

    prototypes: torch.Tensor

    def __init__(self, dim: int, n_way: int, scale: float, device: str | torch.device) -> None:
        super().__init__()
        self.transform = identity_transform(dim, device)
        self.register_buffer("prototypes", torch.zeros(n_way, dim, device=device))
        self.n_way, self.scale = n_way, scale

    def batch_loss(self, features: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Cross-entropy of a batch against its own prototypes; absent classes are masked."""
        mapped = self.transform(features)
        prototypes, counts = class_means(mapped, labels, self.n_way)
        logits = ncc_logits(mapped, prototypes, self.scale).masked_fill(counts == 0, float("-inf"))
        return F.cross_entropy(logits, labels)

    def set_prototypes(self, features: torch.Tensor, labels: torch.Tensor) -> None:
        """Store the class means of the transformed support features."""
        with torch.no_grad():
            self.prototypes = class_means(self.transform(features), labels, self.n_way)[0]

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """NCC logits ``[N, n_way]``."""
        return ncc_logits(self.transform(features), self.prototypes, self.scale)
