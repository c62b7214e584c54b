"""Split fused query/key/value projections into separate ``q_proj``/``k_proj``/``v_proj`` Linears.

LoRA on selected projections (FewTrans: query and value; CLIP-LoRA: query, key and value in
both towers) needs them as separate modules.
timm's ``Attention`` keeps its forward and gets a :class:`SplitQkv` in place of ``attn.qkv``;
open_clip's ``nn.MultiheadAttention`` is replaced as a whole by :class:`SplitMultiheadAttention`,
which has ``nn.MultiheadAttention``'s call signature. Both compute the original function.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from fewtrans_board.blocks.vit_hooks import require_vit
from fewtrans_board.core.errors import FewtransError


def _linear_from(weight: torch.Tensor, bias: torch.Tensor | None) -> nn.Linear:
    """A Linear holding copies of ``weight``/``bias`` (no random init, no RNG use)."""
    out_features, in_features = weight.shape
    layer: nn.Linear = nn.utils.skip_init(  # type: ignore[no-untyped-call]
        nn.Linear,
        in_features,
        out_features,
        bias=bias is not None,
        device=weight.device,
        dtype=weight.dtype,
    )
    with torch.no_grad():
        layer.weight.copy_(weight)
        if bias is not None:
            layer.bias.copy_(bias)
    return layer


def _split(weight: torch.Tensor, bias: torch.Tensor | None) -> list[nn.Linear]:
    weights = weight.detach().chunk(3, dim=0)
    biases = bias.detach().chunk(3, dim=0) if bias is not None else (None, None, None)
    return [_linear_from(w, b) for w, b in zip(weights, biases, strict=True)]


class SplitQkv(nn.Module):
    """Drop-in for timm's fused ``qkv`` Linear: ``cat([q_proj(x), k_proj(x), v_proj(x)], -1)``."""

    def __init__(self, q_proj: nn.Linear, k_proj: nn.Linear, v_proj: nn.Linear) -> None:
        super().__init__()
        self.q_proj, self.k_proj, self.v_proj = q_proj, k_proj, v_proj

    @classmethod
    def from_fused(cls, qkv: nn.Linear) -> SplitQkv:
        """Copy the three thirds of a fused ``Linear(D, 3A)``, in its training mode."""
        return cls(*_split(qkv.weight, qkv.bias)).train(qkv.training)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Return the fused projection's output."""
        return torch.cat([self.q_proj(x), self.k_proj(x), self.v_proj(x)], dim=-1)


def _additive_mask(
    attn_mask: torch.Tensor | None,
    key_padding_mask: torch.Tensor | None,
    shape: tuple[int, int, int, int],
    dtype: torch.dtype,
) -> torch.Tensor | None:
    """Merge ``nn.MultiheadAttention`` masks (bool True = blocked) into one additive mask."""
    batch, _, length, source = shape

    def additive(mask: torch.Tensor) -> torch.Tensor:
        if mask.dtype == torch.bool:
            return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(
                mask, float("-inf")
            )
        return mask.to(dtype)

    merged = None
    if attn_mask is not None:
        mask = additive(attn_mask)
        merged = mask.view(1, 1, length, source) if mask.dim() == 2 else mask.view(shape)
    if key_padding_mask is not None:
        padding = additive(key_padding_mask).view(batch, 1, 1, source)
        merged = padding if merged is None else merged + padding
    return merged


class SplitMultiheadAttention(nn.Module):
    """``nn.MultiheadAttention`` with separate q/k/v/out Linears, using SDPA.

    Supports what open_clip uses (self- and cross-attention, ``batch_first`` either way,
    ``attn_mask`` and ``key_padding_mask`` as bool or additive masks, ``need_weights``);
    ``kdim``/``vdim`` different from the width, ``bias_k``/``bias_v`` and ``add_zero_attn``
    are rejected when converting.
    """

    def __init__(
        self, projections: list[nn.Linear], out_proj: nn.Linear, num_heads: int, **options: Any
    ) -> None:
        super().__init__()
        self.q_proj, self.k_proj, self.v_proj = projections
        self.out_proj = out_proj
        self.num_heads = num_heads
        self.embed_dim = out_proj.in_features
        self.head_dim = self.embed_dim // num_heads
        self.batch_first = bool(options.get("batch_first", False))
        self.dropout = float(options.get("dropout", 0.0))

    @classmethod
    def from_mha(cls, mha: nn.MultiheadAttention) -> SplitMultiheadAttention:
        """Copy the weights and the training mode of an ``nn.MultiheadAttention``.

        Raises:
            FewtransError: the module uses options this class does not reproduce.
        """
        if not mha._qkv_same_embed_dim or mha.bias_k is not None or mha.add_zero_attn:
            raise FewtransError(
                "cannot unfuse nn.MultiheadAttention with kdim/vdim, bias_k/bias_v or add_zero_attn"
            )
        out = _linear_from(mha.out_proj.weight.detach(), _detached(mha.out_proj.bias))
        projections = _split(mha.in_proj_weight, mha.in_proj_bias)
        split = cls(
            projections, out, mha.num_heads, batch_first=mha.batch_first, dropout=mha.dropout
        )
        # A replacement injected into an eval-mode model must not switch attention dropout on.
        return split.train(mha.training)

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        key_padding_mask: torch.Tensor | None = None,
        need_weights: bool = True,
        attn_mask: torch.Tensor | None = None,
        average_attn_weights: bool = True,
        is_causal: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Same arguments and results as ``nn.MultiheadAttention.forward``.

        Raises:
            RuntimeError: ``is_causal`` without ``attn_mask``; as in ``nn.MultiheadAttention``,
                ``is_causal`` is only a hint that ``attn_mask`` is causal.
        """
        if is_causal and attn_mask is None:
            raise RuntimeError(
                "Need attn_mask if specifying the is_causal hint (as nn.MultiheadAttention)"
            )
        unbatched = query.dim() == 2
        if unbatched:
            query, key, value = (t.unsqueeze(0) for t in (query, key, value))
            key_padding_mask = None if key_padding_mask is None else key_padding_mask.unsqueeze(0)
        elif not self.batch_first:
            query, key, value = (t.transpose(0, 1) for t in (query, key, value))
        batch, length, _ = query.shape
        source = key.shape[1]

        def heads(x: torch.Tensor, n: int) -> torch.Tensor:
            return x.view(batch, n, self.num_heads, self.head_dim).transpose(1, 2)

        q = heads(self.q_proj(query), length)
        k, v = heads(self.k_proj(key), source), heads(self.v_proj(value), source)
        mask = _additive_mask(
            attn_mask, key_padding_mask, (batch, self.num_heads, length, source), q.dtype
        )
        dropout = self.dropout if self.training else 0.0
        weights = None
        if need_weights:
            scores = (q @ k.transpose(-2, -1)) * self.head_dim**-0.5
            probs = (scores if mask is None else scores + mask).softmax(dim=-1)
            out = F.dropout(probs, dropout, self.training) @ v
            weights = probs.mean(dim=1) if average_attn_weights else probs
            weights = weights.squeeze(0) if unbatched else weights
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout)
        out = self.out_proj(out.transpose(1, 2).reshape(batch, length, self.embed_dim))
        if unbatched:
            out = out.squeeze(0)
        elif not self.batch_first:
            out = out.transpose(0, 1)
        return out, weights


def _detached(t: torch.Tensor | None) -> torch.Tensor | None:
    return None if t is None else t.detach()


def unfuse_qkv(encoder: nn.Module) -> int:
    """Replace every block's fused q/k/v projection of a ViT, in place.

    Args:
        encoder: a timm ``VisionTransformer`` or open_clip ``VisionTransformer``.

    Returns:
        The number of attention modules converted (already split ones are skipped).

    Raises:
        FewtransError: not a ViT, or a block's attention is of an unsupported kind.
    """
    parts = require_vit(encoder, "unfuse-qkv")
    converted = 0
    for part in parts.blocks:
        attn, qkv = part.attn, getattr(part.attn, "qkv", None)
        if isinstance(attn, SplitMultiheadAttention) or isinstance(qkv, SplitQkv):
            continue
        if isinstance(attn, nn.MultiheadAttention):
            part.attn = SplitMultiheadAttention.from_mha(attn)
            part.block.attn = part.attn
        elif isinstance(qkv, nn.Linear):
            attn.qkv = SplitQkv.from_fused(qkv)
        else:
            raise FewtransError(
                f"unfuse-qkv: unsupported attention {type(attn).__name__} (expected timm "
                "Attention with a fused qkv Linear or nn.MultiheadAttention)"
            )
        converted += 1
    return converted


def unfuse_attention(module: nn.Module) -> int:
    """Replace every ``nn.MultiheadAttention`` inside ``module`` by :class:`SplitMultiheadAttention`.

    Works on whole models (both CLIP towers); edit a deep copy the caller owns.

    Returns:
        The number of attention modules replaced.

    Raises:
        FewtransError: ``module`` itself is an ``nn.MultiheadAttention`` (wrap it first), or
            one of them uses options the split module does not support.
    """
    if isinstance(module, nn.MultiheadAttention):
        raise FewtransError("unfuse_attention edits children; wrap the attention module first")
    targets = [(n, c) for n, c in module.named_modules() if isinstance(c, nn.MultiheadAttention)]
    for name, child in targets:
        parent_name, _, attribute = name.rpartition(".")
        parent = module.get_submodule(parent_name) if parent_name else module
        setattr(parent, attribute, SplitMultiheadAttention.from_mha(child))
    return len(targets)
