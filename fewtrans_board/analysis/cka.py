"""Linear CKA between pretrained and adapted features per layer (FewTrans §VI-B, Fig. 5 right).

``CKA(X, Y) = ||Y_c^T X_c||_F^2 / (||X_c^T X_c||_F ||Y_c^T Y_c||_F)`` with column-centred
``X_c``, ``Y_c`` (Kornblith et al., 2019). Features are each block's output pooled to one
vector per query image (:mod:`fewtrans_board.blocks.layers`). FewTrans finds full fine-tuning
lowers the similarity of deep layers more than LoRA, while layer 0 stays close to 1.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from fewtrans_board.analysis.refit import AdaptedEpisode
from fewtrans_board.analysis.report import provenance
from fewtrans_board.blocks.layers import block_features
from fewtrans_board.figures.charts import layer_lines
from fewtrans_board.stats.intervals import mean_ci

if TYPE_CHECKING:
    import torch


def linear_cka(x: torch.Tensor, y: torch.Tensor) -> float:
    """Linear CKA of two feature matrices ``[N, D1]`` and ``[N, D2]`` of the same N inputs.

    Returns:
        A similarity in ``[0, 1]``; 1 for features equal up to rotation and isotropic
        scaling. ``nan`` if either matrix is constant.
    """
    xc = (x - x.mean(dim=0, keepdim=True)).double()
    yc = (y - y.mean(dim=0, keepdim=True)).double()
    cross = float((yc.T @ xc).pow(2).sum())
    norm_x = float((xc.T @ xc).pow(2).sum().sqrt())
    norm_y = float((yc.T @ yc).pow(2).sum().sqrt())
    if norm_x == 0.0 or norm_y == 0.0:
        return float("nan")
    return cross / (norm_x * norm_y)


def episode_cka(episode: AdaptedEpisode) -> list[float]:
    """CKA per block between the pretrained and adapted encoder on the episode's queries."""
    device = episode.backbone.device
    before = block_features(episode.backbone.image_encoder, episode.query_pixels, device)
    after = block_features(episode.encoder, episode.query_pixels, device)
    return [linear_cka(a, b) for a, b in zip(before, after, strict=True)]


def cka_run(description: dict[str, Any], episodes: Iterable[AdaptedEpisode]) -> dict[str, Any]:
    """CKA per block of one run over its re-fitted episodes (mean and 95% CI)."""
    rows, values = [], []
    for episode in episodes:
        per_block = episode_cka(episode)
        values.append(per_block)
        rows.append({"episode": episode.episode, "agreement": episode.agreement, "cka": per_block})
    matrix = np.array(values, dtype=float)
    stats = [mean_ci(matrix[:, j][np.isfinite(matrix[:, j])]) for j in range(matrix.shape[1])]
    return {
        **description,
        "blocks": [f"block {i}" for i in range(matrix.shape[1])],
        "per_episode": rows,
        "cka": {"mean": [s.mean for s in stats], "ci95": [s.ci95 for s in stats]},
    }


def cka_report(results: list[dict[str, Any]]) -> tuple[dict[str, Any], str]:
    """The CKA report over several runs and its figure."""
    data = {
        "analysis": "cka",
        "runs": results,
        "paper": {"source": "FewTrans §VI-B (Fig. 5, right)"},
        "provenance": provenance({"runs": [r["run"] for r in results]}),
    }
    longest = max(results, key=lambda r: len(r["blocks"]))
    figure = layer_lines(
        {f"{r['adapter']} / {r['dataset']}": r["cka"]["mean"] for r in results},
        x_labels=[str(i) for i in range(len(longest["blocks"]))],
        x_title="block",
        y_title="linear CKA (pretrained vs adapted)",
        title="Feature similarity per block",
    )
    return data, str(figure)
