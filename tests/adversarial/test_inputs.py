"""Cheaters that read what adapters are given: positions, paths, labels, other queries."""

from __future__ import annotations

import numpy as np
import pytest

from fewtrans_board import hookimpl
from fewtrans_board.core.errors import FewtransError
from fewtrans_board.registry.lookup import Registry
from fewtrans_board.registry.manager import PluginManager
from fewtrans_board.results.load import load_run
from fewtrans_board.runner.preflight import PreflightError, run_preflight
from fewtrans_board.runner.spec import RunSpec
from tests.adversarial.cheaters import BalancedAssignment, PathPeeker
from tests.adversarial.conftest import MANIFESTS, Board, ok, run_cli

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


def blind_guess_bound(board: Board, out: str, manifest: str) -> tuple[int, int, float, float]:
    """Correct queries of a run's member rows, and what guessing blind would get.

    If the predictions carry no information about the labels (the presentation order is a
    uniformly random permutation of the queries), a fixed prediction vector with ``a_c``
    queries predicted as class ``c``, against ``b_c`` queries labelled ``c`` out of ``n``,
    gets ``sum_c a_c * b_c / n`` right on average. Returns ``(correct, queries, expected,
    bound)`` where ``bound`` is the 1 - 1e-4 quantile of a binomial with that mean over all
    queries: a sum of independent Bernoullis (and sampling without replacement even more so)
    is more concentrated than the binomial of the same mean (Hoeffding, 1956).
    """
    from scipy import stats

    from fewtrans_board.episodes.manifest import Manifest

    episodes = {e.index: e for e in Manifest.load(board.manifest(manifest)).episodes()}
    rows = [r for r in load_run(board.work / out).table.to_pylist() if r["kind"] == "config"]
    assert len(rows) == len(episodes)  # one (training-free) configuration per episode
    correct, queries, expected = 0, 0, 0.0
    for row in rows:
        episode = episodes[row["episode"]]
        labels = np.array([label for _, label in episode.query])
        predictions = np.array(row["predictions"])
        a = np.bincount(predictions, minlength=episode.ways)
        b = np.bincount(labels, minlength=episode.ways)
        correct += int((predictions == labels).sum())
        queries += len(labels)
        expected += float((a * b).sum()) / len(labels)
    bound = float(stats.binom.ppf(1 - 1e-4, queries, expected / queries))
    return correct, queries, expected, bound


@pytest.mark.slow
def test_position_oracle_scores_chance_and_fails_preflight(board: Board) -> None:
    # Without a presentation order a position oracle reads every label (100%). 40 episodes
    # (about 1,400 queries; a training-free adapter runs them in seconds) make the bound
    # tight: on the 8-episode manifest it would allow 10 points above blind guessing.
    manifest = "position-40.parquet"
    build = ["manifest", "build", "--protocol", "fewtrans-varied", "--dataset", "digits"]
    ok(run_cli(board.pm, [*build, "--episodes", "40", "--out", board.manifest(manifest)]))
    # In-process: the presentation order is drawn before any adapter code runs (a worker
    # gets the inputs in the same order), and 40 episodes in a worker are 40 processes.
    ok(board.evaluate("redteam-position", "position", manifest=manifest, isolation="inline"))
    correct, queries, expected, bound = blind_guess_bound(board, "position", manifest)
    assert correct <= bound, (correct, queries, expected, bound)
    # Tight enough to catch a partial leak: under 5 points above blind guessing.
    assert 100.0 * (bound - expected) / queries < 5.0, (queries, expected, bound)
    with pytest.raises(PreflightError, match="query positions or labels"):
        validate(board.pm, "redteam-position")


@pytest.mark.slow
def test_nothing_reachable_from_adapter_inputs_names_an_item(board: Board) -> None:
    # In-process, so the peeker's findings land in this process to be inspected.
    PathPeeker.found.clear()
    ok(board.evaluate("redteam-peek", "peek", isolation="inline"))
    assert PathPeeker.found == []


@pytest.mark.slow
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


@pytest.mark.slow
def test_undeclared_transductive_adapter_fails_preflight(board: Board) -> None:
    with pytest.raises(PreflightError, match="transductive"):
        validate(board.pm, "redteam-balanced")


def test_fit_many_that_beats_fit_fails_preflight(board: Board) -> None:
    with pytest.raises(PreflightError, match="fit_many"):
        validate(board.pm, "redteam-fitmany")


@pytest.mark.slow
def test_honest_adapters_pass_validate(board: Board) -> None:
    for adapter in ("mean-centroid", "linear-probe"):
        report = validate(board.pm, adapter, limit=2)
        # The inductiveness check ran and passed ("inductiveness not required" would
        # contain "inductive" too: an honest adapter is not exempt from the check).
        assert any(c.startswith("inductive:") for c in report["checks"]), report["checks"]
        assert not any("not required" in c for c in report["checks"]), report["checks"]


class DeclaredBalanced(BalancedAssignment):
    """The balancing cheater's exact predictions, honestly declared transductive."""

    name = "redteam-balanced-declared"
    transductive = True


class DeclaredPlugin:
    @hookimpl
    def register_adapters(self, register):  # type: ignore[no-untyped-def]
        register(DeclaredBalanced)


def test_declared_transductive_adapter_is_exempt_from_the_inductive_check() -> None:
    from fewtrans_board.blocks.finetune import TransductiveFinetuneAdapter
    from fewtrans_board.registry.manager import get_plugin_manager

    assert TransductiveFinetuneAdapter.schema()["transductive"] is True
    # Through preflight itself: the same batch-dependent predictions that fail as
    # redteam-balanced (test above) pass once declared, and the report says why.
    pm = get_plugin_manager(entry_points=False, extra_plugins={"declared": DeclaredPlugin()})
    report = validate(pm, "redteam-balanced-declared", limit=2, isolation="inline")
    assert report["adapter"] == "redteam-balanced-declared"
    assert any("inductiveness not required" in c for c in report["checks"]), report["checks"]
    assert not any(c.startswith("inductive:") for c in report["checks"]), report["checks"]


def test_pixels_of_cached_features_are_refused_with_a_clear_error() -> None:
    import torch

    from fewtrans_board.api.episode_data import ImageSet

    images = ImageSet(features=torch.zeros(3, 4))
    with pytest.raises(FewtransError, match="frozen_backbone"):
        _ = images.pixels
