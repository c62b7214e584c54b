"""Per-episode choices adapters recorded during a run (e.g. IMS-f's selected layers).

Adapters expose them as ``predictor.record``; the runner stores them in each shard's
metadata under ``adapter_records`` as ``{episode: {configuration index: record}}``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fewtrans_board.results.shards import read_shard


def adapter_records(run: Path) -> dict[int, dict[int, dict[str, Any]]]:
    """Every recorded choice of a run folder, ``{episode: {config index: record}}``.

    Args:
        run: the run folder (with ``shards/``).

    Returns:
        The records of all finished shards (empty when the adapter records nothing).
    """
    out: dict[int, dict[int, dict[str, Any]]] = {}
    for path in sorted((run / "shards").glob("shard-*.parquet")):
        _, meta = read_shard(path)
        for episode, per_config in meta.get("adapter_records", {}).items():
            out[int(episode)] = {int(i): record for i, record in per_config.items()}
    return out
