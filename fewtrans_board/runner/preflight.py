"""The preflight checks a plugin author runs before evaluating (``fewtrans-board preflight``).

They test plugin code (contracts, then like against like, in the same kind of worker as
``evaluate``; ``submission validate`` checks a bundle's data, ``submission verify`` re-runs
it): a *re-run* in a fresh worker must give identical logits; queries in another *order*
must be predicted alike, up to the last bits; query subsets asked by a separate episode
process must get the whole set's logits (*inductive*); ``fit_many`` may not score
significantly above ``fit`` over the episodes (a paired test: single episodes may differ,
as training at a high learning rate is chaotic).
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
from fewtrans_board.core.threads import torch_threads
from fewtrans_board.registry.lookup import Registry
from fewtrans_board.runner.episode_rows import episode_rows
from fewtrans_board.runner.evaluate import ConfigOutcome, evaluate_episode
from fewtrans_board.runner.inductive import (
    INDUCTIVE_TOLERANCE,
    inductive_gap,
    inductive_probes,
    relative_gap,
)
from fewtrans_board.runner.plan import RunPlan, plan_run
from fewtrans_board.runner.session import RunSession
from fewtrans_board.runner.spec import RunSpec
from fewtrans_board.testing.contract import check_adapter, check_backbone, check_import_is_light
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
        with RunSession(plan_run(spec, registry)) as session:
            return _preflight(session, progress)


@dataclasses.dataclass
class _Grid:
    """What the grid computed on every episode: logits, HPE accuracies, query labels."""

    first: Logits = dataclasses.field(default_factory=list)
    hpe: list[float] = dataclasses.field(default_factory=list)
    labels: list[np.ndarray] = dataclasses.field(default_factory=list)


def _preflight(session: RunSession, progress: bool) -> dict[str, Any]:
    plan = session.plan
    checks: list[str] = []
    modules = plugin_modules(plan)
    batches = plan.adapter_cls.overrides_fit_many()
    inductive = not plan.adapter_cls.transductive
    steps = Steps(4 + int(batches) + int(inductive) + int(bool(modules)), progress)
    n = len(plan.episodes)
    with steps.step("adapter and model contracts"):
        checks += _check_contracts(session)
    adapter = session.inline_adapter()
    with steps.step(f"the grid's {len(plan.grid)} configuration(s)", n) as tick:
        grid = _run_grid(session, adapter, tick)
    checks.append(f"logits finite and shaped (queries x ways), {len(plan.grid)} configurations")
    with steps.step("re-run in a fresh worker", n) as tick:
        _check_rerun(session, grid.first, tick)
    checks.append("identical results when re-run with the same seeds in a fresh worker")
    with steps.step("queries in another order", n) as tick:
        _check_order(session, adapter, grid.first, tick)
    checks.append(
        "predictions independent of query order"
        + (" and hidden labels" if session.inline else " (labels never reach the worker)")
    )
    if batches:
        with steps.step("fit() against fit_many()", n) as tick:
            checks.append(_check_fit_many(session, adapter, grid, tick))
    if not inductive:
        checks.append("inductiveness not required: the adapter declares transductive = True")
    else:
        with steps.step("query subsets on their own", n) as tick:
            _check_inductive(session, adapter, grid.first, tick)
        checks.append("inductive: each query's logits independent of the other queries")
    if modules:
        with steps.step("plugin import without torch"):
            try:
                check_import_is_light(*modules)
            except ContractError as exc:
                raise PreflightError(str(exc)) from exc
        checks.append(f"importing {', '.join(modules)} does not import torch")
    return {
        "model": plan.model.name,
        "adapter": plan.adapter_entry.name,
        "manifest_sha256": plan.manifest.sha256,
        "hpe": plan.hpe.name,
        "centre": plan.centre.config.to_dict(),
        "centre_file": plan.spec.centre_file,
        "configurations": len(plan.grid),
        "episodes": len(plan.episodes),
        "hpe_accuracy": float(np.mean(grid.hpe)),
        "isolation": plan.isolation.value,
        "checks": checks,
    }


def _check_contracts(session: RunSession) -> list[str]:
    """The adapter class's and the loaded backbone's contracts (this process loads it)."""
    plan = session.plan
    try:
        check_adapter(plan.adapter_cls)
        backbone = session.backbone
        check_backbone(backbone, f"model {plan.model.name!r}")
    except ContractError as exc:
        raise PreflightError(str(exc)) from exc
    return [
        f"adapter contract ({plan.adapter_entry.name})",
        f"model contract ({plan.model.name}, {backbone.feature_dim}-d features)",
    ]


def _run_grid(session: RunSession, adapter: Any, tick: Tick) -> _Grid:
    """Every configuration on every episode: what the later checks compare against."""
    plan = session.plan
    grid = _Grid()
    for episode in plan.episodes:
        inputs = session.inputs(episode)
        outcomes = session.outcomes(inputs, adapter)
        rows = episode_rows(
            "validate", plan.manifest.dataset, plan.manifest.sha256, inputs, outcomes
        )
        grid.hpe.append(
            next(r["accuracy"] for r in rows if r["aggregation"] == plan.hpe.aggregation)
        )
        grid.first.append(_logits(outcomes))
        grid.labels.append(inputs.query_labels)
        tick()
    return grid


def _check_fit_many(session: RunSession, adapter: Any, grid: _Grid, tick: Tick) -> str:
    """``fit_many`` must not score significantly above fitting each configuration alone."""
    looped = []
    for e in session.plan.episodes:
        looped.append(_logits(session.outcomes(session.inputs(e), adapter, loop=True)))
        tick()
    gain, bound = fit_many_gain(grid.first, looped, grid.labels)
    if bound > FIT_MANY_MARGIN:
        raise PreflightError(
            f"fit_many() scores {gain:+.2f} accuracy points above fitting each configuration "
            f"alone with fit() over {len(looped)} episodes (at least {bound:+.2f} at "
            f"{FIT_MANY_CONFIDENCE:.0%} confidence): fit_many() must compute what fit() "
            "computes for each configuration, only faster"
        )
    return f"fit_many matches fit in accuracy (gain {gain:+.2f} points)"


def _check_rerun(session: RunSession, first: Logits, tick: Tick) -> None:
    """The same requests in a fresh worker (another process state) give the same logits."""
    plan = session.plan
    second: Logits = []
    # Inline: a fresh adapter in this session; else the same plan in a fresh worker.
    again = session if session.inline else RunSession(plan)
    with contextlib.nullcontext() if again is session else again:
        adapter = again.inline_adapter()
        for episode in plan.episodes:
            second.append(_logits(again.outcomes(again.inputs(episode), adapter)))
            tick()
    mismatch = _first_mismatch(first, second)
    if mismatch is not None:
        e, i, gap = mismatch
        raise PreflightError(
            f"episode {plan.episodes[e].index}, configuration {i} {plan.grid[i].to_dict()}: two "
            "runs with the same seeds gave different logits (max difference "
            f"{gap:.3g}). A submission that cannot be re-run cannot be verified: seed every "
            "random choice from torch's global generator and avoid non-deterministic kernels."
        )


def _check_order(session: RunSession, adapter: Any, first: Logits, tick: Tick) -> None:
    """Queries presented in another order (and, inline, shuffled hidden labels)."""
    for e, episode in enumerate(session.plan.episodes):
        shuffled = session.inputs(episode, salt="validate")
        shuffled.query_labels = np.random.RandomState(episode.index).permutation(
            shuffled.query_labels
        )
        again = _logits(session.outcomes(shuffled, adapter))
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


def _check_inductive(session: RunSession, adapter: Any, first: Logits, tick: Tick) -> None:
    """Query subsets predicted on their own (in a worker: by another episode process)."""
    plan = session.plan
    for e, episode in enumerate(plan.episodes):
        probes = inductive_probes(len(episode.query), episode.index)
        inputs = session.inputs(episode)
        if session.inline:
            outcomes = evaluate_episode(
                adapter,
                session.backbone,
                inputs,
                plan.grid,
                plan.manifest.sha256,
                probes=probes,
                options=session.fit_options,
            )
            per_config = [o.probe_logits for o in outcomes]
        else:
            seeds = plan.seeds(episode, plan.grid)
            per_config = session.ask(inputs, plan.grid, seeds, query_subsets=probes).query
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


def plugin_modules(plan: RunPlan) -> list[str]:
    """Modules of the third-party plugins that provide the run's model and adapter.

    The entry-point module (imported by every ``fewtrans-board`` command) and the
    adapter's own module; built-ins are covered by fewtrans-board's own tests.
    """
    modules: list[str] = []
    entries = ((plan.adapter_entry, plan.adapter_cls.__module__), (plan.model, None))
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
