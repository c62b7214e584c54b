"""SEP's Token Fusion Module and the hooks that regenerate prompts inside CLIP's towers.

Before each selected block the prompt tokens are replaced by ``TFM(pre-trained tokens,
prompts)``: cross-attention with the prompts as queries and ``k`` *self-enhanced*
pre-trained tokens as keys and values, mixed with those tokens by a learned scale, then a
gated bottleneck MLP.

- Text: the prompts sit at positions ``1..n`` (after the start token); the pre-trained
  tokens are the ``n`` positions right after them (the class-name tokens).
- Image: the prompts are the last ``n`` tokens; the pre-trained tokens are, per image, the
  ``n`` non-prompt tokens with the largest mean squared activation. The reference ranks
  tokens by their activation averaged over the *batch*, which makes a query's logits
  depend on the other queries; ranking per image keeps the method inductive.

Importing this module imports torch, so adapters import it inside their sessions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

TFM_HIDDEN = 256
SCALE_INIT = 0.75


class QuickGELU(nn.Module):
    """``x * sigmoid(1.702 x)``, CLIP's activation."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply the activation."""
        return x * torch.sigmoid(1.702 * x)


class TokenFusion(nn.Module):
    """``s2 * z + (1 - s2) * MLP(LN(z))`` with ``z = s1 * t + (1 - s1) * Attn(LN(p), LN(t), LN(t))``.

    Args:
        width: token width.
        hidden: bottleneck width of the MLP (256 in SEP).
    """

    def __init__(self, width: int, hidden: int = TFM_HIDDEN) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(width, max(1, width // 64), batch_first=True)
        self.ln_1 = nn.LayerNorm(width)
        self.ln_2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(
            nn.Linear(width, hidden, bias=False), QuickGELU(), nn.Linear(hidden, width, bias=False)
        )
        self.scale1 = nn.Parameter(torch.full((1,), SCALE_INIT))
        self.scale2 = nn.Parameter(torch.full((1,), SCALE_INIT))

    def forward(self, tokens: torch.Tensor, prompts: torch.Tensor) -> torch.Tensor:
        """New prompts ``[B, n, W]`` from pre-trained ``tokens`` and current ``prompts`` (same shape)."""
        keys = self.ln_1(tokens)
        attended = self.attn(self.ln_1(prompts), keys, keys, need_weights=False)[0]
        fused = self.scale1 * tokens + (1 - self.scale1) * attended
        out: torch.Tensor = self.scale2 * fused + (1 - self.scale2) * self.mlp(self.ln_2(fused))
        return out


def top_tokens(x: torch.Tensor, k: int) -> torch.Tensor:
    """Per row of ``x [B, L, W]``, the ``k`` tokens with the largest mean squared value, in rank order."""
    scores = x.float().pow(2).mean(dim=-1)
    index = scores.topk(k, dim=1).indices
    return torch.gather(x, 1, index.unsqueeze(-1).expand(-1, -1, x.shape[-1]))


def _batch_first(x: torch.Tensor, axis: int) -> torch.Tensor:
    return x if axis == 1 else x.transpose(0, 1)


def attach_text_fusion(
    blocks: Sequence[nn.Module], fusions: dict[int, TokenFusion], n_ctx: int, batch_first: bool
) -> list[Any]:
    """Replace text positions ``1..n_ctx`` before block ``i`` by ``fusions[i](next n tokens, prompts)``."""
    axis = 1 if batch_first else 0

    def hook(layer: int) -> Any:
        def replace(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            x = _batch_first(args[0], axis)
            prompts = x[:, 1 : 1 + n_ctx]
            tokens = x[:, 1 + n_ctx : 1 + 2 * n_ctx]
            fused = fusions[layer](tokens, prompts).to(x.dtype)
            x = torch.cat([x[:, :1], fused, x[:, 1 + n_ctx :]], dim=1)
            return (_batch_first(x, axis), *args[1:]), kwargs

        return replace

    return [
        blocks[layer].register_forward_pre_hook(hook(layer), with_kwargs=True) for layer in fusions
    ]


def attach_visual_fusion(
    blocks: Sequence[nn.Module], fusions: dict[int, TokenFusion], n_prompts: int, batch_first: bool
) -> list[Any]:
    """Replace the last ``n_prompts`` image tokens before block ``i`` by ``fusions[i](top tokens, prompts)``."""
    axis = 1 if batch_first else 0

    def hook(layer: int) -> Any:
        def replace(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            x = _batch_first(args[0], axis)
            kept, prompts = x[:, :-n_prompts], x[:, -n_prompts:]
            fused = fusions[layer](top_tokens(kept, n_prompts), prompts).to(x.dtype)
            x = torch.cat([kept, fused], dim=1)
            return (_batch_first(x, axis), *args[1:]), kwargs

        return replace

    return [
        blocks[layer].register_forward_pre_hook(hook(layer), with_kwargs=True) for layer in fusions
    ]


def fusion_layers(n_blocks: int, width: int) -> nn.ModuleDict:
    """One :class:`TokenFusion` for every block after the first (SEP's default layer set)."""
    return nn.ModuleDict({str(i): TokenFusion(width) for i in range(1, n_blocks)})
