"""Batched (lockstep) HPE training equals the per-configuration loop; broken plans fall back."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import torch

from fewtrans_board import AdapterConfig, ImageSet, SupportSet, hparam
from fewtrans_board.blocks.lockstep import (
    FitOptions,
    GroupReport,
    LockstepSettings,
    MemoryBudget,
    PlannedAdapter,
    TrainingPlan,
    parse_memory,
)
from fewtrans_board.blocks.lockstep.memory import budget_bytes, chunk_size
from fewtrans_board.core.errors import ConfigError
from fewtrans_board.registry.lookup import Registry
from fewtrans_board.registry.manager import get_plugin_manager
from fewtrans_board.testing import tiny_clip_backbone, tiny_vit_backbone, toy_episode

NOT_BATCHED = {
    "prograd": "projects its own gradients",
    "promptsrc": "accumulates the prompts of each epoch",
    "coprompt": "draws a random description per step",
}
"""Built-ins that train one configuration at a time, with the reason they report."""


def planned_adapters() -> list[type[PlannedAdapter]]:
    registry = Registry.from_plugin_manager(get_plugin_manager(entry_points=False))
    found = [r.obj for r in registry.adapters if issubclass(r.obj, PlannedAdapter)]
    return sorted(found, key=lambda a: a.name)


PLANNED = planned_adapters()


@pytest.fixture(scope="module", autouse=True)
def one_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def float64() -> Iterator[None]:
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(previous)


def episode(dtype: torch.dtype, shots: tuple[int, ...] = (2, 3, 2), queries: int = 3):  # type: ignore[no-untyped-def]
    toy = toy_episode(shots=shots, n_query_per_class=queries, seed=5)
    support = SupportSet(
        ImageSet(toy.support.images.pixels.to(dtype)), toy.support.labels, len(shots)
    )
    return support, ImageSet(toy.query.pixels.to(dtype)), toy.class_names


def backbone_for(adapter: type[PlannedAdapter], dtype: torch.dtype):  # type: ignore[no-untyped-def]
    backbone = tiny_clip_backbone(seed=2) if adapter.needs_text else tiny_vit_backbone(seed=2)
    backbone.image_encoder.to(dtype)
    if backbone.text is not None:
        backbone.text.model.to(dtype)
    return backbone


def small_grid(adapter: type[PlannedAdapter], **changes: Any) -> list[AdapterConfig]:
    """4 configurations: two epoch counts x two learning-rate multipliers per lr field."""
    centre = adapter.Config().replace(batch_size=4, **changes)
    infos = adapter.Config.fields_info()
    lrs = [f.name for f in infos if f.hpe == "lr"]
    epochs = next(f.name for f in infos if f.hpe == "epochs")
    grid = []
    for count in (1, 2):
        for m in (0.5, 2.0):
            values = {
                name: getattr(centre, name) * (m if k == 0 else 1 / m) for k, name in enumerate(lrs)
            }
            grid.append(centre.replace(**{epochs: count}, **values))
    return grid


def recording(lockstep: LockstepSettings | None = None) -> tuple[FitOptions, list[GroupReport]]:
    """Options that record a report per group, with their list of reports."""
    reports: list[GroupReport] = []
    return FitOptions(lockstep or LockstepSettings(), reports=reports), reports


def batched_and_looped(adapter, backbone, support, query, names, grid, lockstep=None):  # type: ignore[no-untyped-def]
    seeds = [11 * i + 3 for i in range(len(grid))]
    options, reports = recording(lockstep)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*one by one")  # no unexpected fallback
        batched = adapter().fit_many(backbone, support, names, grid, seeds, options=options)
    looped = []
    for config, seed in zip(grid, seeds, strict=True):
        torch.manual_seed(seed)
        looped.append(adapter().fit(backbone, support, names, config))
    with torch.no_grad():
        pairs = [(b.predict(query), s.predict(query)) for b, s in zip(batched, looped, strict=True)]
    return pairs, reports


def deterministic_changes(adapter: type[PlannedAdapter]) -> dict[str, Any]:
    """Deterministic training (no LoRA dropout) and no description files needed."""
    changes: dict[str, dict[str, Any]] = {
        "clip-lora": {"dropout": 0.0},
        "coprompt": {"missing_descriptions": "template"},
    }
    return changes.get(adapter.name, {})


@pytest.mark.slow
@pytest.mark.parametrize("adapter", PLANNED, ids=[a.name for a in PLANNED])
def test_batched_training_equals_the_loop_in_float64(adapter, float64) -> None:  # type: ignore[no-untyped-def]
    support, query, names = episode(torch.float64)
    backbone = backbone_for(adapter, torch.float64)
    grid = small_grid(adapter, **deterministic_changes(adapter))
    pairs, reports = batched_and_looped(adapter, backbone, support, query, names, grid)
    for batched, looped in pairs:
        assert batched.dtype == torch.float64
        assert torch.allclose(batched, looped, rtol=0, atol=1e-8), (batched - looped).abs().max()
    assert not torch.allclose(pairs[0][0], pairs[-1][0])  # the configurations really differ
    assert [r.configs for r in reports] == [len(grid)]
    if adapter.name in NOT_BATCHED:
        assert NOT_BATCHED[adapter.name] in str(reports[0].fallback)
    else:
        assert reports[0].fallback is None and reports[0].chunks == [len(grid)]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["finetune", "lora", "coop", "finetune-clip-visual"])
def test_batched_training_agrees_with_the_loop_in_float32(name: str) -> None:
    adapter = next(a for a in PLANNED if a.name == name)
    support, query, names = episode(torch.float32, shots=(3, 4, 3, 2), queries=15)
    backbone = backbone_for(adapter, torch.float32)
    pairs, reports = batched_and_looped(
        adapter, backbone, support, query, names, small_grid(adapter)
    )
    assert reports[0].fallback is None
    agreement = torch.cat([(b.argmax(1) == s.argmax(1)).float() for b, s in pairs]).mean()
    assert agreement >= 0.995
    assert max(float((b - s).abs().max()) for b, s in pairs) < 1e-3


@pytest.mark.slow
def test_clip_lora_with_dropout_runs_the_loop_exactly() -> None:
    adapter = next(a for a in PLANNED if a.name == "clip-lora")
    support, query, names = episode(torch.float32)
    backbone = backbone_for(adapter, torch.float32)
    grid = small_grid(adapter, dropout=0.25)
    pairs, reports = batched_and_looped(adapter, backbone, support, query, names, grid)
    assert "dropout" in str(reports[0].fallback)
    assert all(torch.equal(b, s) for b, s in pairs)  # the same random draws in the same order


@pytest.mark.slow
def test_results_do_not_depend_on_the_memory_budget(float64) -> None:  # type: ignore[no-untyped-def]
    adapter = next(a for a in PLANNED if a.name == "finetune")
    support, query, names = episode(torch.float64)
    backbone = backbone_for(adapter, torch.float64)
    grid = small_grid(adapter) + small_grid(adapter, epochs=3)[:1]
    seeds = list(range(len(grid)))
    runs = {}
    for label, budget in (("unlimited", None), ("one", 1), ("two", 2)):
        memory = MemoryBudget(bytes=10**15)
        if budget is not None:
            memory = MemoryBudget(bytes=runs["unlimited"][1][0].per_config_bytes * budget + 1)
        options, reports = recording(LockstepSettings(memory=memory))
        predictors = adapter().fit_many(backbone, support, names, grid, seeds, options=options)
        with torch.no_grad():
            runs[label] = ([p.predict(query) for p in predictors], reports)
    assert runs["unlimited"][1][0].chunks == [5]
    assert runs["one"][1][0].chunks == [1, 1, 1, 1, 1]
    assert runs["two"][1][0].chunks == [2, 2, 1]
    for label in ("one", "two"):
        for a, b in zip(runs[label][0], runs["unlimited"][0], strict=True):
            assert torch.allclose(a, b, rtol=0, atol=1e-10)


# --- third-party plans that must not batch --------------------------------------------


class ToyPlanAdapter(PlannedAdapter):
    """A linear map on flattened pixels, with knobs that break the batching rules."""

    name = "toy-plan"
    description = "Test adapter."
    capture_weight = False  # the loss reads the weight from a closure, not the module
    seeded_projection = False  # the loss uses a frozen random matrix drawn per seed

    @dataclass(frozen=True)
    class Config(AdapterConfig):
        lr: float = hparam(0.05, "Learning rate.", hpe="lr")
        epochs: int = hparam(2, "Epochs.", hpe="epochs")
        batch_size: int = hparam(4, "Batch size.")

    def plan(self, backbone, support, class_names, config):  # type: ignore[no-untyped-def]
        import torch.nn.functional as F

        pixels = support.images.pixels.flatten(1)
        head = torch.nn.Linear(pixels.shape[1], support.n_way)
        projection = (
            torch.randn(pixels.shape[1], pixels.shape[1]) if self.seeded_projection else None
        )
        weight = head.weight

        def loss(batch):  # type: ignore[no-untyped-def]
            x = pixels[torch.as_tensor(batch)]
            if projection is not None:
                x = x @ projection
            w = weight if self.capture_weight else head.weight
            return F.cross_entropy(
                F.linear(x, w, head.bias), support.labels[torch.as_tensor(batch)]
            )

        class Predictor:
            def predict(self, query):  # type: ignore[no-untyped-def]
                return head(query.pixels.flatten(1))

        return TrainingPlan(
            groups=[(list(head.parameters()), config.lr)],
            loss=loss,
            finish=Predictor,
            n_items=len(support),
            batch_size=config.batch_size,
            epochs=config.epochs,
            modules=[head],
        )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("knob", "reason"),
    [("capture_weight", "closure"), ("seeded_projection", "does not share")],
)
def test_plans_that_break_the_rules_fall_back_to_the_loop(knob: str, reason: str) -> None:
    adapter = type("Broken", (ToyPlanAdapter,), {knob: True})
    support, query, names = episode(torch.float32)
    grid = [adapter.Config(lr=lr, epochs=e) for lr in (0.01, 0.1) for e in (1, 2)]
    seeds = [1, 2, 3, 4]
    options, reports = recording()
    with pytest.warns(UserWarning, match=reason):
        batched = adapter().fit_many(None, support, names, grid, seeds, options=options)
    assert reason in str(reports[0].fallback)
    for predictor, config, seed in zip(batched, grid, seeds, strict=True):
        torch.manual_seed(seed)
        single = adapter().fit(None, support, names, config)
        assert torch.equal(predictor.predict(query), single.predict(query))


def test_a_rule_abiding_third_party_plan_batches() -> None:
    support, _, names = episode(torch.float32)
    grid = [ToyPlanAdapter.Config(lr=lr, epochs=e) for lr in (0.01, 0.1) for e in (1, 2)]
    options, reports = recording()
    ToyPlanAdapter().fit_many(None, support, names, grid, [1, 2, 3, 4], options=options)
    assert reports[0].fallback is None and reports[0].chunks == [4]


def test_configurations_differing_outside_the_hpe_axes_train_in_separate_groups() -> None:
    adapter = next(a for a in PLANNED if a.name == "adapter")
    support, _, names = episode(torch.float32)
    backbone = backbone_for(adapter, torch.float32)
    grid = small_grid(adapter, epochs=1)[:2] + small_grid(adapter, epochs=1, hidden=8)[:2]
    options, reports = recording()
    adapter().fit_many(backbone, support, names, grid, [1, 2, 3, 4], options=options)
    assert [(r.configs, r.fallback) for r in reports] == [(2, None), (2, None)]


def test_disabled_batching_runs_the_loop() -> None:
    support, _, names = episode(torch.float32)
    grid = [ToyPlanAdapter.Config(lr=lr) for lr in (0.01, 0.1)]
    options, reports = recording(LockstepSettings(enabled=False))  # heads keep batching
    ToyPlanAdapter().fit_many(None, support, names, grid, [1, 2], options=options)
    assert reports[0].fallback == "batching disabled"


# --- memory planner ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("40GiB", MemoryBudget(bytes=40 << 30)),
        ("512 MB", MemoryBudget(bytes=512 * 10**6)),
        ("1.5g", MemoryBudget(bytes=1_500_000_000)),
        ("123456", MemoryBudget(bytes=123456)),
        ("60%", MemoryBudget(fraction=0.6)),
        (None, MemoryBudget()),
    ],
)
def test_parse_memory(text: str | None, expected: MemoryBudget) -> None:
    assert parse_memory(text) == expected


@pytest.mark.parametrize("text", ["12XB", "-3GiB", "0", "0%", "150%", "lots"])
def test_parse_memory_rejects_nonsense(text: str) -> None:
    with pytest.raises(ConfigError, match="memory budget"):
        parse_memory(text)


def test_chunk_size_and_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    assert chunk_size(27, 10, None) == 27
    assert chunk_size(27, 10, 95) == 9
    assert chunk_size(27, 10, 5) == 1  # never below one configuration
    assert chunk_size(3, 10, 10**9) == 3
    from fewtrans_board.blocks.lockstep import memory

    monkeypatch.setattr(memory, "free_memory", lambda device: 1000)
    assert budget_bytes(MemoryBudget(fraction=0.5), "cuda:3") == 500
    assert budget_bytes(MemoryBudget(bytes=7), "cuda:3") == 7
    monkeypatch.setattr(memory, "free_memory", lambda device: None)
    assert budget_bytes(MemoryBudget(), "cpu") is None


def test_free_cuda_memory_is_read_from_the_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    from fewtrans_board.blocks.lockstep.memory import free_memory

    asked = []
    monkeypatch.setattr(
        torch.cuda, "mem_get_info", lambda device: asked.append(device) or (123, 456)
    )
    assert free_memory("cuda:1") == 123
    assert asked == [torch.device("cuda:1")]


@pytest.mark.slow
def test_evaluate_batches_by_default_and_records_it(tmp_path, invoke) -> None:  # type: ignore[no-untyped-def]
    from pathlib import Path

    import numpy as np

    from fewtrans_board.results.load import load_run

    manifest = (
        Path(__file__).resolve().parents[1]
        / "leaderboard/manifests/fewtrans-varied--digits.parquet"
    )
    tables, provenance = {}, {}
    runs = (
        ("batched", ["--batching", "on", "--max-memory", "2GiB"]),
        ("loop", ["--batching", "off"]),
        ("auto", []),  # on CPU: the loop for fine-tuning (vmapped convolutions are slower)
    )
    for label, extra in runs:
        out = tmp_path / label
        result = invoke(
            [
                "evaluate",
                "--model",
                "demo-cnn.digits",
                "--adapter",
                "finetune",
                "--manifest",
                str(manifest),
                "--out",
                str(out),
                "--limit",
                "2",
                "--hpe",
                "fewtrans-reference",
                "--config",
                "epochs=2",
                "--threads",
                "1",
                "--quiet",
                "--device",
                "cpu",
                *extra,
            ],
            pm=get_plugin_manager(entry_points=False),
        )
        assert result.exit_code == 0, result.output
        run = load_run(out)
        tables[label] = run.table
        provenance[label] = run.meta
    assert provenance["batched"]["batching"] == {
        "mode": "on",
        "plans": True,
        "heads": True,
        "max_memory": "2GiB",
        "max_memory_option": "2GiB",  # as given, so that verification replays it
    }
    assert provenance["loop"]["batching"]["plans"] is False
    assert provenance["auto"]["batching"]["plans"] is False
    assert provenance["auto"]["batching"]["heads"] is True
    # Equal only up to rounding, so the mode is part of the identity: shards never mix.
    assert provenance["batched"]["run_id"] != provenance["loop"]["run_id"]
    predictions = {
        k: np.concatenate(t.column("predictions").to_pylist()) for k, t in tables.items()
    }
    assert len(predictions["loop"]) > 100
    assert np.mean(predictions["batched"] == predictions["loop"]) >= 0.995
    assert np.array_equal(predictions["auto"], predictions["loop"])


def test_bad_max_memory_is_a_usage_error(invoke) -> None:  # type: ignore[no-untyped-def]
    result = invoke(
        [
            "evaluate",
            "--model",
            "m",
            "--adapter",
            "a",
            "--manifest",
            __file__,
            "--out",
            "x",
            "--max-memory",
            "lots",
        ],
        pm=get_plugin_manager(entry_points=False),
    )
    assert result.exit_code == 2
    assert "memory budget 'lots'" in result.output and "Traceback" not in result.output


@pytest.mark.slow
def test_a_chunk_out_of_device_memory_is_retried_smaller(monkeypatch, float64) -> None:  # type: ignore[no-untyped-def]
    from fewtrans_board.blocks.lockstep.template import Template

    adapter = next(a for a in PLANNED if a.name == "finetune")
    support, query, names = episode(torch.float64)
    backbone = backbone_for(adapter, torch.float64)
    grid = small_grid(adapter) + small_grid(adapter, epochs=3)[:1]
    original = Template.losses
    limit = {"rows": 2}

    def losses(self, batch, rows):  # type: ignore[no-untyped-def]
        if torch.is_grad_enabled() and rows[0].shape[0] > limit["rows"]:
            raise torch.OutOfMemoryError("simulated: the estimate was optimistic")
        return original(self, batch, rows)

    monkeypatch.setattr(Template, "losses", losses)
    pairs, reports = batched_and_looped(adapter, backbone, support, query, names, grid)
    assert reports[0].chunks == [2, 2, 1]  # 5 did not fit, 2 did; nothing trained twice
    for batched, looped in pairs:
        assert torch.allclose(batched, looped, rtol=0, atol=1e-8)
    limit["rows"] = 0  # not even one configuration batched: the loop runs instead
    seeds = [11 * i + 3 for i in range(len(grid))]  # as in batched_and_looped
    options, reports = recording()
    with pytest.warns(UserWarning, match="OutOfMemoryError"):
        fallback = adapter().fit_many(backbone, support, names, grid, seeds, options=options)
    assert "OutOfMemoryError" in str(reports[0].fallback)
    with torch.no_grad():
        for predictor, (_, looped) in zip(fallback, pairs, strict=True):
            assert torch.equal(predictor.predict(query), looped)


def test_batching_modes() -> None:
    from fewtrans_board.blocks.lockstep import settings_for

    budget = MemoryBudget(bytes=5)
    auto_gpu = settings_for("auto", "cuda:1", budget)
    assert (auto_gpu.enabled, auto_gpu.heads, auto_gpu.memory) == (True, True, budget)
    auto_cpu = settings_for("auto", "cpu", budget)
    assert (auto_cpu.enabled, auto_cpu.heads) == (False, True)
    assert (
        settings_for("on", "cpu", budget).enabled,
        settings_for("off", "cuda", budget).heads,
    ) == (
        True,
        False,
    )
    with pytest.raises(ValueError, match="unknown batching mode"):
        settings_for("sometimes", "cpu", budget)


@pytest.mark.slow
def test_out_of_memory_after_a_trained_chunk_loops_the_rest(monkeypatch, float64) -> None:  # type: ignore[no-untyped-def]
    from fewtrans_board.blocks.lockstep import trainer

    adapter = next(a for a in PLANNED if a.name == "finetune")
    support, query, names = episode(torch.float64)
    backbone = backbone_for(adapter, torch.float64)
    grid = small_grid(adapter)
    original, calls = trainer._train_chunk, []

    def train_chunk(*args):  # type: ignore[no-untyped-def]
        calls.append(len(args[3]))
        if len(calls) > 1:
            raise trainer._FirstStepOutOfMemory
        return original(*args)

    monkeypatch.setattr(trainer, "_train_chunk", train_chunk)
    chunks_of_one = LockstepSettings(memory=MemoryBudget(bytes=1))
    pairs, reports = batched_and_looped(
        adapter, backbone, support, query, names, grid, chunks_of_one
    )
    assert calls == [1, 1] and reports[0].chunks == [1]
    assert "out of memory after 1 configurations" in str(reports[0].fallback)
    for batched, looped in pairs:
        assert torch.allclose(batched, looped, rtol=0, atol=1e-8)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["finetune", "coop"])
def test_bf16_autocast_under_vmap_batches_with_the_cuda_tolerances(name, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The CUDA recipe (bf16 autocast inside the loss) exercised on CPU's autocast."""
    from fewtrans_board.blocks import training
    from fewtrans_board.blocks.lockstep import trainer

    monkeypatch.setattr(training, "autocast", lambda device: torch.autocast("cpu", torch.bfloat16))
    monkeypatch.setattr(trainer, "_tolerance", lambda t, gradient: 0.5 if gradient else 5e-2)
    adapter = next(a for a in PLANNED if a.name == name)
    support, query, names = episode(torch.float32, shots=(3, 4, 3, 2), queries=10)
    backbone = backbone_for(adapter, torch.float32)
    pairs, reports = batched_and_looped(
        adapter, backbone, support, query, names, small_grid(adapter)
    )
    assert reports[0].fallback is None and reports[0].chunks == [4]
    agreement = torch.cat([(b.argmax(1) == s.argmax(1)).float() for b, s in pairs]).mean()
    assert agreement >= 0.9  # bf16 rounds batched and plain matmuls differently
