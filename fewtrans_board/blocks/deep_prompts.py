"""Deep visual prompt tokens (VPT-deep) for timm and open_clip ViTs, attached with hooks.

``n`` prompt tokens are appended to the token sequence entering the first block; before
each of the next ``depth - 1`` blocks the prompt slice is replaced by that layer's own
prompts; after the last block the prompts are removed, so pooling, final norms and
projections see the original tokens only (any pooling type works). With ``depth = 1``
this is VPT-shallow. Prompts come from a trainable parameter, or from a provider (MaPLe
derives vision prompts from text prompts).

Importing this module imports torch, so adapters import it inside ``fit``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from fewtrans_board.blocks.vit_parts import vit_parts

PromptProvider = Callable[[], torch.Tensor]
"""Returns prompts ``[depth, n_tokens, width]``."""


class DeepVisualPrompts(nn.Module):
    """Learned prompt tokens for the first ``depth`` blocks of a ViT.

    The hooks are bound methods of this module, so a ``copy.deepcopy`` of an encoder that
    holds it (or of this module) reads the copy's prompts, not the original's.

    Args:
        n_tokens: prompts per layer.
        depth: number of blocks that receive their own prompts (1 = shallow).
        width: token width of the ViT.
        init_std: std of the normal initialisation (VPT/FewTrans: 0.02).
    """

    def __init__(self, n_tokens: int, depth: int, width: int, init_std: float = 0.02) -> None:
        super().__init__()
        self.n_tokens, self.depth = n_tokens, depth
        self.prompts = torch.nn.Parameter(torch.randn(depth, n_tokens, width) * init_std)
        self._provider: PromptProvider | None = None
        self._token_axis = 1
        self._handles: list[Any] = []

    def attach(self, encoder: nn.Module, provider: PromptProvider | None = None) -> None:
        """Register the hooks on ``encoder`` (a deep copy the adapter owns).

        Args:
            encoder: a timm or open_clip ViT image encoder.
            provider: returns the prompts ``[depth, n_tokens, width]``; ``None`` uses this
                module's own ``prompts`` parameter.

        Raises:
            FewtransError: ``depth`` exceeds the number of blocks, or not a supported ViT.
        """
        from functools import partial

        parts = vit_parts(encoder)
        if self.depth > len(parts.blocks):
            from fewtrans_board.core.errors import FewtransError

            raise FewtransError(f"prompt depth {self.depth} exceeds the {len(parts.blocks)} blocks")
        self._provider = provider
        self._token_axis = 1 if parts.batch_first else 0
        self._handles.append(parts.token_start.register_forward_hook(self._append_first))
        for layer in range(1, self.depth):
            self._handles.append(
                parts.blocks[layer].block.register_forward_pre_hook(
                    partial(self._replace, layer), with_kwargs=True
                )
            )
        self._handles.append(parts.blocks[-1].block.register_forward_hook(self._strip))

    def detach(self) -> None:
        """Remove the hooks."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def _layer_prompts(self, layer: int, like: torch.Tensor, token_axis: int) -> torch.Tensor:
        """Prompts of ``layer`` expanded to the batch of ``like``, tokens on ``token_axis``."""
        prompts = self._provider() if self._provider is not None else self.prompts
        batch_axis = 1 - token_axis
        shaped = prompts[layer].to(like.dtype).unsqueeze(0).expand(like.shape[batch_axis], -1, -1)
        return shaped if token_axis == 1 else shaped.transpose(0, 1)

    def _append_first(self, module: nn.Module, args: Any, output: torch.Tensor) -> torch.Tensor:
        # The token-start output is batch-first for every supported encoder; only the blocks
        # of a batch_first=False open_clip transformer see [tokens, batch, width].
        return torch.cat([output, self._layer_prompts(0, output, 1)], dim=1)

    def _replace(
        self, layer: int, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        x, axis = args[0], self._token_axis
        kept = x.narrow(axis, 0, x.shape[axis] - self.n_tokens)
        return (torch.cat([kept, self._layer_prompts(layer, x, axis)], dim=axis), *args[1:]), kwargs

    def _strip(self, module: nn.Module, args: Any, output: torch.Tensor) -> torch.Tensor:
        axis = self._token_axis
        return output.narrow(axis, 0, output.shape[axis] - self.n_tokens)
