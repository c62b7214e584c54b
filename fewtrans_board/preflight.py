"""The preflight checks a plugin author runs before evaluating (``fewtrans-board preflight``).

They test plugin code (contract, re-runs, order and label independence, inductiveness);
``submission validate`` checks the data of a bundle, ``submission verify`` re-runs it.
"""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from fewtrans_board.errors import ContractError, FewtransError
from fewtrans_board.registry import Registered, Registry
from fewtrans_board.runner.context import RunContext
from fewtrans_board.runner.episodes import EpisodeInputs
from fewtrans_board.runner.evaluate import ConfigOutcome, evaluate_episode
from fewtrans_board.runner.inductive import (
    INDUCTIVE_TOLERANCE,
    inductive_gap,
    inductive_probes,
    relative_gap,
)
from fewtrans_board.runner.rows import episode_rows
from fewtrans_board.runner.spec import RunSpec
from fewtrans_board.testing.contract import (
    check_adapter,
    check_backbone,
    check_import_is_light,
)
from fewtrans_board.threads import torch_threads

DEFAULT_MANIFEST = "fewtrans-varied--digits.parquet"


class PreflightError(FewtransError):
    """A model + adapter pair failed a preflight check."""


def run_preflight(spec: RunSpec, registry: Registry) -> dict[str, Any]:
    """Run the preflight checks of a model + adapter pair; return a report or raise :class:`PreflightError`.

    Args:
        spec: what to validate; an empty ``manifest`` means the frozen digits manifest.
        registry: the registry.
    """
    from fewtrans_board.episodes.embedded import digits_manifest

    checks: list[str] = []
    with tempfile.TemporaryDirectory() as tmp, torch_threads(spec.threads):
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
            raise PreflightError(str(exc)) from exc
        adapter = ctx.adapter_cls()
        first, second, reordered, hpe = [], [], [], []

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
            # Another presentation order, shuffled hidden labels, each configuration fitted
            # alone: an adapter that reads neither positions nor labels predicts the same.
            shuffled = ctx.inputs(episode, salt="validate")
            shuffled.query_labels = np.random.RandomState(episode.index).permutation(
                shuffled.query_labels
            )
            permuted = evaluate_episode(
                adapter, ctx.backbone, shuffled, ctx.grid, ctx.manifest.sha256, loop=True
            )
            reordered.append([o.logits for o in permuted])
        checks.append(f"logits finite and shaped (queries x ways), {len(ctx.grid)} configurations")
        rerun = _first_mismatch(first, second)
        if rerun is not None:
            e, i, gap = rerun
            raise PreflightError(
                f"episode {ctx.episodes[e].index}, configuration {i} {ctx.grid[i].to_dict()}: two "
                "runs with the same seeds gave different logits (max difference "
                f"{gap:.3g}). A submission that cannot be re-run cannot be verified: seed every "
                "random choice from torch's global generator and avoid non-deterministic kernels."
            )
        checks.append("identical results when re-run with the same seeds")
        leak = _first_disagreement(first, reordered)
        if leak is not None:
            e, i = leak
            raise PreflightError(
                f"episode {ctx.episodes[e].index}, configuration {i}: predictions changed when "
                "the order of the queries and their hidden labels were shuffled and each "
                "configuration was fitted alone with fit(), so the adapter reads query "
                "positions or labels, or its fit_many() differs from fit(). Adapters may use "
                "the support set and class names only, and fit_many() must equal fit() per "
                "configuration."
            )
        checks.append(
            "predictions independent of query order and hidden labels; fit_many equals fit"
        )
        if ctx.adapter_cls.transductive:
            checks.append("inductiveness not required: the adapter declares transductive = True")
        else:
            _check_inductive(ctx, adapter, first)
            checks.append("inductive: each query's logits independent of the other queries")
        modules = plugin_modules(ctx)
        if modules:
            try:
                check_import_is_light(*modules)
            except ContractError as exc:
                raise PreflightError(str(exc)) from exc
            checks.append(f"importing {', '.join(modules)} does not import torch")
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


def plugin_modules(ctx: RunContext) -> list[str]:
    """Modules of the third-party plugins that provide the run's model and adapter.

    The entry-point module (imported by every ``fewtrans-board`` command) and the
    adapter's own module; built-ins are covered by fewtrans-board's own tests.
    """
    modules: list[str] = []
    entries: list[tuple[Registered[Any], str | None]] = [
        (ctx.adapter_entry, ctx.adapter_cls.__module__),
        (ctx.model, None),
    ]
    for entry, own_module in entries:
        if entry.source.builtin or entry.source.distribution is None:
            continue
        for module in (entry.source.module, own_module):
            if module and module != "__main__" and module not in modules:
                modules.append(module)
    return modules


def _check_inductive(ctx: RunContext, adapter: Any, first: list[list[np.ndarray]]) -> None:
    """Refit one configuration per episode and predict query subsets on their own.

    Raises:
        PreflightError: a query's logits change with the other queries predicted with it.
    """
    for e, episode in enumerate(ctx.episodes):
        index = episode.index % len(ctx.grid)
        probes = inductive_probes(len(episode.query), episode.index)
        (outcome,) = evaluate_episode(
            adapter,
            ctx.backbone,
            ctx.inputs(episode),
            [ctx.grid[index]],
            ctx.manifest.sha256,
            probes=probes,
        )
        gap = inductive_gap(first[e][index], probes, outcome.probe_logits)
        if gap > INDUCTIVE_TOLERANCE:
            raise PreflightError(
                f"episode {episode.index}, configuration {index}: a query's logits change (by "
                f"{gap:.3g}, relative) with the other queries predicted alongside it, so the "
                "adapter is transductive. Declare transductive = True on the adapter class "
                "(transductive methods are ranked apart), or predict each query on its own."
            )


def _first_disagreement(
    first: list[list[np.ndarray]], second: list[list[np.ndarray]]
) -> tuple[int, int] | None:
    """``(episode position, configuration)`` whose predictions differ beyond float noise.

    A different batch order may change the last bits of logits, so predictions may only
    flip where the two runs' top logits are within :data:`INDUCTIVE_TOLERANCE`.
    """
    for e, (a, b) in enumerate(zip(first, second, strict=True)):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            flipped = x.argmax(axis=1) != y.argmax(axis=1)
            if flipped.any() and relative_gap(x[flipped], y[flipped]) > INDUCTIVE_TOLERANCE:
                return e, i
    return None


def _first_mismatch(
    first: list[list[np.ndarray]], second: list[list[np.ndarray]]
) -> tuple[int, int, float] | None:
    """``(episode position, configuration, max difference)`` of the first unequal array."""
    for e, (a, b) in enumerate(zip(first, second, strict=True)):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            if not np.array_equal(x, y):
                return e, i, float(np.abs(x.astype(np.float64) - y.astype(np.float64)).max())
    return None
