"""Episode heads of the meta-learners: logits of queries from support features.

Shared by episodic meta-training (:mod:`fewtrans_board.metatrain.train`) and the test-time
adapters (:mod:`.adapters`); every function is differentiable in the features. The faithful
heads (MatchingNet with full-context embeddings, RelationNet's convolutional relation module)
and the simplified ones kept under their own names (``matchingnet-nofce``,
``relationnet-mlp``) both live here; MetaOptNet's SVM is in :mod:`.svm`.
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
    """``matchingnet-nofce``: log of attention-weighted support labels, no full-context embeddings.

    ``log(sum_j a(q, s_j) y_j + eps)``, where the attention ``a`` is the softmax over support
    items of ``100 * relu(cosine similarity)`` (CloserLook's scaling); the loss is the
    negative log-likelihood.
    """
    import torch
    import torch.nn.functional as F

    similarity = F.normalize(query, dim=-1) @ F.normalize(support, dim=-1).T
    attention = (MATCHING_SCALE * F.relu(similarity)).softmax(dim=-1)
    probabilities = attention @ one_hot(labels, n_way, attention)
    return torch.log(probabilities + MATCHING_EPS)


# --- MatchingNet with full-context embeddings (the default ``matchingnet``) ---


def fce_init(dim: int) -> dict[str, torch.Tensor]:
    """Fresh full-context-embedding parameters (torch's global RNG, PyTorch's LSTM init).

    ``g.*``: the bidirectional LSTM over the support set (``nn.LSTM(D, D, bidirectional)``
    names); ``f.*``: the attention LSTM cell of the query read-out (``nn.LSTMCell(2D, D)``).
    """
    from torch import nn

    g = nn.LSTM(dim, dim, num_layers=1, batch_first=True, bidirectional=True)
    f = nn.LSTMCell(2 * dim, dim)
    head = {f"g.{k}": v.detach().clone() for k, v in g.state_dict().items()}
    head |= {f"f.{k}": v.detach().clone() for k, v in f.state_dict().items()}
    return head


def lstm_cell(
    x: torch.Tensor,
    h: torch.Tensor,
    c: torch.Tensor,
    weights: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
) -> tuple[torch.Tensor, torch.Tensor]:
    """One LSTM step with PyTorch's gate order (input, forget, cell, output)."""
    import torch

    w_ih, w_hh, b_ih, b_hh = weights
    gates = x @ w_ih.T + b_ih + h @ w_hh.T + b_hh
    i, f, g, o = gates.chunk(4, dim=-1)
    c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(c), c


def fce_support(head: dict[str, torch.Tensor], support: torch.Tensor) -> torch.Tensor:
    """``g``: each support feature plus both directions of a bi-LSTM run over the set.

    ``g(x_j) = x_j + h_fwd_j + h_bwd_j`` over the sequence in the given order (Vinyals et
    al.'s skip connection, CloserLook's ``encode_training_set``).
    """
    import torch

    def run(order: range, suffix: str) -> list[torch.Tensor]:
        weights = tuple(
            head[f"g.{k}_l0{suffix}"] for k in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
        )
        h = c = support.new_zeros(support.shape[1])
        out: list[torch.Tensor] = [support.new_zeros(0)] * len(support)
        for j in order:
            h, c = lstm_cell(support[j], h, c, weights)  # type: ignore[arg-type]
            out[j] = h
        return out

    forward = torch.stack(run(range(len(support)), ""))
    backward = torch.stack(run(range(len(support) - 1, -1, -1), "_reverse"))
    return support + forward + backward


def fce_query(
    head: dict[str, torch.Tensor], query: torch.Tensor, context: torch.Tensor
) -> torch.Tensor:
    """``f``: the attention-LSTM read-out of each query over the embedded support set.

    ``K = len(context)`` steps (CloserLook's choice) of ``a = softmax(h G^T)``,
    ``r = a G``, ``h, c = LSTMCell([f(x), r], (h, c))``, ``h = h + f(x)``, from ``h = f(x)``,
    ``c = 0``; each query row is processed on its own.
    """
    import torch

    weights = tuple(head[f"f.{k}"] for k in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"))
    h, c = query, torch.zeros_like(query)
    for _ in range(len(context)):
        read = (h @ context.T).softmax(dim=-1) @ context
        h, c = lstm_cell(torch.cat([query, read], dim=-1), h, c, weights)  # type: ignore[arg-type]
        h = h + query
    return h


def matching_fce_logits(
    head: dict[str, torch.Tensor],
    support: torch.Tensor,
    labels: torch.Tensor,
    query: torch.Tensor,
    n_way: int,
) -> torch.Tensor:
    """MatchingNet with full-context embeddings (Vinyals et al.; CloserLook's matchingnet.py).

    The support set is embedded in label order (a stable sort by label, CloserLook's
    class-major order, so the bi-LSTM sees the same sequence whatever order the episode lists
    its support items in), queries by the attention LSTM over it; the log-probabilities are
    the cosine attention of :func:`matching_logits` between the two embeddings.
    """
    import torch

    order = torch.sort(labels, stable=True).indices
    support, labels = support[order], labels[order]
    context = fce_support(head, support)
    return matching_logits(context, labels, fce_query(head, query, context), n_way)


# --- RelationNet's convolutional relation module (the default ``relationnet``) ---

RELATION_HIDDEN = 8
"""Width of the relation module's first FC layer (CloserLook's ``RelationModule(.., 8)``)."""
RELATION_BN_MOMENTUM = 0.1


def _relation_padding(height: int, width: int) -> int:
    return 1 if min(height, width) < 10 else 0


def _relation_side(side: int, padding: int) -> int:
    for _ in range(2):
        side = side + 2 * padding - 2
        side = side // 2 if side >= 2 else side
    return side


def relation_conv_init(map_shape: tuple[int, int, int]) -> dict[str, torch.Tensor]:
    """A fresh relation module for ``[C, H, W]`` feature maps (torch's global RNG).

    Two blocks ``conv3x3 -> BatchNorm -> ReLU -> maxpool 2`` (``2C -> C -> C`` channels,
    padding 1 on maps smaller than 10, as CloserLook's ResNet setting), then
    ``FC(C h w, 8) -> ReLU -> FC(8, 1) -> sigmoid``. Conv weights ~ N(0, 2 / (9 C_out)) and
    BatchNorm (1, 0), CloserLook's ``init_layer``; biases and FCs keep PyTorch's init.
    """
    import math

    import torch
    from torch import nn

    channels, height, width = map_shape
    padding = _relation_padding(height, width)
    flat = channels * _relation_side(height, padding) * _relation_side(width, padding)
    head: dict[str, torch.Tensor] = {}
    for name, cin in (("layer1", 2 * channels), ("layer2", channels)):
        conv = nn.Conv2d(cin, channels, 3, padding=padding)
        conv.weight.data.normal_(0.0, math.sqrt(2.0 / (9 * channels)))
        head[f"{name}.conv.weight"] = conv.weight.detach().clone()
        head[f"{name}.conv.bias"] = conv.bias.detach().clone()  # type: ignore[union-attr]
        head[f"{name}.bn.weight"] = torch.ones(channels)
        head[f"{name}.bn.bias"] = torch.zeros(channels)
        head[f"{name}.bn.running_mean"] = torch.zeros(channels)
        head[f"{name}.bn.running_var"] = torch.ones(channels)
    for name, (fin, fout) in (("fc1", (flat, RELATION_HIDDEN)), ("fc2", (RELATION_HIDDEN, 1))):
        linear = nn.Linear(fin, fout)
        head[f"{name}.weight"] = linear.weight.detach().clone()
        head[f"{name}.bias"] = linear.bias.detach().clone()
    return head


def is_running_statistic(key: str) -> bool:
    """Whether a head tensor is a BatchNorm running statistic (updated, never optimised)."""
    return key.endswith(("running_mean", "running_var"))


def relation_conv_forward(
    head: dict[str, torch.Tensor], pairs: torch.Tensor, training: bool = False
) -> torch.Tensor:
    """Relation scores ``[P]`` in (0, 1) of ``[P, 2C, H, W]`` concatenated map pairs.

    ``training``: BatchNorm uses the batch's statistics and updates the running ones in
    ``head`` (meta-training); otherwise the running statistics, so every pair is scored on
    its own.
    """
    import torch
    import torch.nn.functional as F

    padding = _relation_padding(pairs.shape[2], pairs.shape[3])
    out = pairs
    for name in ("layer1", "layer2"):
        out = F.conv2d(out, head[f"{name}.conv.weight"], head[f"{name}.conv.bias"], padding=padding)
        out = F.batch_norm(
            out,
            head[f"{name}.bn.running_mean"],
            head[f"{name}.bn.running_var"],
            head[f"{name}.bn.weight"],
            head[f"{name}.bn.bias"],
            training=training,
            momentum=RELATION_BN_MOMENTUM,
        )
        out = F.relu(out)
        if min(out.shape[2], out.shape[3]) >= 2:
            out = F.max_pool2d(out, 2)
    hidden = F.relu(F.linear(out.flatten(1), head["fc1.weight"], head["fc1.bias"]))
    return torch.sigmoid(F.linear(hidden, head["fc2.weight"], head["fc2.bias"])).squeeze(-1)


def relation_conv_scores(
    head: dict[str, torch.Tensor],
    support: torch.Tensor,
    labels: torch.Tensor,
    query: torch.Tensor,
    n_way: int,
    training: bool = False,
) -> torch.Tensor:
    """RelationNet: relation score ``[Q, n_way]`` of each query map with each class map.

    A class is the mean of its support maps (CloserLook's ``z_support.mean(1)``; Sung et al.
    sum them); each pair is the channel concatenation ``[class map, query map]``.
    """
    import torch

    hot = one_hot(labels, n_way, support)
    classes = (
        torch.einsum("nk,nchw->kchw", hot, support)
        / hot.sum(dim=0).clamp_min(1.0)[:, None, None, None]
    )
    q, k = len(query), n_way
    pairs = torch.cat(
        [classes[None].expand(q, -1, -1, -1, -1), query[:, None].expand(-1, k, -1, -1, -1)], dim=2
    )
    scores = relation_conv_forward(head, pairs.reshape(q * k, *pairs.shape[2:]), training)
    return scores.reshape(q, k)


def make_relation_module(dim: int, hidden: int = 64) -> nn.Module:
    """``relationnet-mlp``'s module on pooled features: ``pair(c, q) -> hidden -> 1`` (sigmoid).

    A simplification of RelationNet (whose module convolves the concatenated feature *maps*
    of a class and a query, see :func:`relation_conv_init`): the pair is the concatenation
    ``[c, q, |c - q|, c * q]`` of pooled features (the last two let a small MLP express a
    metric that the convs learn from maps) and the conv blocks become one hidden Linear layer.
    """
    from torch import nn

    return nn.Sequential(nn.Linear(4 * dim, hidden), nn.ReLU(), nn.Linear(hidden, 1), nn.Sigmoid())


def relation_scores(
    head: dict[str, torch.Tensor],
    support: torch.Tensor,
    labels: torch.Tensor,
    query: torch.Tensor,
    n_way: int,
) -> torch.Tensor:
    """``relationnet-mlp``: relation score in (0, 1) of each query with each class prototype.

    Classes are represented by their mean support feature (CloserLook's RelationNet averages
    the support maps of a class); each pair is ``[c, q, |c - q|, c * q]``, run through the
    module of :func:`make_relation_module` with the tensors in ``head``.
    """
    import torch
    import torch.nn.functional as F

    classes = prototypes(support, labels, n_way)
    c = classes[None, :, :].expand(len(query), -1, -1)
    q = query[:, None, :].expand(-1, len(classes), -1)
    pairs = torch.cat([c, q, (c - q).abs(), c * q], dim=-1)  # [Q, C, 4D]
    hidden = F.relu(F.linear(pairs, head["0.weight"], head["0.bias"]))
    return torch.sigmoid(F.linear(hidden, head["2.weight"], head["2.bias"])).squeeze(-1)


def ridge_logits(
    support: torch.Tensor,
    labels: torch.Tensor,
    query: torch.Tensor,
    n_way: int,
    scale: torch.Tensor | float = 1.0,
    lam: float = RIDGE_LAMBDA,
) -> torch.Tensor:
    """``metaopt-ridge``: a ridge-regression classifier fit to the support set in closed form.

    Dual form: ``W = S^T (S S^T + lambda I)^-1 Y``, logits ``scale * Q W``, differentiable
    in the features (MetaOptNet's QP head with the ridge base learner).
    """
    import torch

    gram = support @ support.T
    eye = torch.eye(len(support), device=support.device, dtype=support.dtype)
    alpha = torch.linalg.solve(gram + lam * eye, one_hot(labels, n_way, support))
    weights = support.T @ alpha
    return scale * (query @ weights)  # type: ignore[no-any-return]
