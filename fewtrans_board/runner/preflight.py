"""The preflight checks a plugin author runs before evaluating (``fewtrans-board preflight``).

They test plugin code (contract, re-runs, order independence, inductiveness, ``fit_many``
against ``fit``); ``submission validate`` checks the data of a bundle, ``submission verify``
re-runs it. The plugin runs in the same kind of worker as in ``evaluate`` and verification
(a sandbox by default), and every check compares like with like:

- *re-run*: the same requests in a second, fresh worker must give identical logits;
- *order*: the queries presented in another order (the fit is unchanged) must be
  predicted alike, up to the last bits batch composition changes;
- *inductive*: query subsets predicted by a separate episode process, fitted the same
  way, must get the logits the whole set got;
- *fit_many*: where an adapter batches its configurations, its accuracy over the episodes
  must not be significantly above fitting each configuration alone with ``fit``; single
  episodes may differ (training at a high learning rate is chaotic), so this is a paired
  statistical test, never a verdict on one episode's logits.
"""

from __future__ import annotations

import contextlib
import dataclasses
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from fewtrans_board.core.errors import ContractError, FewtransError
from fewtrans_board.core.sandbox import Isolation
from fewtrans_board.core.threads import torch_threads
from fewtrans_board.registry.lookup import Registered, Registry
from fewtrans_board.runner.context import RunContext
from fewtrans_board.runner.episode_rows import episode_rows
from fewtrans_board.runner.evaluate import ConfigOutcome, evaluate_episode
from fewtrans_board.runner.inductive import (
    INDUCTIVE_TOLERANCE,
    inductive_gap,
    inductive_probes,
    relative_gap,
)
from fewtrans_board.runner.spec import RunSpec
from fewtrans_board.testing.contract import (
    check_adapter,
    check_backbone,
    check_import_is_light,
)
from fewtrans_board.testing.fit_many import (
    FIT_MANY_CONFIDENCE,
    FIT_MANY_MARGIN,
    Logits,
    fit_many_gain,
)

DEFAULT_MANIFEST = "fewtrans-varied--digits.parquet"


class PreflightError(FewtransError):
    """A model + adapter pair failed a preflight check."""


def _logits(outcomes: list[ConfigOutcome]) -> list[np.ndarray]:
    return [o.logits for o in outcomes]


Tick = Callable[[], None]
"""Advances the current step's progress bar by one episode."""


class Steps:
    """A progress bar per check on stderr (tqdm, as ``evaluate`` shows its episodes).

    Each bar is named ``preflight I/N: what`` and counts the episodes the check has run;
    closed bars stay on the terminal, so the finished steps read as one line each.

    Args:
        total: the number of steps.
        show: draw the bars (``False``: silent, e.g. under ``--json``).
    """

    def __init__(self, total: int, show: bool) -> None:
        self.total = total
        self.show = show
        self.done = 0

    @contextlib.contextmanager
    def step(self, what: str, episodes: int = 0) -> Iterator[Tick]:
        """A bar for one check of ``episodes`` episodes (0: a check without episodes)."""
        from tqdm import tqdm

        self.done += 1
        bar = tqdm(
            total=episodes or None,
            desc=f"preflight {self.done}/{self.total}: {what}",
            unit="episode",
            disable=not self.show,
            # a check without episodes shows its name and how long it has taken
            bar_format=None if episodes else "{desc} ({elapsed})",
        )
        try:
            yield lambda: bar.update(1)
        finally:
            bar.close()


def run_preflight(spec: RunSpec, registry: Registry, progress: bool = False) -> dict[str, Any]:
    """Run the preflight checks of a model + adapter pair; return a report or raise :class:`PreflightError`.

    Args:
        spec: what to validate; an empty ``manifest`` means the frozen digits manifest;
            ``centre_file`` an ``hpe search`` result whose centre the grid is built around.
        registry: the registry.
        progress: show a progress bar per check on stderr.
    """
    from fewtrans_board.episodes.embedded import digits_manifest

    with tempfile.TemporaryDirectory() as tmp, torch_threads(spec.threads):
        if not spec.manifest:
            spec = dataclasses.replace(
                spec, manifest=str(digits_manifest(DEFAULT_MANIFEST, Path(tmp)))
            )
        ctx = RunContext(spec, registry)
        try:
            return _preflight(ctx, spec, registry, progress)
        finally:
            ctx.close()


def _preflight(
    ctx: RunContext, spec: RunSpec, registry: Registry, progress: bool
) -> dict[str, Any]:
    checks: list[str] = []
    modules = plugin_modules(ctx)
    batches = ctx.adapter_cls.overrides_fit_many()
    inductive = not ctx.adapter_cls.transductive
    steps = Steps(4 + int(batches) + int(inductive) + int(bool(modules)), progress)
    n = len(ctx.episodes)
    with steps.step("adapter and model contracts"):
        try:
            check_adapter(ctx.adapter_cls)
            checks.append(f"adapter contract ({ctx.adapter_entry.name})")
            backbone = ctx.backbone
            check_backbone(backbone, f"model {ctx.model.name!r}")
            checks.append(f"model contract ({ctx.model.name}, {backbone.feature_dim}-d features)")
        except ContractError as exc:
            raise PreflightError(str(exc)) from exc
    inline = ctx.isolation is Isolation.INLINE
    adapter = ctx.adapter_cls() if inline else None
    first: Logits = []
    hpe: list[float] = []
    labels: list[np.ndarray] = []
    with steps.step(f"the grid's {len(ctx.grid)} configuration(s)", n) as tick:
        for episode in ctx.episodes:
            inputs = ctx.inputs(episode)
            outcomes = ctx.outcomes(inputs, adapter)
            rows = episode_rows(
                "validate", ctx.manifest.dataset, ctx.manifest.sha256, inputs, outcomes
            )
            hpe.append(next(r["accuracy"] for r in rows if r["aggregation"] == ctx.hpe.aggregation))
            first.append(_logits(outcomes))
            labels.append(inputs.query_labels)
            tick()
    checks.append(f"logits finite and shaped (queries x ways), {len(ctx.grid)} configurations")
    with steps.step("re-run in a fresh worker", n) as tick:
        _check_rerun(ctx, spec, registry, first, tick)
    checks.append("identical results when re-run with the same seeds in a fresh worker")
    with steps.step("queries in another order", n) as tick:
        _check_order(ctx, adapter, first, tick)
    checks.append(
        "predictions independent of query order"
        + (" and hidden labels" if inline else " (labels never reach the worker)")
    )
    if batches:
        looped = []
        with steps.step("fit() against fit_many()", n) as tick:
            for e in ctx.episodes:
                looped.append(_logits(ctx.outcomes(ctx.inputs(e), adapter, loop=True)))
                tick()
        gain, bound = fit_many_gain(first, looped, labels)
        if bound > FIT_MANY_MARGIN:
            raise PreflightError(
                f"fit_many() scores {gain:+.2f} accuracy points above fitting each configuration "
                f"alone with fit() over {len(ctx.episodes)} episodes (at least {bound:+.2f} at "
                f"{FIT_MANY_CONFIDENCE:.0%} confidence): fit_many() must compute what fit() "
                "computes for each configuration, only faster"
            )
        checks.append(f"fit_many matches fit in accuracy (gain {gain:+.2f} points)")
    if not inductive:
        checks.append("inductiveness not required: the adapter declares transductive = True")
    else:
        with steps.step("query subsets on their own", n) as tick:
            _check_inductive(ctx, adapter, first, tick)
        checks.append("inductive: each query's logits independent of the other queries")
    if modules:
        with steps.step("plugin import without torch"):
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
        "centre": ctx.centre.to_dict(),
        "centre_file": spec.centre_file,
        "configurations": len(ctx.grid),
        "episodes": len(ctx.episodes),
        "hpe_accuracy": float(np.mean(hpe)),
        "isolation": ctx.isolation.value,
        "checks": checks,
    }


def _check_rerun(
    ctx: RunContext, spec: RunSpec, registry: Registry, first: Logits, tick: Tick
) -> None:
    """The same requests in a fresh worker (another process state) give the same logits."""
    second: Logits = []
    if ctx.isolation is Isolation.INLINE:
        adapter = ctx.adapter_cls()
        for episode in ctx.episodes:
            second.append(_logits(ctx.outcomes(ctx.inputs(episode), adapter)))
            tick()
    else:
        again = RunContext(spec, registry, check_items=False)
        try:
            for episode in again.episodes:
                second.append(_logits(again.outcomes(again.inputs(episode), None)))
                tick()
        finally:
            again.close()
    mismatch = _first_mismatch(first, second)
    if mismatch is not None:
        e, i, gap = mismatch
        raise PreflightError(
            f"episode {ctx.episodes[e].index}, configuration {i} {ctx.grid[i].to_dict()}: two "
            "runs with the same seeds gave different logits (max difference "
            f"{gap:.3g}). A submission that cannot be re-run cannot be verified: seed every "
            "random choice from torch's global generator and avoid non-deterministic kernels."
        )


def _check_order(ctx: RunContext, adapter: Any, first: Logits, tick: Tick) -> None:
    """Queries presented in another order (and, inline, shuffled hidden labels)."""
    for e, episode in enumerate(ctx.episodes):
        shuffled = ctx.inputs(episode, salt="validate")
        shuffled.query_labels = np.random.RandomState(episode.index).permutation(
            shuffled.query_labels
        )
        again = _logits(ctx.outcomes(shuffled, adapter))
        for i, (x, y) in enumerate(zip(first[e], again, strict=True)):
            flipped = x.argmax(axis=1) != y.argmax(axis=1)
            if flipped.any() and relative_gap(x[flipped], y[flipped]) > INDUCTIVE_TOLERANCE:
                raise PreflightError(
                    f"episode {episode.index}, configuration {i}: predictions changed when "
                    "the order of the queries (and their hidden labels) was shuffled, so the "
                    "adapter reads query positions or labels. Adapters may use the support set "
                    "and class names only."
                )
        tick()


def _check_inductive(ctx: RunContext, adapter: Any, first: Logits, tick: Tick) -> None:
    """Predict query subsets on their own and compare with the whole set's logits.

    In a worker the subsets go to a separate episode process (fitted the same way), so
    nothing the whole set taught a predictor can reach them.

    Raises:
        PreflightError: a query's logits change with the other queries predicted with it.
    """
    for e, episode in enumerate(ctx.episodes):
        probes = inductive_probes(len(episode.query), episode.index)
        inputs = ctx.inputs(episode)
        if ctx.isolation is Isolation.INLINE:
            outcomes = evaluate_episode(
                adapter,
                ctx.backbone,
                inputs,
                ctx.grid,
                ctx.manifest.sha256,
                probes=probes,
                options=ctx.fit_options,
            )
            per_config = [o.probe_logits for o in outcomes]
        else:
            reply = ctx.ask(inputs, ctx.grid, ctx.seeds(episode, ctx.grid), query_subsets=probes)
            per_config = reply.query
        for index, probe_logits in enumerate(per_config):
            gap = inductive_gap(first[e][index], probes, probe_logits)
            if gap > INDUCTIVE_TOLERANCE:
                raise PreflightError(
                    f"episode {episode.index}, configuration {index}: a query's logits change "
                    f"(by {gap:.3g}, relative) with the other queries predicted alongside it, "
                    "so the adapter is transductive. Declare transductive = True on the "
                    "adapter class (transductive methods are ranked apart), or predict each "
                    "query on its own."
                )
        tick()


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


def _first_mismatch(first: Logits, second: Logits) -> tuple[int, int, float] | None:
    """``(episode position, configuration, max difference)`` of the first unequal array."""
    for e, (a, b) in enumerate(zip(first, second, strict=True)):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            if not np.array_equal(x, y):
                return e, i, float(np.abs(x.astype(np.float64) - y.astype(np.float64)).max())
    return None
