"""Parameter change of adapted encoders: FewTrans Fig. 5 (left) and BSCD-FSL Fig. 2.

README.md ("Analyses") defines the measures: ``l2`` (FewTrans §VI-A), ``||W_adapted -
W_initial||_2`` per block; ``relative``, that over ``||W_initial||``; ``bscd_relative``
(BSCD-FSL §7.2.1), the per-element mean of ``|θ_adapted - θ_init| / |θ_init|`` per block and
per layer, elements with ``θ_init = 0`` left out and reported as ``zero_initial`` and
``zero_change`` (:data:`ZERO_RULE`; a layer that starts at zero everywhere has no value,
``null``). FewTrans finds full fine-tuning moves every block only slightly (0.01-0.07) and
LoRA more (0.4-1.0), both "back-heavy" (:data:`PAPER_RANGES`).

A norm covers all parameters of a block (weights, biases, norms), compared as *effective*
weights so that methods that reparameterise a layer stay comparable: peft LoRA layers count
as ``W + B A * scale`` (their merged weight); q/k/v projections split by the unfuse helper
are concatenated back into the fused tensor they replaced (timm ``qkv.weight``,
``nn.MultiheadAttention.in_proj_weight``). Parameters an adapter *adds* (bottleneck
adapters, prompts, SSF scales) have no initial value; their norm is reported as ``added``.
A layer is a parameterised module of the encoder (the stem, each convolution / linear /
norm, in registration order; a parameter of the encoder itself, e.g. a class token, is a
layer of its own), the paper's "layer".
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from fewtrans_board.analysis.refit import AdaptedEpisode
from fewtrans_board.analysis.report import provenance
from fewtrans_board.blocks.layers import encoder_blocks
from fewtrans_board.core.errors import FewtransError
from fewtrans_board.figures.charts import grouped_bars, layer_lines
from fewtrans_board.stats.intervals import mean_ci

if TYPE_CHECKING:
    import torch
    from markupsafe import Markup
    from torch import nn

PAPER_RANGES = {"finetune": (0.01, 0.07), "lora": (0.4, 1.0)}
MEASURES = ("l2", "relative", "bscd-relative")
"""What the figure and the printed line show: FewTrans's norm, the norm ratio, BSCD's ratio."""
ZERO_RULE = (
    "elements with an initial value of exactly 0 are left out of the per-element mean of "
    "|theta_adapted - theta_init| / |theta_init| (undefined there); their count is "
    "zero_initial and their mean |theta_adapted| is zero_change"
)
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


def _matched(
    initial: nn.Module, adapted: nn.Module
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Effective weights of both modules, the adapted ones re-fused onto the initial names."""
    before = effective_weights(initial)
    return before, _refuse(effective_weights(adapted), set(before))


@dataclass
class RelativeChange:
    """Running sums of BSCD's per-element ratio ``|θ̂ - θ| / |θ|`` over some tensors.

    Attributes:
        ratio_sum: sum of the ratio over elements with ``θ != 0``.
        counted: how many such elements.
        zero_initial: elements with ``θ == 0`` (left out of the mean).
        zero_change_sum: sum of ``|θ̂|`` over those elements.
    """

    ratio_sum: float = 0.0
    counted: int = 0
    zero_initial: int = 0
    zero_change_sum: float = 0.0

    def add(self, initial: torch.Tensor, adapted: torch.Tensor) -> None:
        """Add the elements of one tensor pair (same shape), in float64."""
        before = initial.detach().double()
        change = (adapted.detach().to(before.device).double() - before).abs()
        nonzero = before != 0
        self.ratio_sum += float((change[nonzero] / before[nonzero].abs()).sum())
        self.counted += int(nonzero.sum())
        self.zero_initial += int((~nonzero).sum())
        self.zero_change_sum += float(change[~nonzero].sum())

    def values(self) -> dict[str, float]:
        """``bscd_relative`` (NaN when no element counts), ``zero_initial``, ``zero_change``."""
        return {
            "bscd_relative": self.ratio_sum / self.counted if self.counted else math.nan,
            "zero_initial": float(self.zero_initial),
            "zero_change": self.zero_change_sum / self.zero_initial if self.zero_initial else 0.0,
        }


def block_update(initial: nn.Module, adapted: nn.Module) -> dict[str, float]:
    """Update norms of one block.

    Returns:
        ``l2``: norm of the change of the parameters both blocks have; ``relative``: that
        divided by the initial norm; ``added``: norm of parameters only the adapted block
        has; ``unmatched``: parameters of the initial block missing or reshaped in the
        adapted one (0 for every built-in adapter); ``bscd_relative``, ``zero_initial`` and
        ``zero_change``: BSCD's per-element mean ratio over the block's matched elements
        (see :class:`RelativeChange` and the module docstring).
    """
    before, after = _matched(initial, adapted)
    squared_change = squared_initial = squared_added = 0.0
    unmatched = 0
    ratio = RelativeChange()
    for name, value in before.items():
        other = after.get(name)
        if other is None or other.shape != value.shape:
            unmatched += 1
            continue
        squared_change += float((other.to(value.device) - value).pow(2).sum())
        squared_initial += float(value.pow(2).sum())
        ratio.add(value, other)
    for name, value in after.items():
        if name not in before:
            squared_added += float(value.pow(2).sum())
    l2 = math.sqrt(squared_change)
    return {
        "l2": l2,
        "relative": l2 / math.sqrt(squared_initial) if squared_initial > 0 else 0.0,
        "added": math.sqrt(squared_added),
        "unmatched": float(unmatched),
        **ratio.values(),
    }


def layer_of(name: str, module_names: set[str]) -> str:
    """The layer a parameter belongs to: its owning module (the parameter itself at the root)."""
    owner = name.rsplit(".", 1)[0] if "." in name else ""
    return owner if owner in module_names else name


def layer_updates(initial: nn.Module, adapted: nn.Module) -> list[dict[str, Any]]:
    """BSCD's per-element relative change for every parameterised module of an encoder.

    Args:
        initial: the pretrained encoder.
        adapted: the adapted encoder (LoRA merged and q/k/v re-fused as for the blocks).

    Returns:
        One ``{"layer": name, "elements": n, "bscd_relative", "zero_initial",
        "zero_change"}`` per layer, in the order of ``initial.named_modules()`` (the root's
        own parameters, e.g. a ViT's class token, then the modules in registration order,
        the stem first for the usual backbones); parameters missing or reshaped in ``adapted`` count
        in no layer (``elements`` holds the matched ones).
    """
    before, after = _matched(initial, adapted)
    module_names = {name for name, _ in initial.named_modules() if name}
    layers: dict[str, tuple[RelativeChange, list[int]]] = {}
    for name, value in before.items():
        ratio, elements = layers.setdefault(layer_of(name, module_names), (RelativeChange(), [0]))
        other = after.get(name)
        if other is None or other.shape != value.shape:
            continue
        ratio.add(value, other)
        elements[0] += value.numel()
    return [
        {"layer": layer, "elements": elements[0], **ratio.values()}
        for layer, (ratio, elements) in layers.items()
    ]


def episode_updates(episode: AdaptedEpisode) -> list[dict[str, float]]:
    """Per-block update norms of one re-fitted episode."""
    initial = encoder_blocks(episode.backbone.image_encoder)
    adapted = encoder_blocks(episode.encoder)
    return [block_update(a, b) for a, b in zip(initial, adapted, strict=True)]


def summarize_blocks(per_episode: list[list[dict[str, float]]], key: str) -> dict[str, list[Any]]:
    """Mean and 95% CI over episodes of one measure, per block (or per layer)."""
    values = np.array([[block[key] for block in blocks] for blocks in per_episode], dtype=float)
    stats = [mean_ci(values[:, j]) for j in range(values.shape[1])]
    return {"mean": [s.mean for s in stats], "ci95": [s.ci95 for s in stats]}


def _layer_summary(per_episode: list[list[dict[str, Any]]]) -> dict[str, Any]:
    if not per_episode:
        return {"names": [], "elements": [], "zero_initial": [], "bscd_relative": {}}
    first = per_episode[0]
    names = [layer["layer"] for layer in first]
    for layers in per_episode[1:]:
        if [layer["layer"] for layer in layers] != names:
            raise FewtransError("the re-fitted episodes of one run differ in their layers")
    return {
        "names": names,
        "elements": [layer["elements"] for layer in first],
        "zero_initial": [int(layer["zero_initial"]) for layer in first],
        "bscd_relative": summarize_blocks(per_episode, "bscd_relative"),
        "zero_change": summarize_blocks(per_episode, "zero_change"),
    }


def delta_w_run(description: dict[str, Any], episodes: Iterable[AdaptedEpisode]) -> dict[str, Any]:
    """ΔW per block, and BSCD's relative change per block and per layer, of one run."""
    rows, per_episode, per_layer = [], [], []
    for episode in episodes:
        blocks = episode_updates(episode)
        layers = layer_updates(episode.backbone.image_encoder, episode.encoder)
        per_episode.append(blocks)
        per_layer.append(layers)
        rows.append(
            {
                "episode": episode.episode,
                "agreement": episode.agreement,
                "blocks": blocks,
                "layers_bscd_relative": [layer["bscd_relative"] for layer in layers],
            }
        )
    return {
        **description,
        "blocks": [f"block {i}" for i in range(len(per_episode[0]))] if per_episode else [],
        "per_episode": rows,
        "l2": summarize_blocks(per_episode, "l2"),
        "relative": summarize_blocks(per_episode, "relative"),
        "added": summarize_blocks(per_episode, "added"),
        "bscd_relative": summarize_blocks(per_episode, "bscd_relative"),
        "layers": _layer_summary(per_layer),
    }


def run_label(run: dict[str, Any]) -> str:
    """``adapter / dataset``: a run's series name in the figures."""
    return f"{run['adapter']} / {run['dataset']}"


def delta_w_report(
    results: list[dict[str, Any]], measure: str = "l2"
) -> tuple[dict[str, Any], str]:
    """The ΔW report over several runs (e.g. full fine-tuning and LoRA) and its figure.

    Args:
        results: :func:`delta_w_run` of each run.
        measure: the figure's measure, one of :data:`MEASURES`: ``l2`` (FewTrans Fig. 5,
            per block), ``relative`` (norm ratio, per block) or ``bscd-relative`` (BSCD-FSL
            Fig. 2: bars per layer and run). The JSON holds all of them either way.
    """
    if measure not in MEASURES:
        raise ValueError(f"unknown measure {measure!r} (one of {', '.join(MEASURES)})")
    data = {
        "analysis": "delta-w",
        "measure": measure,
        "runs": results,
        "paper": {
            "l2_ranges": {k: list(v) for k, v in PAPER_RANGES.items()},
            "source": "FewTrans §VI-A (Fig. 5, left)",
            "bscd_relative": {
                "source": "BSCD-FSL §7.2.1 (Fig. 2)",
                "definition": "|theta - theta_hat| / |theta|, averaged over all parameters per "
                "layer (theta pretrained, theta_hat fine-tuned), then over episodes",
                "zero_rule": ZERO_RULE,
            },
        },
        "provenance": provenance({"runs": [r["run"] for r in results], "measure": measure}),
    }
    if measure == "bscd-relative":
        return data, str(bscd_figure(results))
    longest = max(results, key=lambda r: len(r["blocks"]))
    key = "l2" if measure == "l2" else "relative"
    figure = layer_lines(
        {run_label(r): r[key]["mean"] for r in results},
        x_labels=[str(i) for i in range(len(longest["blocks"]))],
        x_title="block",
        y_title="||W_adapted - W_initial||_2"
        if key == "l2"
        else "||W_adapted - W_initial|| / ||W_initial||",
        title="Parameter update scale per block"
        if key == "l2"
        else "Relative parameter update per block",
    )
    return data, str(figure)


def bscd_figure(results: list[dict[str, Any]]) -> Markup:
    """BSCD-FSL Fig. 2: per-element mean ``|Δθ|/|θ|`` per layer, one bar per run."""
    longest = max(results, key=lambda r: len(r["layers"]["names"]))["layers"]["names"]
    same = all(r["layers"]["names"] == longest[: len(r["layers"]["names"])] for r in results)
    return grouped_bars(
        {run_label(r): r["layers"]["bscd_relative"].get("mean", []) for r in results},
        categories=longest if same else [f"layer {i + 1}" for i in range(len(longest))],
        tick_labels=[str(i + 1) for i in range(len(longest))],
        x_title="layer (parameterised module, in order)",
        y_title="mean |θ_adapted - θ_init| / |θ_init|",
        title="Relative change of pre-trained layers",
    )
