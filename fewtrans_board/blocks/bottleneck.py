"""Bottleneck adapters (D -> hidden -> D) attached to ViT blocks with forward hooks.

Both kinds act on the MLP branch *as it enters the residual stream*, i.e. after the
block's LayerScale ``ls2`` (and timm's drop-path), through a hook on the branch's last module
(:attr:`~fewtrans_board.blocks.vit_parts.BlockParts.mlp_branch_end`):

* sequential (Houlsby-style, FewTrans "adapter"): with ``h = ls2(MLP(LN2(x)))`` the block
  computes ``x + h + A(h)``. The adapter transforms the branch's residual update, so its own
  update is not rescaled by LayerScale's ``gamma`` (which can be ~1e-5 and would freeze it);
  without LayerScale (CLIP, plain ViTs) this is the usual ``h + A(h)`` on the MLP output.
* parallel (AdaptFormer, FewTrans "adaptformer" and ViT "TSA"): a pre-hook on the second norm
  keeps the residual stream ``x`` after attention, and the block computes
  ``x + ls2(MLP(LN2(x))) + s * A(x)`` as AdaptFormer defines it (``A`` outside LayerScale).

The up-projection and both biases start at zero, so an attached adapter leaves the
encoder's function unchanged until it trains.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from fewtrans_board.blocks.vit_hooks import place, require_vit
from fewtrans_board.core.errors import FewtransError


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
    """Adds ``A(h)`` to the MLP branch output ``h`` (after LayerScale)."""

    def on_branch(self, module: nn.Module, args: Any, output: torch.Tensor) -> torch.Tensor:
        """Forward hook of the MLP branch's last module: ``h + A(h)``."""
        return output + self(output)  # type: ignore[no-any-return]


class ParallelAdapter(Bottleneck):
    """Adds ``scale * A(x)`` to the MLP branch output, ``x`` being the branch's residual input."""

    def __init__(self, width: int, hidden: int, scale: float) -> None:
        super().__init__(width, hidden)
        self.scale = scale
        self._stream: torch.Tensor | None = None

    def on_norm2(self, module: nn.Module, args: tuple[Any, ...]) -> None:
        """Forward pre-hook of the second norm: remember the residual stream."""
        self._stream = args[0]

    def on_branch(self, module: nn.Module, args: Any, output: torch.Tensor) -> torch.Tensor:
        """Forward hook of the MLP branch's last module: ``ls2(MLP(LN(x))) + scale * A(x)``."""
        stream, self._stream = self._stream, None
        if stream is None:
            raise RuntimeError("parallel adapter: the MLP branch ran without its norm2 pre-hook")
        return output + self.scale * self(stream)  # type: ignore[no-any-return]


def _attach(
    encoder: nn.Module,
    method: str,
    name: str,
    make: Callable[[int], SequentialAdapter | ParallelAdapter],
) -> list[torch.Tensor]:
    """Attach ``make(width)`` as child ``name`` of every block; return the parameters."""
    parts = require_vit(encoder, method)
    params: list[torch.Tensor] = []
    for part in parts.blocks:
        end = part.mlp_branch_end
        if end is None:
            raise FewtransError(
                f"{method}: block {type(part.block).__name__} has no MLP-branch output module "
                "(timm drop_path2/ls2 or open_clip ls_2) to attach the adapter to"
            )
        adapter = place(part.block, name, make(parts.width), encoder)
        if isinstance(adapter, ParallelAdapter):
            part.norm2.register_forward_pre_hook(adapter.on_norm2)
        end.register_forward_hook(adapter.on_branch)
        params.extend(adapter.parameters())
    return params


def attach_sequential(encoder: nn.Module, hidden: int, method: str) -> list[torch.Tensor]:
    """Attach a :class:`SequentialAdapter` to every block; return their parameters.

    Raises:
        FewtransError: the encoder is not a supported ViT.
    """
    return _attach(encoder, method, "seq_adapter", lambda width: SequentialAdapter(width, hidden))


def attach_parallel(
    encoder: nn.Module, hidden: int, scale: float, method: str
) -> list[torch.Tensor]:
    """Attach a :class:`ParallelAdapter` to every block; return their parameters.

    Raises:
        FewtransError: the encoder is not a supported ViT.
    """
    return _attach(encoder, method, "par_adapter", lambda w: ParallelAdapter(w, hidden, scale))
