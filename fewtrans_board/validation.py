"""The validation a plugin author runs before submitting (``fewtrans-board validate``)."""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from fewtrans_board.errors import ContractError, FewtransError
from fewtrans_board.registry import Registry
from fewtrans_board.results.rows import episode_rows
from fewtrans_board.runner.context import RunContext
from fewtrans_board.runner.episodes import EpisodeInputs
from fewtrans_board.runner.evaluate import ConfigOutcome, evaluate_episode
from fewtrans_board.runner.spec import RunSpec
from fewtrans_board.testing.contract import check_adapter, check_backbone

DEFAULT_MANIFEST = "fewtrans-varied--digits.parquet"


class ValidationError(FewtransError):
    """A submission failed validation."""


def validate_submission(spec: RunSpec, registry: Registry) -> dict[str, Any]:
    """Validate a model + adapter pair; return a report or raise :class:`ValidationError`.

    Args:
        spec: what to validate; an empty ``manifest`` means the frozen digits manifest.
        registry: the registry.
    """
    from fewtrans_board.episodes.embedded import digits_manifest

    checks: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        if not spec.manifest:
            spec = dataclasses.replace(
                spec, manifest=str(digits_manifest(DEFAULT_MANIFEST, Path(tmp)))
            )
        ctx = RunContext(spec, registry)
        try:
            check_adapter(ctx.adapter_cls)
            checks.append(f"adapter contract ({ctx.adapter_entry.name})")
            check_backbone(ctx.backbone, f"model {ctx.model.name!r}")
            checks.append(
                f"model contract ({ctx.model.name}, {ctx.backbone.feature_dim}-d features)"
            )
        except ContractError as exc:
            raise ValidationError(str(exc)) from exc
        adapter = ctx.adapter_cls()
        first, second, permuted_predictions, hpe = [], [], [], []

        def run(inputs: EpisodeInputs) -> list[ConfigOutcome]:
            with ctx.batching():  # the run's --batching mode, as evaluate uses it
                return evaluate_episode(
                    adapter, ctx.backbone, inputs, ctx.grid, ctx.manifest.sha256
                )

        for episode in ctx.episodes:
            inputs = ctx.inputs(episode)
            outcomes = run(inputs)
            rows = episode_rows(
                "validate", ctx.manifest.dataset, ctx.manifest.sha256, inputs, outcomes
            )
            hpe.append(next(r["accuracy"] for r in rows if r["aggregation"] == ctx.hpe.aggregation))
            first.append([o.logits for o in outcomes])
            again = run(ctx.inputs(episode))
            second.append([o.logits for o in again])
            shuffled = ctx.inputs(episode)
            shuffled.query_labels = np.random.RandomState(episode.index).permutation(
                shuffled.query_labels
            )
            permuted = run(shuffled)
            permuted_predictions.append([o.logits.argmax(axis=1) for o in permuted])
        checks.append(f"logits finite and shaped (queries x ways), {len(ctx.grid)} configurations")
        rerun = _first_mismatch(first, second)
        if rerun is not None:
            e, i, gap = rerun
            raise ValidationError(
                f"episode {ctx.episodes[e].index}, configuration {i} {ctx.grid[i].to_dict()}: two "
                f"runs with the same seeds gave different logits (max difference {gap:.3g}). A "
                "submission that cannot be re-run cannot be verified: seed every random choice "
                "from torch's global generator and avoid non-deterministic kernels."
            )
        checks.append("identical results when re-run with the same seeds")
        leak = _first_mismatch([[x.argmax(axis=1) for x in a] for a in first], permuted_predictions)
        if leak is not None:
            e, i, _ = leak
            raise ValidationError(
                f"episode {ctx.episodes[e].index}, configuration {i}: predictions changed when "
                "only "
                "the hidden query labels were permuted, so the adapter reads query labels. "
                "Adapters may use the support set and class names only."
            )
        checks.append("predictions independent of the hidden query labels")
    return {
        "model": ctx.model.name,
        "adapter": ctx.adapter_entry.name,
        "manifest_sha256": ctx.manifest.sha256,
        "hpe": ctx.hpe.name,
        "configurations": len(ctx.grid),
        "episodes": len(ctx.episodes),
        "hpe_accuracy": float(np.mean(hpe)),
        "checks": checks,
    }


def _first_mismatch(
    first: list[list[np.ndarray]], second: list[list[np.ndarray]]
) -> tuple[int, int, float] | None:
    """``(episode position, configuration, max difference)`` of the first unequal array."""
    for e, (a, b) in enumerate(zip(first, second, strict=True)):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            if not np.array_equal(x, y):
                return e, i, float(np.abs(x.astype(np.float64) - y.astype(np.float64)).max())
    return None
