"""Device-time estimates of reproduction runs, from the cost table ``costs.toml``.

Every figure carries its source: measured (``benchmarks/method_costs.py``) or an estimate
and what it is scaled from. :func:`estimate_run` is what ``reproduce --plan`` prints.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

COSTS_FILE = Path(__file__).with_name("costs.toml")
DEVICES = ("nvidia-h200", "nvidia-h100", "cpu")


@cache
def cost_table() -> dict[str, Any]:
    """The parsed cost table."""
    return tomllib.loads(COSTS_FILE.read_text(encoding="utf-8"))


@dataclass(frozen=True)
class Estimate:
    """Estimated device seconds of one run, and how the figure was obtained."""

    seconds: float
    source: str

    @property
    def hours(self) -> float:
        """The estimate in hours."""
        return self.seconds / 3600


def backbone_of(model: str) -> tuple[str, bool]:
    """The cost-table backbone of a model name, and whether the name matched a rule."""
    lowered = model.lower()
    for pattern, backbone in cost_table()["model_backbones"].items():
        if pattern in lowered:
            return str(backbone), True
    return "vit-b16", False


def estimate_run(
    *,
    model: str,
    adapter: str,
    configurations: int,
    epochs_total: int,
    episodes: int,
    support: float,
    device: str = "nvidia-h200",
) -> Estimate:
    """Estimated device seconds of evaluating ``adapter`` on ``model``.

    Args:
        model: the model name (its backbone factor comes from ``[model_backbones]``).
        adapter: the adapter name.
        configurations: configurations per episode (the HPE grid's size).
        epochs_total: training epochs summed over the grid.
        episodes: episodes the run evaluates.
        support: mean support-set size of its episodes.
        device: a key of ``[devices]``.

    Returns:
        The estimate with a source line naming every factor that is not measured.
    """
    table = cost_table()
    reference = table["reference"]
    per_epoch, fixed, how = table["adapters"].get(adapter, (0.03, 0.3, ""))
    notes = [how or f"no figure for {adapter}: a vision-PEFT figure (estimate)"]
    backbone, known = backbone_of(model)
    factor = float(table["backbones"][backbone])
    if not known:
        notes.append(f"backbone of {model} unknown: ViT-B/16's figure")
    elif backbone != "vit-b16":
        notes.append(f"{backbone} scaled by GMACs x{factor:g} (estimate)")
    device_row = table["devices"].get(device, table["devices"]["nvidia-h200"])
    if device != "nvidia-h200":
        notes.append(f"{device}: {device_row['source']}")
    scale = support / float(reference["support"])
    per_episode = configurations * fixed + epochs_total * per_epoch * scale
    seconds = per_episode * episodes * factor * float(device_row["factor"])
    return Estimate(seconds=seconds, source="; ".join(notes))


def format_hours(seconds: float) -> str:
    """``0.4 h`` / ``12 min`` / ``40 s``: a readable duration."""
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s"
