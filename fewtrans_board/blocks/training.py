"""The FewTrans training recipe shared by the baseline adapters.

Features are L2-normalised and fed to a linear head whose weight starts at all ones and
bias at zero; Adam optimises each parameter group with its own learning rate, no weight
decay, and a per-step cosine decay to zero without warm-up; the support order of every
epoch comes from a fresh ``RandomState(11)``, so every configuration and episode sees the
same shuffle sequence; the backbone stays in eval mode (frozen BN statistics, no dropout).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch
    from torch import nn

SHUFFLE_SEED = 11


def cosine_lr(base_lr: float, step: int, total_steps: int) -> float:
    """Per-step cosine decay from ``base_lr`` to zero: ``0.5 * lr * (1 + cos(pi * t / T))``."""
    return 0.5 * base_lr * (1.0 + math.cos(math.pi * step / max(total_steps, 1)))


def epoch_batches(n_items: int, batch_size: int, epochs: int) -> Iterator[np.ndarray]:
    """Yield support index batches: a ``RandomState(11)`` permutation per epoch, chunked."""
    rng = np.random.RandomState(SHUFFLE_SEED)
    for _ in range(epochs):
        order = rng.permutation(n_items)
        for start in range(0, n_items, batch_size):
            yield order[start : start + batch_size]


def total_steps(n_items: int, batch_size: int, epochs: int) -> int:
    """Optimiser steps of a run: ``epochs * ceil(n / batch_size)``."""
    return epochs * math.ceil(n_items / batch_size)


def make_head(dim: int, n_way: int, device: str) -> nn.Linear:
    """Linear head with weight 1 and bias 0 (FewTrans initialisation)."""
    import torch
    from torch import nn

    head = nn.Linear(dim, n_way).to(device)
    with torch.no_grad():
        head.weight.fill_(1.0)
        head.bias.zero_()
    return head


def train_only(
    parameters: Iterable[torch.Tensor], trainable: Sequence[torch.Tensor]
) -> list[torch.Tensor]:
    """Let exactly the ``trainable`` tensors among ``parameters`` receive gradients.

    Args:
        parameters: the parameters to set, e.g. ``module.parameters()`` of a copy the
            adapter owns (never the caller's: their flags would change too).
        trainable: the tensors that train; the other ``parameters`` are frozen.

    Returns:
        ``trainable`` as a list.
    """
    ids = {id(p) for p in trainable}
    for p in parameters:
        p.requires_grad_(id(p) in ids)
    return list(trainable)


def autocast(device: str) -> AbstractContextManager[object]:
    """bf16 autocast on CUDA (fp32 master weights); plain fp32 elsewhere."""
    import torch

    if device.startswith("cuda"):
        return torch.autocast(device_type="cuda", dtype=torch.bfloat16)
    return nullcontext()


def run_adam(
    groups: Sequence[tuple[Sequence[torch.Tensor], float]],
    loss_of_batch: Callable[[np.ndarray], torch.Tensor],
    n_items: int,
    batch_size: int,
    epochs: int,
) -> None:
    """Optimise parameter groups with one Adam each under the shared cosine schedule.

    Args:
        groups: ``(parameters, base learning rate)`` pairs; groups with lr 0 or no
            parameters are skipped.
        loss_of_batch: computes the loss of a batch of support indices.
        n_items: support size.
        batch_size: optimiser batch size.
        epochs: number of passes over the support set.
    """
    import torch

    optimisers = [
        (torch.optim.Adam(list(params), lr=lr), lr) for params, lr in groups if params and lr > 0
    ]
    steps = total_steps(n_items, batch_size, epochs)
    for step, batch in enumerate(epoch_batches(n_items, batch_size, epochs)):
        for optimiser, base_lr in optimisers:
            for group in optimiser.param_groups:
                group["lr"] = cosine_lr(base_lr, step, steps)
            optimiser.zero_grad(set_to_none=True)
        loss = loss_of_batch(batch)
        loss.backward()  # type: ignore[no-untyped-call]
        for optimiser, _ in optimisers:
            optimiser.step()


def upcast(x: torch.Tensor) -> torch.Tensor:
    """At least float32: bf16/fp16 autocast outputs become float32, float64 stays float64.

    Float64 end to end is what the batched-vs-loop exactness tests run in.
    """
    import torch

    return x if x.dtype in (torch.float32, torch.float64) else x.float()


def normalized(x: torch.Tensor) -> torch.Tensor:
    """L2-normalise rows (in at least float32)."""
    import torch.nn.functional as F

    return F.normalize(upcast(x), dim=-1)
