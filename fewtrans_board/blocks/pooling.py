"""2x2 max pooling with ``F.max_pool2d(x, 2)``'s values, faster on CPU without autograd.

PyTorch's CPU kernel computes the argmax of every window even where nothing needs it, and on
the demo CNN it took as long as the convolutions when embedding images; with this pooling the
embedding runs 1.36x faster (``benchmarks/demo_embedding.py``). A maximum of four strided
views gives the same values bit for
bit (a maximum does no arithmetic; a NaN anywhere in a window wins in both). Only values
agree, not gradients: ``torch.maximum`` splits a tie's gradient between its inputs where
``max_pool2d`` gives it to the first, so anything autograd records takes the reference kernel.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch
    from torch import nn


def max_pool_2x2(x: torch.Tensor) -> torch.Tensor:
    """``F.max_pool2d(x, 2)``: the fast path when no gradient is recorded.

    Args:
        x: a ``[N, C, H, W]`` (or ``[C, H, W]``) map.

    Returns:
        The map pooled to ``[..., H // 2, W // 2]``.
    """
    import torch
    from torch.nn import functional as F

    height, width = x.shape[-2], x.shape[-1]
    if torch.is_grad_enabled() or x.dim() not in (3, 4) or height % 2 or width % 2:
        return F.max_pool2d(x, 2)
    rows = torch.maximum(x[..., 0::2, :], x[..., 1::2, :])
    return torch.maximum(rows[..., 0::2], rows[..., 1::2])


def max_pool_2x2_module() -> nn.Module:
    """An ``nn.MaxPool2d(2)`` (a subclass, with no state) whose forward is :func:`max_pool_2x2`."""
    from torch import nn

    class MaxPool2x2(nn.MaxPool2d):
        def __init__(self) -> None:
            super().__init__(2)

        def forward(self, input: torch.Tensor) -> torch.Tensor:
            return max_pool_2x2(input)

    return MaxPool2x2()
