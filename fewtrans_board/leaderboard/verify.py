"""Re-run a seeded sample of a submission's episodes with the pinned plugin and compare."""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fewtrans_board.hpe.aggregate import fuse
from fewtrans_board.leaderboard.bundle import BundleContents
from fewtrans_board.leaderboard.errors import SubmissionError
from fewtrans_board.leaderboard.meta import parse_meta
from fewtrans_board.leaderboard.store import LeaderboardStore
from fewtrans_board.leaderboard.validate import ValidationReport, validate_contents
from fewtrans_board.registry import Registry
from fewtrans_board.results.load import RunResults, load_run
from fewtrans_board.results.schema import CONFIG_KIND, storable_logits
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


@dataclass
class _StoredEpisode:
    """The stored base-split predictions of one episode."""

    configs: dict[int, list[int]] = field(default_factory=dict)
    ensembles: dict[str, list[int]] = field(default_factory=dict)


def _stored_base_predictions(table: Any) -> dict[int, _StoredEpisode]:
    """Stored predictions of the base split, grouped by episode.

    Only the columns needed are read (no logits). Re-running reproduces base queries only,
    so novel rows (base-to-novel runs) are left out; a table without a ``split`` column
    predates base-to-novel and is all base.
    """
    names = ["episode", "kind", "aggregation", "config_index", "predictions"]
    has_split = "split" in table.column_names
    columns = table.select([*names, "split"] if has_split else names).to_pydict()
    splits = columns["split"] if has_split else ["base"] * table.num_rows
    grouped: dict[int, _StoredEpisode] = {}
    for episode, kind, aggregation, index, predictions, split in zip(
        columns["episode"],
        columns["kind"],
        columns["aggregation"],
        columns["config_index"],
        columns["predictions"],
        splits,
        strict=True,
    ):
        if split != "base":
            continue
        stored = grouped.setdefault(episode, _StoredEpisode())
        if kind == CONFIG_KIND:
            stored.configs[index] = predictions
        else:
            stored.ensembles.setdefault(aggregation, predictions)
    return grouped


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
    runs: list[RunResults] | None = None,
) -> dict[str, Any]:
    """Re-run ``sample`` seeded episodes per dataset and compare predictions with the stored ones.

    Per re-run episode, the agreement of every configuration's predictions and of the HPE
    prediction with the stored ones is measured; an episode passes when both the mean
    configuration agreement and the HPE agreement reach ``threshold``.

    Args:
        contents: the extracted bundle or store entry.
        store: the leaderboard store (for the frozen manifests).
        registry: resolves the pinned model and adapter.
        sample: episodes re-run per dataset.
        seed: seed choosing the episodes.
        threshold: minimum agreement.
        roots: local dataset copies by dataset name.
        weights: local checkpoint for the model.
        device: torch device.
        runs: ``contents.runs`` already loaded (e.g. by validation); read when ``None``.

    Returns:
        The verification report.

    Raises:
        SubmissionError: a pin is not installed, or some episode falls below the threshold
            (``verification-failed``; the report lists every episode).
    """
    meta = parse_meta(contents.meta_text)
    check_pins_installed(meta.plugins)
    rng = np.random.RandomState(seed)
    episodes_report = []
    for run in runs if runs is not None else (load_run(path) for path in contents.runs):
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
        stored = _stored_base_predictions(run.table)
        hpe_name = run.meta["hpe"]["aggregation"]
        chosen = sorted(
            rng.choice(len(ctx.episodes), size=min(sample, len(ctx.episodes)), replace=False)
        )
        for index in chosen:
            episode = ctx.episodes[int(index)]
            inputs = ctx.inputs(episode)
            with ctx.batching():
                outcomes = evaluate_episode(
                    adapter, ctx.backbone, inputs, ctx.grid, ctx.manifest.sha256
                )
            stored_episode = stored[episode.index]
            predictions = [o.logits.argmax(axis=1) for o in outcomes]
            agreements = [
                float(np.mean(np.asarray(stored_episode.configs[o.index]) == p))
                for o, p in zip(outcomes, predictions, strict=True)
            ]
            rerun_hpe, _ = fuse(
                hpe_name,
                logits=np.stack([storable_logits(o.logits) for o in outcomes]),
                predictions=np.stack(predictions),
                n_way=episode.ways,
            )
            stored_hpe = stored_episode.ensembles[hpe_name]
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


def validate_and_verify(
    contents: BundleContents,
    store: LeaderboardStore,
    registry: Registry,
    *,
    sample: int = 0,
    seed: int = 0,
    roots: dict[str, Path] | None = None,
) -> tuple[ValidationReport, dict[str, Any] | None]:
    """Validate contents and, when ``sample`` is positive, verify them as well.

    Verification reuses the runs validation loaded, so each Parquet file is read once.

    Args:
        contents: the extracted bundle or store entry.
        store: the leaderboard store.
        registry: resolves the pinned model and adapter (for verification).
        sample: episodes re-run per dataset; ``0`` skips verification.
        seed: seed choosing the verified episodes.
        roots: local dataset copies by dataset name.

    Returns:
        ``(validation report, verification report or None)``.

    Raises:
        SubmissionError: validation or verification failed.
    """
    report = validate_contents(contents, store)
    if not sample:
        return report, None
    verification = verify_contents(
        contents, store, registry, sample=sample, seed=seed, roots=roots, runs=report.loaded
    )
    return report, verification
