"""The inductive-CLIP miniature on the embedded digits (``fewtrans-board demo --inductive``).

The paper's oracle check at digit scale: the demo dual encoder trained on all ten digits
(c, *original*) has the digits 5-9 unlearned by SSD with the digits 0-4 retained (a,
*unlearned*), and is compared with the same recipe trained from scratch without 5-9 (b,
*scratch*). Zero-shot on 5-9 should fall to chance while 0-4 holds; few-shot accuracy on
5-9 (CoOp-style K in 1/2/4/8/16, seeds 1-3) of the unlearned model should move from the
original's towards the scratch model's.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fewtrans_board.episodes.embedded import digits_manifest
from fewtrans_board.models.unlearned_names import unlearned_name
from fewtrans_board.plugins.registry import Registry
from fewtrans_board.results.load import load_run
from fewtrans_board.runner.run import run_evaluation
from fewtrans_board.runner.spec import RunSpec
from fewtrans_board.stats.intervals import mean_ci
from fewtrans_board.unlearning.sets import MINIATURE_FORGET, MINIATURE_RETAIN

ORIGINAL = "demo-clip.digits"
SCRATCH = "demo-clip.digits-0-4"
UNLEARNED = unlearned_name(ORIGINAL, MINIATURE_FORGET)
MODELS = {"original": ORIGINAL, "unlearned": UNLEARNED, "scratch": SCRATCH}
"""Role -> model name, in table order: (c), (a), (b)."""

MANIFEST = f"clip-kshot--{MINIATURE_FORGET}.parquet"
DEFAULT_ADAPTERS = ("linear-probe", "coop", "taskres")
HPE = "single"
"""The miniature runs each method's default configuration (the paper's fixed settings)."""


@dataclass
class InductiveDemoResult:
    """What the miniature measured.

    Attributes:
        out: the output folder.
        unlearning: the unlearning record.
        zero_shot: ``{dataset: {role: mean/CI summary}}`` on the test halves.
        few_shot: ``{adapter: {role: mean/CI over episodes}}`` on ``digits-5-9``.
        gaps: ``{adapter: {"original - unlearned": ..., "scratch - unlearned": ...}}``,
            paired over episodes.
        per_episode: ``{adapter: {role: accuracies}}`` (for tests and plots).
        site_index: the site's index page, if built.
    """

    out: Path
    unlearning: dict[str, Any]
    zero_shot: dict[str, dict[str, dict[str, Any]]]
    few_shot: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    gaps: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    per_episode: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    site_index: Path | None = None


def unlearned_weights(out: Path) -> Path:
    """Where the miniature writes the unlearned weights."""
    return out / "unlearned" / "demo-clip-digits+unlearn-digits-5-9.safetensors"


def ensure_unlearned(
    registry: Registry, out: Path, device: str, say: Callable[[str], None]
) -> dict[str, Any]:
    """Unlearn the digits 5-9 (reusing an earlier result in ``out``) and return the record."""
    from fewtrans_board.models.unlearned_records import UnlearnedStore, check_weights, read_record
    from fewtrans_board.unlearning.importance import ImportanceCache
    from fewtrans_board.unlearning.run import UnlearnRequest, unlearn

    weights = unlearned_weights(out)
    if weights.is_file():
        record = read_record(weights)
        check_weights(weights, record)
        if "zero_shot" in record:
            return record
    request = UnlearnRequest(
        model=ORIGINAL, forget=MINIATURE_FORGET, retain=MINIATURE_RETAIN, out=weights, device=device
    )
    return unlearn(
        registry,
        request,
        cache=ImportanceCache(out / "cache" / "importances"),
        store=UnlearnedStore(out / "cache" / "unlearned"),
        report=say,
    )


def zero_shot_table(
    registry: Registry, out: Path, device: str
) -> dict[str, dict[str, dict[str, Any]]]:
    """Zero-shot accuracy of the three models on the test halves of both digit sets."""
    from fewtrans_board.unlearning.data import load_split
    from fewtrans_board.unlearning.zeroshot import zero_shot

    table: dict[str, dict[str, dict[str, Any]]] = {}
    backbones = {
        role: registry.load_model(
            name, unlearned_weights(out) if role == "unlearned" else None, device
        )
        for role, name in MODELS.items()
    }
    for dataset in (MINIATURE_FORGET, *MINIATURE_RETAIN):
        spec = registry.datasets.get(dataset).obj
        split = load_split(spec, None, "test", backbones["original"].image_size)
        table[dataset] = {role: zero_shot(b, split).summary() for role, b in backbones.items()}
    return table


def run_inductive_demo(
    registry: Registry,
    out: Path,
    *,
    adapters: Sequence[str] = DEFAULT_ADAPTERS,
    episodes: int | None = None,
    device: str = "cpu",
    progress: bool = True,
    build_site_too: bool = True,
    report: Callable[[str], None] | None = None,
) -> InductiveDemoResult:
    """Unlearn, compare zero-shot, run few-shot adapters on all three models, build the site.

    Args:
        registry: the plugin registry.
        out: output folder (unlearned weights, caches, manifest, results, site).
        adapters: few-shot adapters to compare on the three models.
        episodes: evaluate only the first N of the 15 episodes (``None``: all).
        device: torch device.
        progress: show progress bars.
        build_site_too: build the static site of the runs.
        report: receives one line per step.

    Runs resume: finished result shards and the unlearned weights in ``out`` are reused.
    """
    say = report or (lambda _msg: None)
    record = ensure_unlearned(registry, out, device, say)
    result = InductiveDemoResult(out, record, zero_shot_table(registry, out, device))
    manifest = digits_manifest(MANIFEST, out / "manifests")
    for adapter in adapters:
        per_role = {}
        for role, model in MODELS.items():
            say(f"few-shot {adapter} on {model}")
            run_dir = out / "results" / role / adapter
            weights = str(unlearned_weights(out)) if role == "unlearned" else None
            spec = RunSpec(
                model,
                adapter,
                str(manifest),
                hpe=HPE,
                weights=weights,
                limit=episodes,
                device=device,
            )
            run_evaluation(spec, registry, run_dir, progress=progress)
            per_role[role] = load_run(run_dir).aggregations()["hpe"]
        result.per_episode[adapter] = per_role
        result.few_shot[adapter] = {r: mean_ci(v).to_dict() for r, v in per_role.items()}
        result.gaps[adapter] = {
            f"{other} - unlearned": mean_ci(per_role[other] - per_role["unlearned"]).to_dict()
            for other in ("original", "scratch")
        }
    if build_site_too:
        from fewtrans_board.website.build import build_site

        store = out / "leaderboard"
        (store / "manifests").mkdir(parents=True, exist_ok=True)
        for file in manifest.parent.glob(manifest.name + "*"):
            shutil.copy2(file, store / "manifests" / file.name)
        build_site(store, out / "site", registry, [out / "results"])
        result.site_index = out / "site" / "index.html"
    return result
