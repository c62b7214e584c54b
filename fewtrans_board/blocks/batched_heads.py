"""Train one head per HPE configuration at once on shared frozen features.

Configurations that differ only in learning rate and epoch count share the support
features and, under the FewTrans recipe, the batch sequence (each run draws its epochs
from a fresh ``RandomState(11)``, so a shorter run's batches are a prefix of a longer
one's). All heads therefore step in lockstep as one stacked tensor: batched matmuls give
every head's logits and its cross-entropy gradient (written out: no autograd graph), and
:class:`~fewtrans_board.blocks.lockstep.adam.StackedOptimiser` applies each head's own
learning rate (FewTrans: Adam, per-step cosine; or the configuration's optimiser and
schedule, e.g. BSCD-FSL's SGD at a constant rate) until its last step.
``tests/test_adapters.py`` and ``tests/test_bscd_recipe.py`` check the result against the
plain per-configuration loop (float64: equal to 1e-10).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from fewtrans_board.api.recipe import FEWTRANS_OPTIMISER, FEWTRANS_SCHEDULE, Optimiser, Schedule
from fewtrans_board.blocks.training import epoch_batches, total_steps

if TYPE_CHECKING:
    import torch


def head_logits(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, scale: float | None
) -> torch.Tensor:
    """Logits of one head: ``x W^T + b`` (linear), or ``scale * x @ normalize(W)^T`` (cosine).

    Args:
        x: normalised features ``[N, D]``.
        weight: head weight ``[C, D]``.
        bias: head bias ``[C]`` (linear head), or ``None``.
        scale: cosine scale (cosine head), or ``None`` for the linear head.
    """
    import torch.nn.functional as F

    if scale is not None:
        return scale * x @ F.normalize(weight, dim=-1).t()
    return F.linear(x, weight, bias)


def stacked_head_logits(
    x: torch.Tensor, weights: torch.Tensor, biases: torch.Tensor | None, scale: float | None
) -> torch.Tensor:
    """:func:`head_logits` of ``M`` stacked heads at once: ``[N, D] -> [M, N, C]``.

    Args:
        x: normalised features ``[N, D]``.
        weights: head weights ``[M, C, D]``.
        biases: head biases ``[M, C]`` (linear heads), or ``None``.
        scale: cosine scale (cosine heads), or ``None`` for linear heads.
    """
    import torch
    import torch.nn.functional as F

    if scale is not None:
        return scale * torch.matmul(x, F.normalize(weights, dim=-1).transpose(1, 2))
    stacked = x.expand(weights.shape[0], -1, -1)
    if biases is None:
        return torch.bmm(stacked, weights.transpose(1, 2))
    return torch.baddbmm(biases.unsqueeze(1), stacked, weights.transpose(1, 2))


def stacked_head_gradients(
    x: torch.Tensor,
    targets: torch.Tensor,
    weights: torch.Tensor,
    biases: torch.Tensor | None,
    scale: float | None,
) -> list[torch.Tensor]:
    """Gradients of each head's mean cross-entropy on a batch, written out (no autograd).

    With ``G = (softmax(logits) - onehot) / B`` (computed as autograd does): a linear head
    gets ``G^T x`` and ``sum G``;
    a cosine head ``W / |W|`` gets ``s G^T x`` projected off ``W / |W|`` and divided by
    ``|W|`` (the derivative of ``F.normalize``).

    Args:
        x: normalised batch features ``[B, D]``.
        targets: one-hot labels ``[B, C]`` in the features' dtype.
        weights: head weights ``[M, C, D]``.
        biases: head biases ``[M, C]`` (linear heads), or ``None``.
        scale: cosine scale (cosine heads), or ``None`` for linear heads.

    Returns:
        ``[grad of weights]`` (+ ``[grad of biases]`` for linear heads).
    """
    import torch

    if scale is None:
        logits = stacked_head_logits(x, weights, biases, None)
    else:
        norm = weights.norm(dim=-1, keepdim=True).clamp_min(1e-12)  # as F.normalize
        unit = weights / norm
        logits = scale * torch.matmul(x, unit.transpose(1, 2))
    # The arithmetic of cross_entropy's backward (nll, then log_softmax): d = -onehot / B,
    # error = d - exp(log_softmax) * sum(d). Adam turns the rounding of gradients that
    # should be exactly zero into whole steps, so matching the loop's order of operations
    # keeps the heads equal to the loop's in float32 too, not just in float64.
    upstream = targets * (-1.0 / len(x))
    error = upstream - logits.log_softmax(dim=-1).exp() * upstream.sum(dim=-1, keepdim=True)
    grad = torch.matmul(error.transpose(1, 2), x)  # [M, C, D]
    if scale is None:
        return [grad] + ([error.sum(dim=1)] if biases is not None else [])
    grad = grad * scale
    return [(grad - unit * (grad * unit).sum(dim=-1, keepdim=True)) / norm]


def train_heads(
    features: torch.Tensor,
    labels: torch.Tensor,
    weights: torch.Tensor,
    biases: torch.Tensor | None,
    lrs: Sequence[float],
    epochs: Sequence[int],
    batch_size: int,
    cosine_scale: float | None = None,
    optimiser: Optimiser = FEWTRANS_OPTIMISER,
    schedule: Schedule = FEWTRANS_SCHEDULE,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Optimise ``M`` linear (or cosine) heads in lockstep.

    Args:
        features: support features (L2-normalised under the FewTrans recipe) ``[N, D]``.
        labels: support labels ``[N]``.
        weights: initial head weights ``[M, C, D]``.
        biases: initial biases ``[M, C]``, or ``None`` for the bias-free cosine head.
        lrs: base learning rate of each head.
        epochs: epoch count of each head.
        batch_size: optimiser batch size (shared).
        cosine_scale: if set, logits are ``scale * x @ normalize(W)^T`` (cosine head).
        optimiser: the optimiser of every head (FewTrans: Adam).
        schedule: the learning-rate schedule (FewTrans: per-step cosine to zero).

    Returns:
        The trained ``(weights, biases)``, in the order of the inputs.
    """
    import torch
    import torch.nn.functional as F

    from fewtrans_board.blocks.lockstep.adam import StackedOptimiser

    n = len(labels)
    steps = [total_steps(n, batch_size, e) for e in epochs]
    order = sorted(range(len(lrs)), key=lambda m: -steps[m])
    params = [weights[order].clone()] + ([biases[order].clone()] if biases is not None else [])
    sorted_lrs = [lrs[m] for m in order]
    adam = StackedOptimiser(
        params,
        [sorted_lrs] * len(params),
        [steps[m] for m in order],
        optimiser,
        schedule,
        math.ceil(n / batch_size),
    )
    onehot = F.one_hot(labels, weights.shape[1]).to(features.dtype)
    for t, batch in enumerate(epoch_batches(n, batch_size, max(epochs, default=0))):
        active = adam.active(t)
        if active == 0:
            break
        index = torch.as_tensor(batch, device=features.device)
        rows = [p[:active] for p in params]
        grads = stacked_head_gradients(
            features[index],
            onehot[index],
            rows[0],
            rows[1] if biases is not None else None,
            cosine_scale,
        )
        adam.step(t, grads)
    inverse = torch.as_tensor(sorted(range(len(order)), key=order.__getitem__))
    trained = [p[inverse.to(p.device)] for p in params]
    return trained[0], trained[1] if biases is not None else None
