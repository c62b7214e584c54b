"""Run the HPE centre search (``hpe.search``) on held-out search episodes; write its record."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from fewtrans_board.api.adapter import AdapterConfig
from fewtrans_board.core.atomic import write_bytes_atomic
from fewtrans_board.core.version import __version__
from fewtrans_board.hpe.search import MAX_ROUNDS, centre_search
from fewtrans_board.registry.lookup import Registry
from fewtrans_board.results.row_schema import accuracy_percent
from fewtrans_board.runner.plan import plan_run
from fewtrans_board.runner.session import RunSession
from fewtrans_board.runner.spec import RunSpec


def run_centre_search(
    spec: RunSpec,
    registry: Registry,
    out: Path,
    *,
    progress: bool = True,
    max_rounds: int = MAX_ROUNDS,
    options: dict[str, list[Any]] | None = None,
) -> dict[str, Any]:
    """Search the HPE centre of ``spec.adapter`` on ``spec.manifest`` and write ``out`` (JSON).

    ``spec.config`` gives the start point (the adapter's defaults otherwise); ``options``
    the values of options off the HPE axes searched with them (``grid_options`` in the
    record; the centre holds the values chosen).

    Returns:
        The record written to ``out``; ``evaluate --centre out`` uses it.
    """
    from fewtrans_board.core.progress import progress_meter

    started = time.time()
    plan = plan_run(dataclasses.replace(spec, hpe="single"), registry)
    with RunSession(plan) as session:
        adapter = session.inline_adapter()
        session.prefetch_features(plan.episodes, progress)
        # The number of rounds is unknown up front: the log lines count configurations.
        bar = progress_meter(None, f"centre search of {spec.adapter}", "config", enabled=progress)

        def score(configs: list[AdapterConfig]) -> list[float]:
            per_episode = []
            for episode in plan.episodes:
                inputs = session.inputs(episode)
                labels = inputs.query_labels
                outcomes = session.outcomes(inputs, adapter, configs)
                per_episode.append([accuracy_percent(o.logits.argmax(1), labels) for o in outcomes])
            bar.update(len(configs))
            return [float(v) for v in np.mean(np.array(per_episode), axis=0)]

        result = centre_search(plan.adapter_cls, plan.centre.config, score, max_rounds, options)
        bar.close()
        weights_id = session.model_facts.weights_id
    record = {
        "kind": "fewtrans-board/centre-search",
        "adapter": plan.adapter_entry.name,
        "adapter_provenance": plan.adapter_entry.provenance(),
        "model": plan.model.name,
        "weights_id": weights_id,
        "dataset": plan.manifest.dataset,
        "manifest_sha256": plan.manifest.sha256,
        "manifest_protocol": plan.manifest.protocol,
        "episodes": len(plan.episodes),
        "start": result.start,
        "centre": result.centre,
        "evaluations": result.evaluations,
        "max_rounds": max_rounds,
        **({"grid_options": result.options} if result.options else {}),
        "log": result.rounds,
        "seconds": round(time.time() - started, 2),
        "created_with": f"fewtrans-board {__version__}",
    }
    write_bytes_atomic(out, (json.dumps(record, indent=2, sort_keys=True) + "\n").encode())
    return record
