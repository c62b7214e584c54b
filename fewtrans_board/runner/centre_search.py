"""Run the HPE centre search (``hpe.search``) on held-out search episodes; write its record."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from fewtrans_board.api.adapter import AdapterConfig
from fewtrans_board.core.atomic import write_bytes_atomic
from fewtrans_board.core.sandbox import Isolation
from fewtrans_board.core.version import __version__
from fewtrans_board.hpe.search import centre_search
from fewtrans_board.registry.lookup import Registry
from fewtrans_board.results.schema import accuracy_percent
from fewtrans_board.runner.context import RunContext
from fewtrans_board.runner.spec import RunSpec


def run_centre_search(
    spec: RunSpec, registry: Registry, out: Path, *, progress: bool = True
) -> dict[str, Any]:
    """Search the HPE centre of ``spec.adapter`` on ``spec.manifest`` and write ``out`` (JSON).

    ``spec.config`` gives the start point (the adapter's defaults otherwise).

    Returns:
        The record written to ``out``; ``evaluate --centre out`` uses it.
    """
    from tqdm import tqdm

    started = time.time()
    ctx = RunContext(RunSpec(**{**spec.to_dict(), "hpe": "single"}), registry)
    try:
        adapter = ctx.adapter_cls() if ctx.isolation is Isolation.INLINE else None
        ctx.prefetch_features(ctx.episodes, progress)
        bar = tqdm(desc="centre search", unit="config", disable=not progress)

        def score(configs: list[AdapterConfig]) -> list[float]:
            per_episode = []
            for episode in ctx.episodes:
                inputs = ctx.inputs(episode)
                outcomes = ctx.outcomes(inputs, adapter, configs)
                per_episode.append(
                    [
                        accuracy_percent(o.logits.argmax(axis=1), inputs.query_labels)
                        for o in outcomes
                    ]
                )
            bar.update(len(configs))
            return [float(v) for v in np.mean(np.array(per_episode), axis=0)]

        result = centre_search(ctx.adapter_cls, ctx.centre, score)
        bar.close()
        weights_id = ctx.model_facts.weights_id
    finally:
        ctx.close()
    record = {
        "kind": "fewtrans-board/centre-search",
        "adapter": ctx.adapter_entry.name,
        "adapter_provenance": ctx.adapter_entry.provenance(),
        "model": ctx.model.name,
        "weights_id": weights_id,
        "dataset": ctx.manifest.dataset,
        "manifest_sha256": ctx.manifest.sha256,
        "manifest_protocol": ctx.manifest.protocol,
        "episodes": len(ctx.episodes),
        "start": result.start,
        "centre": result.centre,
        "evaluations": result.evaluations,
        "log": result.rounds,
        "seconds": round(time.time() - started, 2),
        "created_with": f"fewtrans-board {__version__}",
    }
    write_bytes_atomic(out, (json.dumps(record, indent=2, sort_keys=True) + "\n").encode())
    return record
