"""Episode heads of the meta-learners: logits of queries from support features.

Shared by episodic meta-training (:mod:`.train`) and the test-time adapters
(:mod:`.adapters`); every function is differentiable in the features.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch
    from torch import nn

RIDGE_LAMBDA = 50.0
"""MetaOptNet's ridge-regression regulariser (its ``lambda_reg`` default)."""

MATCHING_EPS = 1e-6
MATCHING_SCALE = 100.0
"""CloserLook's (and FewTrans's) MatchingNet: softmax of ``100 * relu(cosine)``."""


def one_hot(labels: torch.Tensor, n_way: int, like: torch.Tensor | None = None) -> torch.Tensor:
    """One-hot ``[N, n_way]`` of integer labels, float32 or the dtype of ``like``."""
    import torch
    import torch.nn.functional as F

    dtype = like.dtype if like is not None else torch.float32
    return F.one_hot(labels, n_way).to(dtype)


def prototypes(support: torch.Tensor, labels: torch.Tensor, n_way: int) -> torch.Tensor:
    """Class means of support features ``[n_way, D]``."""
    hot = one_hot(labels, n_way, support)
    return (hot.T @ support) / hot.sum(dim=0).clamp_min(1.0)[:, None]


def protonet_logits(
    support: torch.Tensor, labels: torch.Tensor, query: torch.Tensor, n_way: int
) -> torch.Tensor:
    """ProtoNet: negative squared Euclidean distance to each class prototype."""
    centres = prototypes(support, labels, n_way)
    distances = (query[:, None, :] - centres[None, :, :]).pow(2).sum(dim=-1)
    return -distances


def matching_logits(
    support: torch.Tensor, labels: torch.Tensor, query: torch.Tensor, n_way: int
) -> torch.Tensor:
    """MatchingNet without full-context embeddings: log of attention-weighted support labels.

    Attention is the softmax over support items of ``100 * relu(cosine similarity)``
    (CloserLook's scaling); the prediction is ``sum_j a(x, x_j) y_j`` and the loss is its
    negative log-likelihood.
    """
    import torch
    import torch.nn.functional as F

    similarity = F.normalize(query, dim=-1) @ F.normalize(support, dim=-1).T
    attention = (MATCHING_SCALE * F.relu(similarity)).softmax(dim=-1)
    probabilities = attention @ one_hot(labels, n_way, attention)
    return torch.log(probabilities + MATCHING_EPS)


def make_relation_module(dim: int, hidden: int = 64) -> nn.Module:
    """RelationNet's relation module on pooled features: ``pair(c, q) -> hidden -> 1`` (sigmoid).

    RelationNet's original module convolves the concatenated feature *maps* of a class and a
    query; backbones here expose pooled features, so the pair is the concatenation
    ``[c, q, |c - q|, c * q]`` (the last two let a small MLP express a metric that the convs
    learn from maps) and the conv blocks become one hidden Linear layer.
    """
    from torch import nn

    return nn.Sequential(nn.Linear(4 * dim, hidden), nn.ReLU(), nn.Linear(hidden, 1), nn.Sigmoid())


def relation_forward(head: dict[str, torch.Tensor], pairs: torch.Tensor) -> torch.Tensor:
    """The relation module of :func:`make_relation_module` run on the tensors in ``head``."""
    import torch
    import torch.nn.functional as F

    hidden = F.relu(F.linear(pairs, head["0.weight"], head["0.bias"]))
    return torch.sigmoid(F.linear(hidden, head["2.weight"], head["2.bias"]))


def relation_pairs(classes: torch.Tensor, query: torch.Tensor) -> torch.Tensor:
    """``[Q, C, 4D]`` pair features ``[c, q, |c - q|, c * q]`` of every query and class."""
    import torch

    c = classes[None, :, :].expand(len(query), -1, -1)
    q = query[:, None, :].expand(-1, len(classes), -1)
    return torch.cat([c, q, (c - q).abs(), c * q], dim=-1)


def relation_scores(
    head: dict[str, torch.Tensor],
    support: torch.Tensor,
    labels: torch.Tensor,
    query: torch.Tensor,
    n_way: int,
) -> torch.Tensor:
    """RelationNet: relation score in (0, 1) of each query with each class prototype.

    Classes are represented by their mean support feature (CloserLook's RelationNet averages
    the support maps of a class).
    """
    pairs = relation_pairs(prototypes(support, labels, n_way), query)
    return relation_forward(head, pairs).squeeze(-1)


def ridge_logits(
    support: torch.Tensor,
    labels: torch.Tensor,
    query: torch.Tensor,
    n_way: int,
    scale: torch.Tensor | float = 1.0,
    lam: float = RIDGE_LAMBDA,
) -> torch.Tensor:
    """MetaOptNet-RR: a ridge-regression classifier fit to the support set in closed form.

    Dual form: ``W = S^T (S S^T + lambda I)^-1 Y``, logits ``scale * Q W``, differentiable
    in the features (MetaOptNet's QP head with the ridge base learner).
    """
    import torch

    gram = support @ support.T
    eye = torch.eye(len(support), device=support.device, dtype=support.dtype)
    alpha = torch.linalg.solve(gram + lam * eye, one_hot(labels, n_way, support))
    weights = support.T @ alpha
    return scale * (query @ weights)  # type: ignore[no-any-return]
