"""SEP's Token Fusion Module (TFM) and the hooks that regenerate prompts inside CLIP's towers.

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

Two attention operators (SEP's ``fusion`` option):

- ``"projected"`` (the default) is what both official codes run: ``PromptAttention`` in
  htyao89/SEP ``SEP_main/trainers/sep.py`` and, unchanged, in the inductive-CLIP paper's
  ``FSL/trainers/sep.py`` (and ``sepres.py``), called from ``ResidualAttentionBlock_SEP_Text``
  / ``_Visual`` in ``trainers/clip_text/model.py`` (``FSL/trainers/clip_text_sep/model.py``).
  It is ``nn.MultiheadAttention(W, W // 64)``: learned query/key/value projections with
  biases, ``W // 64`` heads of width 64 (scale ``1 / sqrt(64)``) and a learned output
  projection.
- ``"plain"`` is the attention of the paper's Eq. 11 as issue 26 quotes it,
  ``softmax(Z_v Z_p^T / sqrt(D)) Z_v``: no projections, one head, scale ``1 / sqrt(D)``
  over the full width.
  Read with the softmax over the pre-trained tokens, each prompt takes a convex mixture
  of the pre-trained tokens, i.e. ``softmax(Z_p Z_v^T / sqrt(D)) Z_v`` row by row (this is
  how the code orients its attention, prompts as queries). This variant is a
  simplification of the released method, not what the paper's numbers were produced with;
  it keeps everything else of the code (the shared LayerNorm in front of the attention,
  the gates ``s1``, ``s2`` and the MLP), so the two differ only by the projections.

Either way the module follows the code's ``PromptAttention.forward(visual_context,
token_context)`` (called with ``visual_context`` = the pre-trained tokens ``t`` and
``token_context`` = the prompts ``p``)::

    z   = s1 * t + (1 - s1) * Attn(query=LN1(p), key=LN1(t), value=LN1(t))
    out = s2 * z + (1 - s2) * MLP(LN2(z))

with ``MLP = Linear(W, 256, no bias), QuickGELU, Linear(256, W, no bias)`` and ``s1 = s2 =
0.75`` at the start. The code's ``ln_pa_1_token`` LayerNorm is created but never used, so
it is not created here. The code builds one ``PromptAttention`` and deep-copies it to every
layer (``_get_clones``), so all layers start from the same weights; :func:`fusion_layers`
does the same. Not reproduced: the code's fp16 weights (it multiplies by
``scale.half()``); here float32 with autocast.

Importing this module imports torch, so adapters import it inside their sessions.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

TFM_HIDDEN = 256
SCALE_INIT = 0.75
HEAD_WIDTH = 64
"""Width of one attention head of the projected fusion (the code's ``W // 64`` heads)."""

FUSIONS = ("projected", "plain")
"""The attention operators of :class:`TokenFusion` (see the module docstring)."""


class QuickGELU(nn.Module):
    """``x * sigmoid(1.702 x)``, CLIP's activation."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply the activation."""
        return x * torch.sigmoid(1.702 * x)


def plain_attention(queries: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """``softmax(Q Z^T / sqrt(D)) Z`` over the last two axes: no projections, one head.

    Args:
        queries: ``[..., n, D]`` (the prompts).
        tokens: ``[..., k, D]`` (the pre-trained tokens, keys and values at once).

    Returns:
        ``[..., n, D]``: each query's softmax-weighted mixture of ``tokens``.
    """
    scores = queries @ tokens.transpose(-2, -1) / math.sqrt(tokens.shape[-1])
    return torch.softmax(scores, dim=-1) @ tokens


class TokenFusion(nn.Module):
    """``s2 * z + (1 - s2) * MLP(LN2(z))`` with ``z = s1 * t + (1 - s1) * Attn(LN1(p), LN1(t), LN1(t))``.

    Args:
        width: token width.
        hidden: bottleneck width of the MLP (256 in SEP).
        fusion: ``"projected"`` (the official code's multi-head attention with learned
            projections) or ``"plain"`` (Eq. 11's projection-free attention).

    Raises:
        ValueError: an unknown ``fusion``.
    """

    def __init__(self, width: int, hidden: int = TFM_HIDDEN, fusion: str = "projected") -> None:
        super().__init__()
        if fusion not in FUSIONS:
            raise ValueError(f"fusion must be one of {FUSIONS}, got {fusion!r}")
        self.fusion = fusion
        self.attn: nn.MultiheadAttention | None = (
            nn.MultiheadAttention(width, max(1, width // HEAD_WIDTH), batch_first=True)
            if fusion == "projected"
            else None
        )
        self.ln_1 = nn.LayerNorm(width)
        self.ln_2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(
            nn.Linear(width, hidden, bias=False), QuickGELU(), nn.Linear(hidden, width, bias=False)
        )
        self.scale1 = nn.Parameter(torch.full((1,), SCALE_INIT))
        self.scale2 = nn.Parameter(torch.full((1,), SCALE_INIT))

    def attend(self, tokens: torch.Tensor, prompts: torch.Tensor) -> torch.Tensor:
        """The attention term: prompts (queries) over the pre-trained tokens, both layer-normed."""
        keys, queries = self.ln_1(tokens), self.ln_1(prompts)
        if self.attn is None:
            return plain_attention(queries, keys)
        attended: torch.Tensor = self.attn(queries, keys, keys, need_weights=False)[0]
        return attended

    def forward(self, tokens: torch.Tensor, prompts: torch.Tensor) -> torch.Tensor:
        """New prompts ``[B, n, W]`` from pre-trained ``tokens`` and current ``prompts`` (same shape)."""
        fused = self.scale1 * tokens + (1 - self.scale1) * self.attend(tokens, prompts)
        out: torch.Tensor = self.scale2 * fused + (1 - self.scale2) * self.mlp(self.ln_2(fused))
        return out


def top_tokens(x: torch.Tensor, k: int) -> torch.Tensor:
    """Per row of ``x [B, L, W]``, the ``k`` tokens with the largest mean squared value, in rank order."""
    scores = x.float().pow(2).mean(dim=-1)
    index = scores.topk(k, dim=1).indices
    return torch.gather(x, 1, index.unsqueeze(-1).expand(-1, -1, x.shape[-1]))


def _attach(
    blocks: Sequence[nn.Module],
    fusions: dict[int, TokenFusion],
    batch_first: bool,
    rewrite: Callable[[torch.Tensor, TokenFusion], torch.Tensor],
) -> list[Any]:
    """Pre-hooks on ``blocks[i]`` rewriting the batch-first input with ``fusions[i]``."""

    def flip(x: torch.Tensor) -> torch.Tensor:
        return x if batch_first else x.transpose(0, 1)

    def hook(layer: int) -> Any:
        def replace(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            return (flip(rewrite(flip(args[0]), fusions[layer])), *args[1:]), kwargs

        return replace

    return [
        blocks[layer].register_forward_pre_hook(hook(layer), with_kwargs=True) for layer in fusions
    ]


def attach_text_fusion(
    blocks: Sequence[nn.Module], fusions: dict[int, TokenFusion], n_ctx: int, batch_first: bool
) -> list[Any]:
    """Replace text positions ``1..n_ctx`` before block ``i`` by ``fusions[i](next n tokens, prompts)``."""

    def rewrite(x: torch.Tensor, fusion: TokenFusion) -> torch.Tensor:
        prompts, tokens = x[:, 1 : 1 + n_ctx], x[:, 1 + n_ctx : 1 + 2 * n_ctx]
        fused = fusion(tokens, prompts).to(x.dtype)
        return torch.cat([x[:, :1], fused, x[:, 1 + n_ctx :]], dim=1)

    return _attach(blocks, fusions, batch_first, rewrite)


def attach_visual_fusion(
    blocks: Sequence[nn.Module], fusions: dict[int, TokenFusion], n_prompts: int, batch_first: bool
) -> list[Any]:
    """Replace the last ``n_prompts`` image tokens before block ``i`` by ``fusions[i](top tokens, prompts)``."""

    def rewrite(x: torch.Tensor, fusion: TokenFusion) -> torch.Tensor:
        kept, prompts = x[:, :-n_prompts], x[:, -n_prompts:]
        fused = fusion(top_tokens(kept, n_prompts), prompts).to(x.dtype)
        return torch.cat([kept, fused], dim=1)

    return _attach(blocks, fusions, batch_first, rewrite)


def fusion_layers(n_blocks: int, width: int, fusion: str = "projected") -> nn.ModuleDict:
    """One :class:`TokenFusion` for every block after the first (SEP's default layer set).

    As the code's ``_get_clones``, one module is built and deep-copied to every layer, so
    all layers start from the same weights (they train apart).
    """
    first = TokenFusion(width, fusion=fusion)
    return nn.ModuleDict({str(i): copy.deepcopy(first) for i in range(1, n_blocks)})
