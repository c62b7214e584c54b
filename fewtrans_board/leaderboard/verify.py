"""Re-run a seeded sample of a submission's episodes with the pinned plugin and compare."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path
from typing import Any

import numpy as np

from fewtrans_board.hpe.aggregate import logit_mean
from fewtrans_board.leaderboard.bundle import BundleContents
from fewtrans_board.leaderboard.errors import SubmissionError
from fewtrans_board.leaderboard.meta import parse_meta
from fewtrans_board.leaderboard.store import LeaderboardStore
from fewtrans_board.registry import Registry
from fewtrans_board.results.load import load_run
from fewtrans_board.results.schema import storable_logits
from fewtrans_board.runner.context import RunContext
from fewtrans_board.runner.evaluate import evaluate_episode
from fewtrans_board.runner.spec import RunSpec


def check_pins_installed(pins: dict[str, str]) -> None:
    """Refuse to verify unless every pinned distribution is installed at its pinned version."""
    for distribution, version in pins.items():
        try:
            installed = importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            raise SubmissionError(
                "pin-not-installed", f"install {distribution}=={version} to verify this submission"
            ) from None
        if installed != version:
            raise SubmissionError(
                "pin-not-installed",
                f"{distribution} {installed} is installed; the submission pins {version}",
            )


def verify_contents(
    contents: BundleContents,
    store: LeaderboardStore,
    registry: Registry,
    *,
    sample: int = 5,
    seed: int = 0,
    threshold: float = 0.9,
    roots: dict[str, Path] | None = None,
    weights: str | None = None,
    device: str = "cpu",
) -> dict[str, Any]:
    """Re-run ``sample`` seeded episodes per dataset and compare predictions with the stored ones.

    Per re-run episode, the agreement of every configuration's predictions and of the HPE
    prediction with the stored ones is measured; an episode passes when both the mean
    configuration agreement and the HPE agreement reach ``threshold``.

    Raises:
        SubmissionError: a pin is not installed, or some episode falls below the threshold
            (``verification-failed``; the report lists every episode).
    """
    meta = parse_meta(contents.meta_text)
    check_pins_installed(meta.plugins)
    rng = np.random.RandomState(seed)
    episodes_report = []
    for path in contents.runs:
        run = load_run(path)
        sha = run.meta["manifest"]["sha256"]
        filename, _ = store.frozen[sha]
        root = (roots or {}).get(run.dataset)
        spec = RunSpec(
            model=meta.model,
            adapter=meta.adapter,
            manifest=str(store.manifests_dir / filename),
            hpe=meta.hpe_protocol,
            weights=weights,
            root=str(root) if root else None,
            config=run.meta["adapter"]["centre"],
            device=device,
        )
        ctx = RunContext(spec, registry)
        adapter = ctx.adapter_cls()
        stored = run.table.to_pylist()
        chosen = sorted(
            rng.choice(len(ctx.episodes), size=min(sample, len(ctx.episodes)), replace=False)
        )
        for index in chosen:
            episode = ctx.episodes[int(index)]
            inputs = ctx.inputs(episode)
            outcomes = evaluate_episode(
                adapter, ctx.backbone, inputs, ctx.grid, ctx.manifest.sha256
            )
            rows = [r for r in stored if r["episode"] == episode.index]
            configs = {r["config_index"]: r for r in rows if r["kind"] == "config"}
            agreements = [
                float(
                    np.mean(np.asarray(configs[o.index]["predictions"]) == o.logits.argmax(axis=1))
                )
                for o in outcomes
            ]
            hpe_name = run.meta["hpe"]["aggregation"]
            members = np.stack([storable_logits(o.logits) for o in outcomes])
            if hpe_name == "vote":
                from fewtrans_board.hpe.aggregate import vote

                rerun_hpe = vote(
                    np.stack([o.logits.argmax(axis=1) for o in outcomes]), episode.ways
                )
            else:
                rerun_hpe = logit_mean(members).argmax(axis=1)
            stored_hpe = next(r for r in rows if r["aggregation"] == hpe_name)["predictions"]
            hpe_agreement = float(np.mean(np.asarray(stored_hpe) == rerun_hpe))
            mean_agreement = float(np.mean(agreements))
            episodes_report.append(
                {
                    "dataset": run.dataset,
                    "episode": episode.index,
                    "config_agreement": mean_agreement,
                    "min_config_agreement": float(np.min(agreements)),
                    "hpe_agreement": hpe_agreement,
                    "passed": mean_agreement >= threshold and hpe_agreement >= threshold,
                }
            )
    report = {
        "submission": meta.id,
        "sample": sample,
        "seed": seed,
        "threshold": threshold,
        "episodes": episodes_report,
        "passed": all(e["passed"] for e in episodes_report),
    }
    if not report["passed"]:
        failing = [
            f"{e['dataset']} episode {e['episode']} (configs {e['config_agreement']:.2f}, HPE {e['hpe_agreement']:.2f})"
            for e in episodes_report
            if not e["passed"]
        ]
        error = SubmissionError(
            "verification-failed",
            f"re-running disagrees with the stored predictions on {', '.join(failing)} (threshold {threshold})",
        )
        error.report = report  # type: ignore[attr-defined]
        raise error
    return report
