"""Per-block update scale ``||W_adapted - W_initial||_2`` (FewTrans §VI-A, Fig. 5 left).

FewTrans finds full fine-tuning moves every block only slightly (0.01-0.07) while LoRA's
effective updates are larger (0.4-1.0), both "back-heavy". The norm is taken over all
parameters of a block (weights, biases, norms), comparing *effective* weights so that
methods that reparameterise a layer stay comparable:

- peft LoRA layers count as ``W + B A * scale`` (their merged weight);
- q/k/v projections split by the unfuse helper are concatenated back into the fused
  tensor they replaced (timm ``qkv.weight``, ``nn.MultiheadAttention.in_proj_weight``).

Parameters an adapter *adds* (bottleneck adapters, prompts, SSF scales) have no initial
value; their norm is reported separately as ``added``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from fewtrans_board.analysis.plots import layer_lines
from fewtrans_board.analysis.refit import AdaptedEpisode
from fewtrans_board.analysis.report import provenance
from fewtrans_board.blocks.layers import encoder_blocks
from fewtrans_board.stats.intervals import mean_ci

if TYPE_CHECKING:
    import torch
    from torch import nn

PAPER_RANGES = {"finetune": (0.01, 0.07), "lora": (0.4, 1.0)}
FUSED = {
    "": ("weight", "bias"),  # timm: P = attn.qkv holds weight/bias
    "in_proj": ("in_proj_weight", "in_proj_bias"),  # nn.MultiheadAttention at P = attn
}


def _is_lora_layer(module: Any) -> bool:
    return all(hasattr(module, a) for a in ("base_layer", "get_delta_weight", "active_adapters"))


def effective_weights(block: nn.Module) -> dict[str, torch.Tensor]:
    """The block's parameters by name, with LoRA merged (see the module docstring)."""
    out: dict[str, torch.Tensor] = {}
    skip: list[str] = []
    for name, module in block.named_modules():
        if any(name.startswith(prefix + ".") for prefix in skip):
            continue
        if _is_lora_layer(module):
            skip.append(name)
            base = module.base_layer
            weight = base.weight.detach().float().clone()
            for adapter in module.active_adapters:
                if adapter in getattr(module, "lora_A", {}):
                    weight += module.get_delta_weight(adapter).detach().float()
            out[f"{name}.weight"] = weight
            if getattr(base, "bias", None) is not None:
                out[f"{name}.bias"] = base.bias.detach().float()
            continue
        for pname, parameter in module.named_parameters(recurse=False):
            out[f"{name}.{pname}" if name else pname] = parameter.detach().float()
    return out


def _refuse(weights: dict[str, torch.Tensor], initial: set[str]) -> dict[str, torch.Tensor]:
    """Concatenate split ``P.{q,k,v}_proj`` tensors back into the fused name of ``initial``."""
    import torch

    out = dict(weights)
    prefixes = {k[: -len(".q_proj.weight")] for k in weights if k.endswith(".q_proj.weight")}
    for prefix in prefixes:
        for kind in ("weight", "bias"):
            parts = [f"{prefix}.{p}_proj.{kind}" for p in "qkv"]
            if not all(p in out for p in parts):
                continue
            for fused_weight, fused_bias in FUSED.values():
                target = f"{prefix}.{fused_weight if kind == 'weight' else fused_bias}"
                if target in initial:
                    out[target] = torch.cat([out.pop(p) for p in parts])
                    break
    return out


def block_update(initial: nn.Module, adapted: nn.Module) -> dict[str, float]:
    """Update norms of one block.

    Returns:
        ``l2``: norm of the change of the parameters both blocks have; ``relative``: that
        divided by the initial norm; ``added``: norm of parameters only the adapted block
        has; ``unmatched``: parameters of the initial block missing or reshaped in the
        adapted one (0 for every built-in adapter).
    """
    before = effective_weights(initial)
    after = _refuse(effective_weights(adapted), set(before))
    squared_change = squared_initial = squared_added = 0.0
    unmatched = 0
    for name, value in before.items():
        other = after.get(name)
        if other is None or other.shape != value.shape:
            unmatched += 1
            continue
        squared_change += float((other.to(value.device) - value).pow(2).sum())
        squared_initial += float(value.pow(2).sum())
    for name, value in after.items():
        if name not in before:
            squared_added += float(value.pow(2).sum())
    l2 = math.sqrt(squared_change)
    return {
        "l2": l2,
        "relative": l2 / math.sqrt(squared_initial) if squared_initial > 0 else 0.0,
        "added": math.sqrt(squared_added),
        "unmatched": float(unmatched),
    }


def episode_updates(episode: AdaptedEpisode) -> list[dict[str, float]]:
    """Per-block update norms of one re-fitted episode."""
    initial = encoder_blocks(episode.backbone.image_encoder)
    adapted = encoder_blocks(episode.encoder)
    return [block_update(a, b) for a, b in zip(initial, adapted, strict=True)]


def summarize_blocks(per_episode: list[list[dict[str, float]]], key: str) -> dict[str, list[Any]]:
    """Mean and 95% CI over episodes of one measure, per block."""
    values = np.array([[block[key] for block in blocks] for blocks in per_episode], dtype=float)
    stats = [mean_ci(values[:, j]) for j in range(values.shape[1])]
    return {"mean": [s.mean for s in stats], "ci95": [s.ci95 for s in stats]}


def delta_w_run(description: dict[str, Any], episodes: Iterable[AdaptedEpisode]) -> dict[str, Any]:
    """ΔW per block of one run over its re-fitted episodes."""
    rows, per_episode = [], []
    for episode in episodes:
        blocks = episode_updates(episode)
        per_episode.append(blocks)
        rows.append({"episode": episode.episode, "agreement": episode.agreement, "blocks": blocks})
    return {
        **description,
        "blocks": [f"block {i}" for i in range(len(per_episode[0]))] if per_episode else [],
        "per_episode": rows,
        "l2": summarize_blocks(per_episode, "l2"),
        "relative": summarize_blocks(per_episode, "relative"),
        "added": summarize_blocks(per_episode, "added"),
    }


def delta_w_report(results: list[dict[str, Any]]) -> tuple[dict[str, Any], str]:
    """The ΔW report over several runs (e.g. full fine-tuning and LoRA) and its figure."""
    data = {
        "analysis": "delta-w",
        "runs": results,
        "paper": {
            "l2_ranges": {k: list(v) for k, v in PAPER_RANGES.items()},
            "source": "FewTrans §VI-A (Fig. 5, left)",
        },
        "provenance": provenance({"runs": [r["run"] for r in results]}),
    }
    longest = max(results, key=lambda r: len(r["blocks"]))
    figure = layer_lines(
        {f"{r['adapter']} / {r['dataset']}": r["l2"]["mean"] for r in results},
        x_labels=[str(i) for i in range(len(longest["blocks"]))],
        x_title="block",
        y_title="||W_adapted - W_initial||_2",
        title="Parameter update scale per block",
    )
    return data, str(figure)
