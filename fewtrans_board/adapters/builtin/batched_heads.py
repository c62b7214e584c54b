"""Train one head per HPE configuration at once on shared frozen features.

Configurations that differ only in learning rate and epoch count share the support
features and, under the FewTrans recipe, the batch sequence (each run draws its epochs
from a fresh ``RandomState(11)``, so a shorter run's batches are a prefix of a longer
one's). All heads therefore step in lockstep: head ``m`` is updated at step ``t`` while
``t < steps_m``, with its own cosine learning rate, by an Adam update written out with the
same arithmetic as ``torch.optim.Adam``. ``tests/test_adapters.py`` checks the result
against the plain per-configuration loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from fewtrans_board.adapters.builtin.training import cosine_lr, epoch_batches, total_steps

if TYPE_CHECKING:
    import torch

BETA1, BETA2, EPS = 0.9, 0.999, 1e-8


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


def train_heads(
    features: torch.Tensor,
    labels: torch.Tensor,
    weights: torch.Tensor,
    biases: torch.Tensor | None,
    lrs: Sequence[float],
    epochs: Sequence[int],
    batch_size: int,
    cosine_scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Optimise ``M`` linear (or cosine) heads in lockstep.

    Each head's forward and backward use the same kernels as the per-configuration loop
    (one small graph per head, one backward over their sum) and the Adam update repeats
    ``torch.optim.Adam``'s element-wise operations, so results equal the loop's bit for bit;
    what is saved is the optimiser and autograd overhead of M separate runs.

    Args:
        features: normalised support features ``[N, D]``.
        labels: support labels ``[N]``.
        weights: initial head weights ``[M, C, D]``.
        biases: initial biases ``[M, C]``, or ``None`` for the bias-free cosine head.
        lrs: base learning rate of each head.
        epochs: epoch count of each head.
        batch_size: optimiser batch size (shared).
        cosine_scale: if set, logits are ``scale * x @ normalize(W)^T`` (cosine head).

    Returns:
        The trained ``(weights, biases)``.
    """
    import torch
    import torch.nn.functional as F

    n, heads = len(labels), len(lrs)
    steps = [total_steps(n, batch_size, e) for e in epochs]
    params = [weights.clone()] + ([biases.clone()] if biases is not None else [])
    first = [torch.zeros_like(p) for p in params]
    second = [torch.zeros_like(p) for p in params]
    for t, batch in enumerate(epoch_batches(n, batch_size, max(epochs))):
        active = [m for m in range(heads) if steps[m] > t]
        if not active:
            break
        rows: slice | list[int] = slice(None) if len(active) == heads else active
        index = torch.as_tensor(batch)
        x, y = features[index], labels[index]
        leaves = [p[rows].detach().requires_grad_(True) for p in params]
        bias_leaf = leaves[1] if biases is not None else None
        loss = sum(
            F.cross_entropy(
                head_logits(
                    x, leaves[0][j], bias_leaf[j] if bias_leaf is not None else None, cosine_scale
                ),
                y,
            )
            for j in range(len(active))
        )
        grads = torch.autograd.grad(loss, leaves)  # type: ignore[arg-type]
        step = t + 1
        correction1 = 1 - BETA1**step
        correction2_sqrt = (1 - BETA2**step) ** 0.5
        step_sizes = [cosine_lr(lrs[m], t, steps[m]) / correction1 for m in active]
        for param, m1, m2, grad in zip(params, first, second, grads, strict=True):
            g = grad.detach()
            avg = m1[rows].lerp(g, 1 - BETA1)
            avg_sq = torch.addcmul(m2[rows] * BETA2, g, g, value=1 - BETA2)
            denom = avg_sq.sqrt() / correction2_sqrt + EPS
            shape = (-1,) + (1,) * (g.dim() - 1)
            neg_step = (
                -torch.tensor(step_sizes, dtype=torch.float64).to(g.device, g.dtype).view(shape)
            )
            m1[rows], m2[rows] = avg, avg_sq
            param[rows] = param[rows] + neg_step * avg / denom
    return params[0], params[1] if biases is not None else None
