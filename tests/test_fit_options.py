"""Explicit inputs: batching settings and the registry reach plugin code as arguments.

``fit_many`` gets a run's lockstep settings as ``options=FitOptions(...)``; a model loader
that builds from other models gets ``registry=``. No hidden context carries either, so two
runs in one process each see their own, and plugins written against the older signatures
(no ``options``, no ``registry``) are called as before.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest
import torch

from fewtrans_board import Adapter, AdapterConfig, ImageSet, ModelSpec, SupportSet, hookimpl, hparam
from fewtrans_board.api.fit_options import FitOptions, GroupReport, LockstepSettings
from fewtrans_board.blocks.lockstep import MemoryBudget, PlannedAdapter, TrainingPlan
from fewtrans_board.core.errors import UnknownNameError
from fewtrans_board.core.plugin_calls import accepts_keyword
from fewtrans_board.registry.lookup import Registry
from fewtrans_board.registry.manager import get_plugin_manager
from fewtrans_board.runner.evaluate import fit_predictors
from fewtrans_board.testing import tiny_vit_backbone, toy_episode


def episode() -> tuple[SupportSet, ImageSet, list[str]]:
    toy = toy_episode(shots=(2, 3, 2), n_query_per_class=3, seed=5)
    return toy.support, toy.query, toy.class_names


class LinearPlan(PlannedAdapter):
    """A linear map on flattened pixels; ``barrier`` makes two fits overlap in time."""

    name = "linear-plan"
    description = "Test adapter."
    barrier: threading.Barrier | None = None

    @dataclass(frozen=True)
    class Config(AdapterConfig):
        lr: float = hparam(0.05, "Learning rate.", hpe="lr")
        epochs: int = hparam(2, "Epochs.", hpe="epochs")
        batch_size: int = hparam(4, "Batch size.")

    def plan(self, backbone, support, class_names, config):  # type: ignore[no-untyped-def]
        import torch.nn.functional as F

        if self.barrier is not None:
            self.barrier.wait(timeout=60)
        pixels = support.images.pixels.flatten(1)
        head = torch.nn.Linear(pixels.shape[1], support.n_way)

        def loss(batch):  # type: ignore[no-untyped-def]
            rows = torch.as_tensor(batch)
            return F.cross_entropy(head(pixels[rows]), support.labels[rows])

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


GRID = [LinearPlan.Config(lr=lr, epochs=e) for lr in (0.01, 0.1) for e in (1, 2)]
SEEDS = [1, 2, 3, 4]


def where(i: int) -> str:
    return f"configuration {i}"


def fitted(adapter: Adapter, options: FitOptions | None) -> list[Any]:
    support, _, names = episode()
    runs = fit_predictors(adapter, None, support, names, GRID, SEEDS, where, options=options)  # type: ignore[arg-type]
    return [predictor for _, predictor, _ in runs]


# --- lockstep settings ----------------------------------------------------------------


def test_two_runs_in_one_process_each_get_their_own_settings() -> None:
    """Red team: both fits are in flight together, one looping and one in chunks of one."""
    barrier = threading.Barrier(2)
    adapter = type("Overlapping", (LinearPlan,), {"barrier": barrier})()
    loop: list[GroupReport] = []
    chunked: list[GroupReport] = []
    runs = {
        "loop": FitOptions(LockstepSettings(enabled=False), reports=loop),
        "chunked": FitOptions(LockstepSettings(memory=MemoryBudget(bytes=1)), reports=chunked),
    }
    with ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(fitted, adapter, options) for options in runs.values()]
        for future in futures:
            assert len(future.result(timeout=120)) == len(GRID)
    assert [r.fallback for r in loop] == ["batching disabled"]
    assert [(r.fallback, r.chunks) for r in chunked] == [(None, [1, 1, 1, 1])]


def test_the_batched_and_the_looped_path_agree() -> None:
    """Control: the options change how the grid trains, not what it computes."""
    _, query, _ = episode()
    batched_reports: list[GroupReport] = []
    batched = fitted(LinearPlan(), FitOptions(reports=batched_reports))
    looped = fitted(LinearPlan(), FitOptions(LockstepSettings(enabled=False)))
    plain = fitted(LinearPlan(), None)  # no options: the defaults, as before
    assert batched_reports[0].fallback is None and batched_reports[0].chunks == [4]
    with torch.no_grad():
        for a, b, c in zip(batched, looped, plain, strict=True):
            assert torch.allclose(a.predict(query), b.predict(query), rtol=1e-4, atol=1e-3)
            assert torch.equal(a.predict(query), c.predict(query))


def test_the_frozen_heads_follow_their_options() -> None:
    from fewtrans_board.methods.adapters.heads import LinearProbeAdapter

    support, query, names = episode()
    backbone = tiny_vit_backbone(seed=2)
    grid = [LinearProbeAdapter.Config(lr_head=lr, epochs=3) for lr in (0.01, 0.1)]
    stacked = LinearProbeAdapter().fit_many(backbone, support, names, grid, [1, 2])
    off = FitOptions(LockstepSettings(heads=False))
    looped = LinearProbeAdapter().fit_many(backbone, support, names, grid, [1, 2], options=off)
    assert type(stacked[0]).__name__ != type(looped[0]).__name__  # one stack vs the loop
    with torch.no_grad():
        for a, b in zip(stacked, looped, strict=True):
            assert torch.allclose(a.predict(query), b.predict(query), atol=1e-4)


class OldSignature(LinearPlan):
    """A third-party ``fit_many`` written before ``options`` existed."""

    calls: ClassVar[list[int]] = []

    def fit_many(  # type: ignore[override]
        self,
        backbone: Any,
        support: SupportSet,
        class_names: Sequence[str],
        configs: Sequence[Any],
        seeds: Sequence[int],
    ) -> list[Any]:
        self.calls.append(len(configs))
        return super().fit_many(backbone, support, class_names, configs, seeds)


def test_a_fit_many_without_options_is_called_as_before() -> None:
    options = FitOptions(LockstepSettings(enabled=False), reports=[])
    assert len(fitted(OldSignature(), options)) == len(GRID)
    assert OldSignature.calls == [len(GRID)]
    assert options.reports == []  # it never saw them


def test_a_fit_many_with_options_gets_exactly_the_runs() -> None:
    seen: list[FitOptions | None] = []

    class Declares(LinearPlan):
        def fit_many(self, *args: Any, options: FitOptions | None = None) -> list[Any]:
            seen.append(options)
            return super().fit_many(*args, options=options)

    options = FitOptions(LockstepSettings(enabled=False))
    fitted(Declares(), options)
    assert seen == [options] and seen[0] is options


def test_accepts_keyword() -> None:
    def named(a: int, options: int = 0) -> None: ...
    def keyword_only(a: int, *, options: int = 0) -> None: ...
    def absorbed(a: int, **kwargs: Any) -> None: ...
    def positional_only(options: int, /) -> None: ...

    assert accepts_keyword(named, "options") and accepts_keyword(keyword_only, "options")
    assert not accepts_keyword(absorbed, "options")
    assert not accepts_keyword(positional_only, "options")
    assert accepts_keyword(functools.partial(keyword_only, 1), "options")
    assert not accepts_keyword(print, "registry") and not accepts_keyword(3, "options")


# --- the registry of model loaders -----------------------------------------------------


def probe_registry(seen: list[Any], inner: Callable[[], None] = lambda: None) -> Registry:
    """A registry with an in-process plugin whose models record the registry they got."""

    def probe(weights: Any, device: str, *, registry: Any = None) -> Any:
        inner()
        seen.append(registry)
        return tiny_vit_backbone(seed=0)

    def copy(weights: Any, device: str) -> Any:  # an old-signature loader
        from fewtrans_board.methods.trained.demo_cnn import load_random

        return load_random(weights, device)

    class Plugin:
        @hookimpl
        def register_models(self, register: Callable[[ModelSpec], None]) -> None:
            register(ModelSpec("probe.seen", probe, "toy", "toy", "random-init"))
            register(ModelSpec("toy-cnn.copy", copy, "toy", "toy", "random-init"))

    return Registry.from_plugin_manager(
        get_plugin_manager(entry_points=False, extra_plugins={"probe": Plugin()})
    )


def test_a_loader_receives_exactly_the_registry_it_was_loaded_from() -> None:
    """Red team: loads through two registries overlap, one nested inside the other's."""
    seen: list[Any] = []
    first = probe_registry(seen)
    barrier = threading.Barrier(2)
    second = probe_registry(seen, lambda: barrier.wait(timeout=60))
    with ThreadPoolExecutor(2) as pool:
        loads = [pool.submit(r.load_model, "probe.seen") for r in (second, second)]
        for load in loads:
            load.result(timeout=120)
    assert seen == [second, second]
    seen.clear()

    def nested() -> None:
        if not seen:
            first.load_model("probe.seen")  # while the second registry's load is running

    third = probe_registry(seen, nested)
    third.load_model("probe.seen")
    assert seen[0] is first and seen[1] is third


def test_in_process_models_are_reachable_from_a_library() -> None:
    registry = probe_registry([])
    library = registry.load_model("library:toy-cnn.copy+demo-cnn.digits")
    assert library.feature_dim == 2 * registry.load_model("demo-cnn.digits").feature_dim
    spec = registry.model("library:toy-cnn.copy+demo-cnn.digits").obj
    assert spec.load(registry=registry).feature_dim == library.feature_dim
    with pytest.raises(UnknownNameError, match=r"toy-cnn\.copy"):
        spec.load()  # a bare load: the installed plugins, which lack the in-process one


def test_an_allow_list_is_honoured_by_the_members_of_a_library() -> None:
    registry = Registry.from_plugin_manager(get_plugin_manager(allow=[]))
    assert registry.load_model("library:demo-cnn.digits+demo-cnn.random").feature_dim > 0
    seen: list[Any] = []
    probes = probe_registry(seen)
    with pytest.raises(UnknownNameError, match=r"probe\.seen"):
        registry.load_model("library:probe.seen+demo-cnn.digits")
    assert seen == [] and probes.model("probe.seen")  # the other registry is untouched
