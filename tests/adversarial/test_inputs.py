"""Cheaters that read what adapters are given: positions, paths, labels, other queries."""

from __future__ import annotations

import numpy as np
import pytest

from fewtrans_board.errors import FewtransError
from fewtrans_board.plugins import PluginManager
from fewtrans_board.preflight import PreflightError, run_preflight
from fewtrans_board.registry import Registry
from fewtrans_board.results.load import load_run
from fewtrans_board.runner.spec import RunSpec
from tests.adversarial.cheaters import PathPeeker
from tests.adversarial.conftest import MANIFESTS, Board, ok

DIGITS = str(MANIFESTS / "fewtrans-varied--digits.parquet")


def validate(pm: PluginManager, adapter: str, limit: int = 3, isolation: str = "auto") -> dict:  # type: ignore[type-arg]
    spec = RunSpec(
        model="demo-cnn.digits",
        adapter=adapter,
        manifest=DIGITS,
        limit=limit,
        threads=1,
        isolation=isolation,
    )
    return run_preflight(spec, Registry.from_plugin_manager(pm))


def accuracy(board: Board, out: str) -> tuple[float, float]:
    """Mean HPE accuracy of a run and the mean chance level of its episodes."""
    run = load_run(board.work / out)
    hpe = run.aggregations()["hpe"]
    ways = np.array(run.column("n_way"))[np.array(run.column("kind")) == "config"]
    return float(np.mean(hpe)), float(np.mean(100.0 / ways))


def test_position_oracle_scores_chance_and_fails_preflight(board: Board) -> None:
    # Without a presentation order a position oracle reads every label (100%).
    ok(board.evaluate("redteam-position", "position"))
    mean, chance = accuracy(board, "position")
    assert mean < chance + 15, (mean, chance)
    with pytest.raises(PreflightError, match="query positions or labels"):
        validate(board.pm, "redteam-position")


def test_nothing_reachable_from_adapter_inputs_names_an_item(board: Board) -> None:
    # In-process, so the peeker's findings land in this process to be inspected.
    PathPeeker.found.clear()
    ok(board.evaluate("redteam-peek", "peek", isolation="inline"))
    assert PathPeeker.found == []


def test_stack_inspection_is_caught_by_preflight_and_worthless_in_a_worker(
    board: Board,
) -> None:
    # In-process, nothing stops a plugin from reading its callers' frames; preflight shuffles
    # the hidden labels and sees the predictions follow them.
    with pytest.raises(PreflightError, match="query positions or labels"):
        validate(board.pm, "redteam-stack", isolation="inline")
    ok(board.evaluate("redteam-stack", "stack-inline", isolation="inline"))
    ok(board.evaluate("redteam-stack", "stack-worker"))
    cheated, _ = accuracy(board, "stack-inline")
    honest, _ = accuracy(board, "stack-worker")  # no label exists in a worker
    assert cheated == 100.0 and honest < 90.0, (cheated, honest)


def test_undeclared_transductive_adapter_fails_preflight(board: Board) -> None:
    with pytest.raises(PreflightError, match="transductive"):
        validate(board.pm, "redteam-balanced")


def test_fit_many_that_beats_fit_fails_preflight(board: Board) -> None:
    with pytest.raises(PreflightError, match="fit_many"):
        validate(board.pm, "redteam-fitmany")


def test_honest_adapters_pass_validate(board: Board) -> None:
    for adapter in ("mean-centroid", "linear-probe"):
        report = validate(board.pm, adapter, limit=2)
        assert any("inductive" in c for c in report["checks"]), report["checks"]


def test_declared_transductive_adapter_is_exempt_from_the_inductive_check() -> None:
    from fewtrans_board.adapters.builtin.finetune import TransductiveFinetuneAdapter

    assert TransductiveFinetuneAdapter.transductive
    assert TransductiveFinetuneAdapter.schema()["transductive"] is True


def test_pixels_of_cached_features_are_refused_with_a_clear_error() -> None:
    import torch

    from fewtrans_board.adapters.episode_data import ImageSet

    images = ImageSet(features=torch.zeros(3, 4))
    with pytest.raises(FewtransError, match="frozen_backbone"):
        _ = images.pixels
