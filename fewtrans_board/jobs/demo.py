"""The demo: HPE on the embedded digits with the pretrained demo CNN and its random twin."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fewtrans_board.episodes.embedded import digits_manifest
from fewtrans_board.registry.lookup import Registry
from fewtrans_board.results.load import load_run
from fewtrans_board.results.summary import summarize
from fewtrans_board.runner.run import run_evaluation
from fewtrans_board.runner.spec import RunSpec
from fewtrans_board.stats.intervals import mean_ci

DEMO_MODELS = ("demo-cnn.digits", "demo-cnn.random")
DEMO_ADAPTERS = ("mean-centroid", "linear-probe", "cosine-classifier")
DEMO_MANIFEST = "fewtrans-varied--digits.parquet"


@dataclass
class DemoResult:
    """Summaries of every demo run and the pretrained-vs-random comparison."""

    out: Path
    summaries: list[dict[str, Any]]
    gains: list[dict[str, Any]]
    site_index: Path | None = None


def run_demo(
    registry: Registry,
    out: Path,
    *,
    episodes: int | None = 200,
    adapters: Sequence[str] = DEMO_ADAPTERS,
    models: Sequence[str] = DEMO_MODELS,
    device: str = "cpu",
    progress: bool = True,
    build_site_too: bool = True,
    store: Path | None = None,
) -> DemoResult:
    """Build the digits manifest, evaluate every (model, adapter) with HPE, compare models.

    Each pair the ``store`` ranks on the demo sub-benchmark runs under that entry's HPE
    protocol and searched centre, so its numbers are the board's (on all 600 episodes;
    ``board`` in its summary holds the entry's); other pairs run under the sub-benchmark's
    leaderboard protocol (:mod:`.demo_entries`).

    Returns:
        Per-run summaries and, per adapter, the paired difference (pretrained minus
        random-init) of per-episode HPE accuracy with its 95% CI.
    """
    from fewtrans_board.jobs.demo_entries import board_entries

    manifest = digits_manifest(DEMO_MANIFEST, out / "manifests")
    summaries = []
    hpe_by_run: dict[tuple[str, str], np.ndarray] = {}
    entries = board_entries(store, [(m, a) for a in adapters for m in models])
    for adapter in adapters:
        for model in models:
            run_dir = out / "results" / model / adapter
            entry = entries[(model, adapter)]
            spec = RunSpec(
                model=model,
                adapter=adapter,
                manifest=str(manifest),
                limit=episodes,
                device=device,
                hpe=entry.hpe,
                centre_file=None if entry.centre_file is None else str(entry.centre_file),
            )
            run_evaluation(spec, registry, run_dir, progress=progress)
            results = load_run(run_dir)
            summaries.append({**summarize(results), "board": entry_summary(entry)})
            hpe_by_run[(model, adapter)] = results.aggregations()["hpe"]
    gains = []
    if len(models) == 2:
        for adapter in adapters:
            diff = hpe_by_run[(models[0], adapter)] - hpe_by_run[(models[1], adapter)]
            gains.append(
                {
                    "adapter": adapter,
                    "better": models[0],
                    "worse": models[1],
                    **mean_ci(diff).to_dict(),
                }
            )
    result = DemoResult(out=out, summaries=summaries, gains=gains)
    if build_site_too:
        result.site_index = build_demo_site(registry, out, manifest)
    return result


def entry_summary(entry: Any) -> dict[str, Any] | None:
    """What the demo prints of the board entry a run repeats (``None``: no entry)."""
    if entry.id is None:
        return None
    return {"id": entry.id, "hpe_protocol": entry.hpe, "headline": entry.headline}


def build_demo_site(registry: Registry, out: Path, manifest: Path, **options: Any) -> Path:
    """Build the site of the runs under ``out/results`` into ``out/site``; its index page.

    The manifest (and its sidecar files) is copied into a store at ``out/leaderboard``;
    ``options`` go to :func:`~fewtrans_board.website.build.build_site`.
    """
    from fewtrans_board.website.build import build_site

    store = out / "leaderboard"
    (store / "manifests").mkdir(parents=True, exist_ok=True)
    for file in manifest.parent.glob(manifest.name + "*"):
        shutil.copy2(file, store / "manifests" / file.name)
    build_site(store, out / "site", registry, [out / "results"], **options)
    return out / "site" / "index.html"
