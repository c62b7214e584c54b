"""Train the plans of an HPE grid in lockstep: one vmapped forward/backward per step.

For each group of configurations that differ only in learning rates and epochs:

1. build every plan under its own seed (exactly as the loop would: ``torch.manual_seed``,
   then the adapter's setup), checking each against the first (the template);
2. stack the trainable tensors, one row per configuration, longest run first;
3. probe the first batch: the batched loss and gradient of the template's row must match
   its plain loss and gradient, and every row's batched loss its own plain loss (this
   catches tensors captured by closures and seed-dependent frozen state); the probe also
   measures the activations one configuration keeps for backward, which sizes the chunks;
4. train each chunk of rows in lockstep: ``vmap`` of the template's loss over the rows,
   one backward over their sum, :class:`~fewtrans_board.blocks.lockstep.adam.StackedOptimiser`;
5. build every predictor from its own (now trained) plan.

Whenever batching is impossible (the plan says so, a check fails, vmap cannot run the
loss) the group runs the plain loop instead, from the same built plans and random state,
so results are those of the loop either way.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from fewtrans_board.api.fit_options import FitOptions, GroupReport, LockstepSettings
from fewtrans_board.blocks.lockstep.memory import (
    budget_bytes,
    chunk_size,
    saved_activation_bytes,
    tensor_bytes,
)
from fewtrans_board.blocks.lockstep.plan import (
    TrainingPlan,
    freeze_trained,
    group_by_fixed_fields,
    run_plan,
    train_plan,
)
from fewtrans_board.blocks.lockstep.template import NotBatchable, Template

if TYPE_CHECKING:
    import numpy as np
    import torch

    from fewtrans_board.api.adapter import Predictor

PlanBuilder = Callable[[Any], TrainingPlan]
"""``config -> TrainingPlan``; called after ``torch.manual_seed`` of the configuration."""


def fit_plans(
    build: PlanBuilder,
    configs: Sequence[Any],
    seeds: Sequence[int],
    *,
    method: str,
    options: FitOptions | None = None,
) -> list[Predictor]:
    """Fit every configuration, batching those that differ only in lr/epochs.

    Args:
        build: builds the untrained plan of a configuration (uses torch's global generator
            for random initialisation, seeded by the caller).
        configs: the configurations (an HPE grid).
        seeds: the torch seed of each configuration.
        method: adapter name, for reports and warnings.
        options: the lockstep settings and where to record a report per group (default:
            :class:`~fewtrans_board.api.fit_options.FitOptions`, batching, no record).

    Returns:
        One predictor per configuration, equal (up to rounding) to
        ``torch.manual_seed(seed); run_plan(build(config))``.
    """
    if len(configs) != len(seeds):
        raise ValueError(f"{len(configs)} configurations but {len(seeds)} seeds")
    options = FitOptions() if options is None else options
    settings = options.lockstep
    predictors: list[Predictor | None] = [None] * len(configs)
    for members in group_by_fixed_fields(configs):
        report = GroupReport(method, len(members))
        fitted = _fit_group(
            build, [configs[i] for i in members], [seeds[i] for i in members], settings, report
        )
        for i, predictor in zip(members, fitted, strict=True):
            predictors[i] = predictor
        options.record(report)
    return [p for p in predictors if p is not None]


def _rng_state() -> tuple[Any, Any]:
    import torch

    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None  # type: ignore[no-untyped-call]
    return torch.get_rng_state(), cuda


def _restore_rng(state: tuple[Any, Any]) -> None:
    import torch

    cpu, cuda = state
    torch.set_rng_state(cpu)
    if cuda is not None:
        torch.cuda.set_rng_state_all(cuda)


def _built(build: PlanBuilder, config: Any, seed: int) -> TrainingPlan:
    import torch

    torch.manual_seed(seed)
    plan = build(config)
    plan.rng_state = _rng_state()  # where the loop would continue (dropout draws)
    return plan


def _fit_group(
    build: PlanBuilder,
    configs: list[Any],
    seeds: list[int],
    settings: LockstepSettings,
    report: GroupReport,
) -> list[Predictor]:
    if not settings.enabled or len(configs) == 1:
        report.fallback = "batching disabled" if not settings.enabled else "single configuration"
        return [run_plan(_built(build, c, s)) for c, s in zip(configs, seeds, strict=True)]
    first = _built(build, configs[0], seeds[0])
    if not first.batchable or first.has_random_training():
        report.fallback = first.reason or "random training (dropout in train mode)"
        rest = zip(configs[1:], seeds[1:], strict=True)  # each trains right after its build
        return [run_plan(first), *(run_plan(_built(build, c, s)) for c, s in rest)]
    plans = [first]
    try:
        template = Template(first)
        for config, seed in zip(configs[1:], seeds[1:], strict=True):
            plans.append(_built(build, config, seed))
            template.adopt(plans[-1])
        return _train(template, settings, report)
    except NotBatchable as exc:
        report.fallback = str(exc)
        report.chunks = []
        warnings.warn(f"{report.method}: training configurations one by one ({exc})", stacklevel=3)
        predictors = []
        for plan in plans:
            _restore_rng(plan.rng_state)
            predictors.append(run_plan(plan))
        rest = zip(configs[len(plans) :], seeds[len(plans) :], strict=True)
        return [*predictors, *(run_plan(_built(build, c, s)) for c, s in rest)]


def _tolerance(tensor: torch.Tensor, gradient: bool) -> float:
    """Relative tolerance of batched vs plain results at the tensor's precision.

    On CUDA the recipe runs in bf16 autocast, where batched and plain matmuls round
    differently: gradients of small random-init models differ by up to ~10% (L2). The
    gradient check is there to catch tensors the batched loss does not read at all (a
    relative error of 1), so it stays loose; float64 is held to rounding.
    """
    import torch

    if tensor.dtype == torch.float64:
        return 1e-7
    if tensor.device.type == "cuda":
        return 0.5 if gradient else 5e-2
    return 1e-2 if gradient else 1e-3


def _close(a: torch.Tensor, b: torch.Tensor, gradient: bool = False) -> bool:
    """Whether ``a`` matches ``b`` (relative L2 error within the tolerance)."""
    difference = (a.detach().to(b.dtype) - b.detach()).norm()
    scale = max(float(b.detach().norm()), 1e-6)  # a floor for tensors that should be zero
    return float(difference) <= _tolerance(b, gradient) * scale


def _train(template: Template, settings: LockstepSettings, report: GroupReport) -> list[Predictor]:
    from fewtrans_board.blocks.training import epoch_batches

    plans = template.plans
    if not template.trainable:
        raise NotBatchable("nothing to train")
    recipe = (template.plan.tensor_optimisers(), template.plan.schedule)
    if any((plan.tensor_optimisers(), plan.schedule) != recipe for plan in plans):
        raise NotBatchable("the configurations train with different optimisers or schedules")
    steps = [plan.steps() for plan in plans]
    order = sorted(range(len(plans)), key=lambda i: -steps[i])
    stacked = template.stack(order)
    lrs = [[plans[i].base_lrs()[j] for i in order] for j in range(len(stacked))]
    batch = next(epoch_batches(template.plan.n_items, template.plan.batch_size, 1))
    per_config = _probe(template, stacked, order.index(0), batch)
    device = str(stacked[0].device)
    budget = budget_bytes(settings.memory, device)
    size = chunk_size(len(plans), per_config, budget)
    report.per_config_bytes, report.budget_bytes = per_config, budget
    _check_rows(template, stacked, order, batch, size)
    start = 0
    while start < len(plans):
        rows = slice(start, start + size)
        try:
            _train_chunk(
                template,
                [s[rows] for s in stacked],
                [lr[rows] for lr in lrs],
                [steps[i] for i in order[rows]],
            )
            done = True
        except _FirstStepOutOfMemory:
            done = False  # the except block is left first, so the step's tensors are freed
        if not done:
            _empty_cache(stacked[0])
            if size > 1:
                size = max(1, size // 2)  # the estimate was optimistic; nothing was updated
                continue
            if start == 0:
                raise NotBatchable("one configuration's batched step does not fit in memory")
            for i in order[start:]:  # earlier chunks are trained: the loop does the rest
                _restore_rng(plans[i].rng_state)
                train_plan(plans[i])
            report.fallback = f"out of memory after {start} configurations; the rest looped"
            break
        report.chunks.append(len(order[rows]))
        start += len(order[rows])
    for plan in plans:
        freeze_trained(plan)
    return [plan.finish() for plan in plans]


def _probe(template: Template, stacked: list[torch.Tensor], row: int, batch: np.ndarray) -> int:
    """Bytes per configuration, once the template's batched loss and gradient match its loop's."""
    import torch

    try:
        direct = template.plan.loss(batch)
        direct_grads = torch.autograd.grad(direct, template.trainable, allow_unused=True)
        leaves = [s[row : row + 1].detach().requires_grad_(True) for s in stacked]
        persistent = [*stacked, *_persistent_tensors(template)]
        cuda = stacked[0].device.type == "cuda"
        if cuda:
            torch.cuda.synchronize(stacked[0].device)
            torch.cuda.reset_peak_memory_stats(stacked[0].device)
            base = torch.cuda.memory_allocated(stacked[0].device)
        result: dict[str, torch.Tensor] = {}

        def forward() -> None:
            result["loss"] = template.losses(batch, leaves)

        activations = saved_activation_bytes(forward, persistent)
        batched_grads = torch.autograd.grad(result["loss"].sum(), leaves, allow_unused=True)
    except NotBatchable:
        raise
    except Exception as exc:
        raise NotBatchable(f"vmap cannot run the loss: {type(exc).__name__}: {exc}") from exc
    if not _close(result["loss"][0], direct):
        raise NotBatchable(
            f"batched loss {float(result['loss'][0]):.6g} differs from the plain loss "
            f"{float(direct):.6g}"
        )
    for j, (plain, batched) in enumerate(zip(direct_grads, batched_grads, strict=True)):
        if plain is None:
            continue
        if batched is None or not _close(batched[0], plain, gradient=True):
            raise NotBatchable(
                f"the gradient of trainable tensor {j} (shape {tuple(plain.shape)}) differs "
                "when it is swapped in by attribute: the loss reads it some other way "
                "(captured by a closure?)"
            )
    # Each tensor's row, its gradient and its optimiser's state (per tensor: the groups of a
    # plan may run different optimisers).
    kinds = template.plan.tensor_optimisers()
    rows = [tensor_bytes([s[row]]) for s in stacked]
    state = sum(k.copies * b for k, b in zip(kinds, rows, strict=True))
    per_config = activations + state
    if cuda:
        peak = torch.cuda.max_memory_allocated(stacked[0].device) - base
        per_config = max(per_config, peak + state - sum(rows))
    return int(per_config)


def _persistent_tensors(template: Template) -> list[torch.Tensor]:
    import torch

    tensors: list[torch.Tensor] = []
    for module in template.modules:
        tensors.extend(module.parameters())
        tensors.extend(module.buffers())
    for owner in template.plan.owners:
        tensors.extend(v for v in vars(owner).values() if isinstance(v, torch.Tensor))
    return tensors


def _check_rows(
    template: Template, stacked: list[torch.Tensor], order: list[int], batch: np.ndarray, size: int
) -> None:
    """Every row's batched loss must equal its own plan's plain loss on ``batch`` (same state)."""
    import torch

    with torch.no_grad():
        for start in range(0, len(order), size):
            try:
                batched = template.losses(batch, [s[start : start + size] for s in stacked])
            except NotBatchable:
                raise
            except Exception as exc:
                raise NotBatchable(f"vmap cannot run the loss: {type(exc).__name__}") from exc
            for offset, i in enumerate(order[start : start + size]):
                plain = template.plans[i].lockstep_loss(batch)
                if not _close(batched[offset], plain):
                    raise NotBatchable(
                        f"configuration {i}: batched loss {float(batched[offset]):.6g} differs "
                        f"from its own loss {float(plain):.6g} (state the template does not "
                        "share)"
                    )


class _FirstStepOutOfMemory(Exception):
    """A chunk ran out of device memory before its first update (safe to retry smaller)."""


def _empty_cache(like: torch.Tensor) -> None:
    import torch

    if like.device.type == "cuda":
        torch.cuda.empty_cache()


def _train_chunk(
    template: Template, rows: list[torch.Tensor], lrs: list[list[float]], steps: list[int]
) -> None:
    """Run the optimiser and schedule of ``len(steps)`` configurations in lockstep."""
    import math

    import torch

    from fewtrans_board.blocks.lockstep.adam import StackedOptimiser
    from fewtrans_board.blocks.training import epoch_batches

    plan = template.plan
    epochs = max((p.epochs for p in template.plans), default=0)
    updated = out_of_memory = False
    for module in plan.train_modules:
        module.train()
    try:
        adam = StackedOptimiser(
            rows,
            lrs,
            steps,
            plan.optimiser,
            plan.schedule,
            math.ceil(plan.n_items / plan.batch_size),
            plan.tensor_optimisers(),
        )
        for step, batch in enumerate(epoch_batches(plan.n_items, plan.batch_size, epochs)):
            active = adam.active(step)
            if active == 0:
                break
            leaves = [r[:active].detach().requires_grad_(True) for r in rows]
            losses = template.losses(batch, leaves)
            grads = torch.autograd.grad(losses.sum(), leaves, allow_unused=True)
            adam.step(step, grads)
            updated = True
    except torch.OutOfMemoryError:
        if updated:
            raise
        out_of_memory = True
    finally:
        for module in plan.train_modules:
            module.eval()
    if out_of_memory:
        raise _FirstStepOutOfMemory
