"""Bottleneck adapters (D -> hidden -> D) attached to ViT blocks with forward hooks.

Sequential (Houlsby-style, FewTrans "adapter"): a hook on the MLP branch returns
``h + A(h)``. Parallel (AdaptFormer, FewTrans "adaptformer" and ViT "TSA"): a pre-hook on the
second norm keeps the residual stream ``x`` after attention, and a hook on the MLP adds
``s * A(x)`` to the MLP output. The up-projection and both biases start at zero, so an
attached adapter leaves the encoder's function unchanged until it trains.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from fewtrans_board.adapters.builtin.vision_peft.common import place, require_vit


class Bottleneck(nn.Module):
    """``up(relu(down(x)))``; ``down`` Kaiming-uniform (nn.Linear default), the rest zero.

    Args:
        width: token width D.
        hidden: bottleneck width.
    """

    def __init__(self, width: int, hidden: int) -> None:
        super().__init__()
        self.down = nn.Linear(width, hidden)
        self.up = nn.Linear(hidden, width)
        with torch.no_grad():
            self.down.bias.zero_()
            self.up.weight.zero_()
            self.up.bias.zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Return the adapter's output (a residual update)."""
        return self.up(torch.relu(self.down(x)))  # type: ignore[no-any-return]


class SequentialAdapter(Bottleneck):
    """Adds ``A(h)`` to the MLP branch output ``h`` (hooked on the block's MLP)."""

    def on_mlp(self, module: nn.Module, args: Any, output: torch.Tensor) -> torch.Tensor:
        """Forward hook of the MLP: ``h + A(h)``."""
        return output + self(output)  # type: ignore[no-any-return]


class ParallelAdapter(Bottleneck):
    """Adds ``scale * A(x)`` to the MLP output, ``x`` being the MLP block's residual input."""

    def __init__(self, width: int, hidden: int, scale: float) -> None:
        super().__init__(width, hidden)
        self.scale = scale
        self._stream: torch.Tensor | None = None

    def on_norm2(self, module: nn.Module, args: tuple[Any, ...]) -> None:
        """Forward pre-hook of the second norm: remember the residual stream."""
        self._stream = args[0]

    def on_mlp(self, module: nn.Module, args: Any, output: torch.Tensor) -> torch.Tensor:
        """Forward hook of the MLP: ``MLP(LN(x)) + scale * A(x)``."""
        stream, self._stream = self._stream, None
        if stream is None:
            raise RuntimeError("parallel adapter: the MLP ran without its norm2 pre-hook")
        return output + self.scale * self(stream)  # type: ignore[no-any-return]


def attach_sequential(encoder: nn.Module, hidden: int, method: str) -> list[torch.Tensor]:
    """Attach a :class:`SequentialAdapter` to every block; return their parameters."""
    parts = require_vit(encoder, method)
    params: list[torch.Tensor] = []
    for part in parts.blocks:
        adapter = place(part.block, "seq_adapter", SequentialAdapter(parts.width, hidden), encoder)
        part.mlp.register_forward_hook(adapter.on_mlp)
        params.extend(adapter.parameters())
    return params


def attach_parallel(
    encoder: nn.Module, hidden: int, scale: float, method: str
) -> list[torch.Tensor]:
    """Attach a :class:`ParallelAdapter` to every block; return their parameters."""
    parts = require_vit(encoder, method)
    params: list[torch.Tensor] = []
    for part in parts.blocks:
        adapter = ParallelAdapter(parts.width, hidden, scale)
        adapter = place(part.block, "par_adapter", adapter, encoder)
        part.norm2.register_forward_pre_hook(adapter.on_norm2)
        part.mlp.register_forward_hook(adapter.on_mlp)
        params.extend(adapter.parameters())
    return params
