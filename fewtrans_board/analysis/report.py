"""Write an analysis as ``NAME.json`` (data + provenance) and ``NAME.svg`` next to it."""

from __future__ import annotations

import json
import math
import platform
import time
from pathlib import Path
from typing import Any

from fewtrans_board.core.atomic import write_bytes_atomic
from fewtrans_board.core.version import __version__

ANALYSES = (
    "sensitivity",
    "delta-w",
    "cka",
    "zipf",
    "cross-validation",
    "grid-spacing",
    "sweep",
    "model-selection",
)
"""Every name :func:`write_report` writes (``sweep`` is written by the ``sweep`` command)."""


def provenance(inputs: dict[str, Any]) -> dict[str, Any]:
    """What produced an analysis: package version, inputs, time and machine."""
    return {
        "package": {"name": "fewtrans-board", "version": __version__},
        "inputs": inputs,
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "platform": platform.platform(),
    }


def write_report(out: Path, name: str, data: dict[str, Any], svg: str) -> tuple[Path, Path]:
    """Write ``out/NAME.json`` and ``out/NAME.svg`` atomically.

    Args:
        out: the output folder (created).
        name: the analysis name, one of :data:`ANALYSES`.
        data: the JSON-friendly report (it must carry ``analysis`` and ``provenance``).
        svg: the figure as standalone SVG markup.

    Returns:
        The two paths written.
    """
    out.mkdir(parents=True, exist_ok=True)
    json_path, svg_path = out / f"{name}.json", out / f"{name}.svg"
    text = json.dumps(json_safe(data), indent=2, sort_keys=True, allow_nan=False)
    write_bytes_atomic(json_path, (text + "\n").encode())
    write_bytes_atomic(svg_path, (svg + "\n").encode())
    return json_path, svg_path


def json_safe(data: Any) -> Any:
    """``data`` with every non-finite float replaced by ``None`` (JSON has no NaN)."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {key: json_safe(value) for key, value in data.items()}
    if isinstance(data, list | tuple):
        return [json_safe(value) for value in data]
    return data
