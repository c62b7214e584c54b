"""Optimisers, schedules and published recipes: each against an independent oracle.

The schedules against ``torch.optim.lr_scheduler`` driven as Dassl drives it, the
optimisers against the update rules written out by hand on a quadratic loss, and the
lockstep trainer against the per-configuration loop (which runs ``torch.optim``).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch

from fewtrans_board.api.recipe import Optimiser, Recipe, Schedule
from fewtrans_board.blocks.training import cosine_lr, run_training
from fewtrans_board.core.errors import ConfigError, RegistrationError


@pytest.fixture
def float64() -> Iterator[None]:
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(previous)


def test_the_default_schedule_is_fewtrans_cosine_per_step() -> None:
    schedule = Schedule()
    for step in range(12):
        assert schedule.lr(0.1, step, 3, 12) == cosine_lr(0.1, step, 12)
    # Bit for bit (the trainers use the schedule; runs before recipes used cosine_lr).
    rng = np.random.default_rng(0)
    for _ in range(2000):
        total = int(rng.integers(1, 5000))
        step, base = int(rng.integers(0, total + 1)), float(10 ** rng.uniform(-7, 0))
        per_epoch = int(rng.integers(1, 50))
        assert schedule.lr(base, step, per_epoch, total) == cosine_lr(base, step, total)
    assert schedule.lr(0.1, 0, 3, 12) == 0.1 and schedule.lr(0.1, 6, 3, 12) == pytest.approx(0.05)


@pytest.mark.parametrize("warmup", [0, 1, 2])
def test_cosine_epoch_follows_dassl_constant_warmup_then_cosine_annealing(warmup: int) -> None:
    """Dassl: ``ConstantWarmupScheduler(CosineAnnealingLR(T_max=epochs), warmup, cons_lr)``.

    During the warm-up epochs the rate is the constant; from then on the successor is
    stepped once per finished epoch after the warm-up, starting from the base rate.
    """
    base, epochs, per_epoch, cons = 0.002, 6, 4, 1e-5
    param = torch.nn.Parameter(torch.zeros(1))
    optimiser = torch.optim.SGD([param], lr=base)
    successor = torch.optim.lr_scheduler.CosineAnnealingLR(optimiser, T_max=epochs)
    expected = []
    for epoch in range(epochs):
        if epoch < warmup:
            expected.append(cons)
        else:
            expected.append(successor.get_last_lr()[0])
            optimiser.step()
            successor.step()
    schedule = Schedule("cosine-epoch", warmup_epochs=warmup, warmup_lr=cons)
    got = [
        schedule.lr(base, e * per_epoch + 1, per_epoch, epochs * per_epoch) for e in range(epochs)
    ]
    assert got == pytest.approx(expected, rel=1e-12)


def quadratic_run(optimiser: Optimiser, schedule: Schedule, lr: float, steps: int) -> np.ndarray:
    """``run_training`` on ``0.5 |w|^2`` (gradient ``w``), one step per epoch."""
    w = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64, requires_grad=True)
    run_training([([w], lr)], lambda _: 0.5 * (w * w).sum(), 1, 1, steps, optimiser, schedule)
    return w.detach().numpy()


def test_sgd_with_momentum_and_weight_decay_follows_the_written_rule() -> None:
    """torch's SGD: ``g = grad + wd w``; ``b = g`` at the first step, then ``m b + (1 - d) g``."""
    lr, m, d, wd, steps = 0.1, 0.9, 0.1, 0.01, 7
    schedule = Schedule("cosine-epoch", warmup_epochs=1, warmup_lr=0.01)
    w, b = np.array([1.0, -2.0, 0.5]), None
    for t in range(steps):
        g = w + wd * w
        b = g.copy() if b is None else m * b + (1 - d) * g
        w = w - schedule.lr(lr, t, 1, steps) * b
    got = quadratic_run(
        Optimiser("sgd", momentum=m, dampening=d, weight_decay=wd), schedule, lr, steps
    )
    np.testing.assert_allclose(got, w, rtol=1e-12)


@pytest.mark.parametrize("name", ["adam", "adamw"])
def test_adam_and_adamw_weight_decay_follow_the_written_rules(name: str) -> None:
    """Adam adds ``wd w`` to the gradient; AdamW scales ``w`` by ``1 - lr wd`` first."""
    lr, wd, eps, steps = 0.05, 0.1, 1e-3, 6
    b1, b2 = 0.9, 0.999
    w, m, v = np.array([1.0, -2.0, 0.5]), np.zeros(3), np.zeros(3)
    for t in range(1, steps + 1):
        rate = cosine_lr(lr, t - 1, steps)
        g = w.copy()
        if name == "adamw":
            w = w * (1 - rate * wd)
        else:
            g = g + wd * w
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        w = w - rate * (m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + eps)
    got = quadratic_run(Optimiser(name, weight_decay=wd, eps=eps), Schedule(), lr, steps)
    np.testing.assert_allclose(got, w, rtol=1e-10)


def test_optimiser_and_schedule_refuse_what_torch_would() -> None:
    with pytest.raises(ConfigError, match="not one of"):
        Optimiser("rmsprop")
    with pytest.raises(ConfigError, match="SGD settings"):
        Optimiser("adam", momentum=0.9)
    with pytest.raises(ConfigError, match="Nesterov"):
        Optimiser("sgd", nesterov=True)
    with pytest.raises(ConfigError, match="not one of"):
        Schedule("step")
    assert Optimiser("sgd", momentum=0.9, weight_decay=5e-4).describe() == (
        "SGD (momentum 0.9, weight decay 0.0005)"
    )


def coop() -> Any:
    from fewtrans_board.methods.adapters.clip_prompts.coop import CoopAdapter

    return CoopAdapter


def test_a_config_names_its_optimiser_and_refuses_impossible_settings() -> None:
    config = coop().Config()
    assert (config.optimizer, config.momentum, config.schedule) == ("adam", 0.0, "cosine")
    with pytest.raises(ConfigError, match=r"CoopAdapter.Config: .*SGD settings"):
        coop().Config(momentum=0.9)
    with pytest.raises(ConfigError, match="optimizer: 'lbfgs' is not one of"):
        coop().Config.from_dict({"optimizer": "lbfgs"})
    assert coop().Config(optimizer="sgd", momentum=0.9).momentum == 0.9


def test_a_recipe_the_config_refuses_fails_registration() -> None:
    from fewtrans_board.api.adapter import Adapter

    good = Recipe("paper", "a paper, Table 1", {"optimizer": "sgd", "momentum": 0.9})
    bad = Recipe("paper", "a paper", {"n_ctx": 4}, per_dataset={"eurosat": {"n_ctx": 0}})
    for recipes, message in (
        ((bad,), "recipe 'paper' on eurosat is not a valid configuration"),
        ((good, good), "two recipes are named 'paper'"),
    ):
        adapter: type[Adapter] = type("Recipes", (coop(),), {"recipes": recipes})
        with pytest.raises(RegistrationError, match=message):
            adapter.check_class()
    type("Recipes", (coop(),), {"recipes": (good,)}).check_class()
    with pytest.raises(ConfigError, match="needs a source"):
        Recipe("paper", " ", {})


PUBLISHED_STYLE = {
    "sgd-momentum-warmup": {
        "optimizer": "sgd",
        "momentum": 0.9,
        "weight_decay": 5e-4,
        "schedule": "cosine-epoch",
        "warmup_epochs": 1,
        "warmup_lr": 1e-5,
    },
    "adamw-decay": {"optimizer": "adamw", "weight_decay": 1e-2},
}


@pytest.mark.slow
@pytest.mark.parametrize("style", list(PUBLISHED_STYLE))
@pytest.mark.parametrize("name", ["coop", "clip-adapter"])
def test_lockstep_runs_published_optimisers_exactly_as_the_loop(
    name: str, style: str, float64: None
) -> None:
    from tests.test_lockstep import (
        PLANNED,
        backbone_for,
        batched_and_looped,
        episode,
        small_grid,
    )

    adapter = next(a for a in PLANNED if a.name == name)
    support, query, names = episode(torch.float64)
    backbone = backbone_for(adapter, torch.float64)
    changes = {**PUBLISHED_STYLE[style], "lr": 0.05}
    grid = small_grid(adapter, **changes)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        pairs, reports = batched_and_looped(adapter, backbone, support, query, names, grid)
    assert reports[0].fallback is None and reports[0].chunks == [len(grid)]
    for batched, looped in pairs:
        assert torch.allclose(batched, looped, rtol=0, atol=1e-8), (batched - looped).abs().max()
    adam, _ = batched_and_looped(
        adapter, backbone, support, query, names, small_grid(adapter, lr=0.05)
    )
    # The optimiser takes effect: every configuration moves far beyond the agreement bound.
    differences = [float((a[0] - p[0]).abs().max()) for a, p in zip(adam, pairs, strict=True)]
    assert min(differences) > 1e-6 and math.isfinite(max(differences))


@pytest.mark.parametrize(
    "schedule",
    [Schedule(), Schedule("constant"), Schedule("cosine-epoch", warmup_epochs=1, warmup_lr=0.01)],
    ids=["cosine", "constant", "cosine-epoch"],
)
def test_stacked_optimiser_runs_each_tensor_with_its_groups_optimiser(schedule: Schedule) -> None:
    """Rows of two tensors, one per optimiser group (Adam and SGD with momentum, dampening
    and weight decay), against ``run_training`` with ``group_optimisers``, row by row."""
    from fewtrans_board.blocks.lockstep.adam import StackedOptimiser

    adam = Optimiser("adam", weight_decay=0.05)
    sgd = Optimiser("sgd", momentum=0.9, dampening=0.9, weight_decay=1e-3)
    lrs = [[0.05, 0.02, 0.1], [0.3, 0.1, 0.0]]  # [tensor][row]; row 2 freezes b
    steps = [7, 5, 5]
    start_a = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
    start_b = torch.tensor([0.3, -0.7], dtype=torch.float64)

    def loss(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return 0.5 * (a * a).sum() + (b**3).sum() / 3 + (a[0] * b[1])

    looped = []
    for r in range(3):
        a, b = start_a.clone().requires_grad_(True), start_b.clone().requires_grad_(True)
        run_training(
            [([a], lrs[0][r]), ([b], lrs[1][r])],
            lambda _, a=a, b=b: loss(a, b),  # type: ignore[misc]
            1,
            1,
            steps[r],
            schedule=schedule,
            group_optimisers=[adam, sgd],
        )
        looped.append((a.detach(), b.detach()))
    rows = [start_a.repeat(3, 1), start_b.repeat(3, 1)]
    stacked = StackedOptimiser(rows, lrs, steps, schedule=schedule, optimisers=[adam, sgd])
    for t in range(max(steps)):
        active = stacked.active(t)
        leaves = [r[:active].detach().requires_grad_(True) for r in rows]
        total = sum(loss(leaves[0][i], leaves[1][i]) for i in range(active))
        stacked.step(t, torch.autograd.grad(total, leaves))  # type: ignore[arg-type]
    for r, (a, b) in enumerate(looped):
        np.testing.assert_allclose(rows[0][r].numpy(), a.numpy(), rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(rows[1][r].numpy(), b.numpy(), rtol=1e-12, atol=1e-14)
    assert not torch.equal(rows[1][0], start_b) and torch.equal(rows[1][2], start_b)


def test_a_plan_refuses_group_optimisers_that_do_not_match_its_groups() -> None:
    from fewtrans_board.blocks.lockstep import TrainingPlan
    from fewtrans_board.core.errors import FewtransError

    w = torch.zeros(2, requires_grad=True)
    with pytest.raises(FewtransError, match="1 parameter groups got 2 group optimisers"):
        TrainingPlan(
            [([w], 0.1)], lambda _: w.sum(), lambda: None, 1, 1, 1,  # type: ignore[arg-type,return-value]
            group_optimisers=[Optimiser(), Optimiser("sgd")],
        )  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize(
    "head",
    [
        {"optimizer": "sgd", "momentum": 0.9, "dampening": 0.9, "weight_decay": 1e-3},
        {"optimizer": "adam", "weight_decay": 1e-3},
    ],
    ids=["sgd-head", "adam-head"],
)
def test_lockstep_runs_per_group_optimisers_exactly_as_the_loop(
    head: dict[str, Any], float64: None
) -> None:
    """Fine-tuning with plain SGD on the backbone and the head's own optimiser: every row
    of the lockstep run equals its loop run (torch.optim, one optimiser per group)."""
    from tests.test_lockstep import PLANNED, backbone_for, batched_and_looped, episode, small_grid

    adapter = next(a for a in PLANNED if a.name == "finetune")
    support, query, names = episode(torch.float64)
    backbone = backbone_for(adapter, torch.float64)
    changes = {
        **head,
        "backbone_optimizer": "sgd",
        "schedule": "constant",
        "head_init": "default",
        "normalize_features": False,
        "lr_backbone": 0.05,
        "lr_head": 0.05,
    }
    grid = small_grid(adapter, **changes)
    plans = [adapter().checked_plan(backbone, support, names, c) for c in grid[:1]]
    assert [k.name for k in plans[0].tensor_optimisers()][-1] == head["optimizer"]
    assert {k.name for k in plans[0].tensor_optimisers()[:-2]} == {"sgd"}
    assert plans[0].group_optimisers is not None and plans[0].group_optimisers[0].momentum == 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        pairs, reports = batched_and_looped(adapter, backbone, support, query, names, grid)
    assert reports[0].fallback is None and reports[0].chunks == [len(grid)]
    for batched, looped in pairs:
        assert torch.allclose(batched, looped, rtol=0, atol=1e-8), (batched - looped).abs().max()
    assert not torch.allclose(pairs[0][0], pairs[-1][0])


def test_adapters_list_shows_each_published_recipe(invoke) -> None:  # type: ignore[no-untyped-def]
    import json

    text = invoke(["adapters", "list", "coop", "--options"]).output
    assert "recipe inductive-clip (version 1): SGD (momentum 0.9, weight decay 0.0005)" in text
    assert "source: akres001/Rethinking-Few-Shot-CLIP-Benchmarks" in text
    (listed,) = json.loads(invoke(["adapters", "list", "coop", "--json"]).output)
    assert [r["name"] for r in listed["recipes"]] == ["inductive-clip"]
    assert listed["recipes"][0]["values"]["optimizer"] == "sgd"
    (plain,) = json.loads(invoke(["adapters", "list", "bitfit", "--json"]).output)
    assert plain["recipes"] == []  # a method no paper of the three runs as published
    (centroid,) = json.loads(invoke(["adapters", "list", "mean-centroid", "--json"]).output)
    assert [r["values"] for r in centroid["recipes"]] == [
        {"distance": "cosine", "normalize": False}
    ]
