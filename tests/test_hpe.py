"""HPE protocols (grids, hashes) and the centre search."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from fewtrans_board.blocks.finetune import FinetuneAdapter
from fewtrans_board.hpe.protocols import HPE_PROTOCOLS
from fewtrans_board.hpe.search import (
    EPOCH_LADDER,
    centre_search,
    epochs_down,
    epochs_up,
    lr_down,
    lr_up,
    snap_lr,
)
from fewtrans_board.methods.adapters.heads import LinearProbeAdapter
from fewtrans_board.methods.adapters.prototypes import MeanCentroidAdapter

PAPER, REFERENCE = HPE_PROTOCOLS["fewtrans-paper"], HPE_PROTOCOLS["fewtrans-reference"]


def test_paper_grid_for_two_learning_rates_is_3x3x3() -> None:
    axes = PAPER.axes(FinetuneAdapter, FinetuneAdapter.Config())
    assert axes == {
        "lr_backbone": [2e-06, 1e-05, 5e-05],
        "lr_head": [0.0004, 0.002, 0.01],
        "epochs": [27, 53, 80],  # E = 70 + 10; E/3 = 26.7 -> 27, 2E/3 = 53.3 -> 53
    }
    grid = PAPER.grid(FinetuneAdapter, FinetuneAdapter.Config())
    assert len(grid) == 27 and len({c.digest() for c in grid}) == 27
    assert all(c.batch_size == 64 for c in grid)


def test_paper_grid_for_one_learning_rate_is_5x3() -> None:
    axes = PAPER.axes(LinearProbeAdapter, LinearProbeAdapter.Config())
    assert axes == {"lr_head": [0.008, 0.04, 0.2, 1.0, 5.0], "epochs": [20, 40, 60]}
    assert len(PAPER.grid(LinearProbeAdapter, LinearProbeAdapter.Config())) == 15


def test_reference_grid_is_3x3_at_fixed_epochs_with_vote() -> None:
    grid = REFERENCE.grid(FinetuneAdapter, FinetuneAdapter.Config())
    assert len(grid) == 9 and {c.epochs for c in grid} == {70}
    assert {(c.lr_backbone, c.lr_head) for c in grid} == {
        (a, b) for a in (2e-06, 1e-05, 5e-05) for b in (0.0004, 0.002, 0.01)
    }
    assert REFERENCE.aggregation == "vote" and PAPER.aggregation == "logit-mean"


@pytest.mark.parametrize("protocol", [PAPER, REFERENCE], ids=lambda p: p.name)
@pytest.mark.parametrize("adapter", [LinearProbeAdapter, FinetuneAdapter], ids=lambda a: a.name)
def test_grid_does_not_depend_on_the_order_roles_are_listed(protocol, adapter) -> None:  # type: ignore[no-untyped-def]
    from fewtrans_board.hpe.protocols import hpe_roles

    centre = adapter.Config().to_dict()
    roles = hpe_roles(adapter)
    # Roles read back from stored JSON come out alphabetically ("epochs" first).
    alphabetical = dict(sorted(roles.items()))
    reverse = dict(reversed(list(roles.items())))
    grid = protocol.grid_for(centre, roles)
    assert [c.to_dict() for c in protocol.grid(adapter, adapter.Config())] == grid
    assert protocol.grid_for(centre, alphabetical) == grid
    assert protocol.grid_for(centre, reverse) == grid
    assert protocol.digest_for(centre, alphabetical) == protocol.digest_for(centre, roles)
    # Learning rates first (by field name), then the epoch count; the reference protocol
    # fixes the epochs at the centre, so it has no epoch axis at all.
    expected = {
        ("fewtrans-paper", "linear-probe"): ["lr_head", "epochs"],
        ("fewtrans-paper", "finetune"): ["lr_backbone", "lr_head", "epochs"],
        ("fewtrans-reference", "linear-probe"): ["lr_head"],
        ("fewtrans-reference", "finetune"): ["lr_backbone", "lr_head"],
    }[(protocol.name, adapter.name)]
    for order in (roles, alphabetical, reverse):
        assert list(protocol.axes_for(centre, order)) == expected


def test_adapters_without_axes_get_the_centre_only() -> None:
    assert PAPER.grid(MeanCentroidAdapter, MeanCentroidAdapter.Config()) == [
        MeanCentroidAdapter.Config()
    ]


def test_protocol_hash_depends_on_the_centre() -> None:
    a = PAPER.digest(FinetuneAdapter, FinetuneAdapter.Config())
    assert a == PAPER.digest(FinetuneAdapter, FinetuneAdapter.Config())
    assert a != PAPER.digest(FinetuneAdapter, FinetuneAdapter.Config(lr_head=1e-3))
    assert a != REFERENCE.digest(FinetuneAdapter, FinetuneAdapter.Config())


def test_ladders() -> None:
    assert [lr_up(x) for x in (1e-5, 2e-5, 5e-5)] == [2e-5, 5e-5, 1e-4]
    assert [lr_down(x) for x in (1e-5, 2e-5, 5e-5)] == [5e-6, 1e-5, 2e-5]
    assert lr_down(1e-7) is None and snap_lr(3e-4) == 2e-4 and snap_lr(0.0007) == 5e-4
    assert epochs_up(100) is None and epochs_down(1) is None and epochs_up(20) == 30
    assert EPOCH_LADDER[:6] == (1, 2, 5, 10, 15, 20)


def peak_scorer(best_lr: float, best_epochs: int, calls: list[int]):  # type: ignore[no-untyped-def]
    def score(configs):  # type: ignore[no-untyped-def]
        calls.append(len(configs))
        return [
            100 - abs(math.log10(c.lr_head / best_lr)) * 10 - abs(c.epochs - best_epochs) / 10
            for c in configs
        ]

    return score


def test_centre_search_walks_to_the_optimum() -> None:
    calls: list[int] = []
    start = LinearProbeAdapter.Config(lr_head=0.2, epochs=50)
    result = centre_search(LinearProbeAdapter, start, peak_scorer(2e-3, 15, calls))
    assert result.centre["lr_head"] == pytest.approx(2e-3) and result.centre["epochs"] == 15
    assert len(result.rounds[0]["grid"]) == 9  # full 3x3 grid first
    assert result.rounds[0]["directions"] == {"lr_head": "down", "epochs": "down"}
    assert result.rounds[-1]["directions"] == {"lr_head": "still", "epochs": "still"}
    assert all(len(r["grid"]) <= 4 for r in result.rounds[1:])  # {next, current} per moving axis
    assert result.evaluations == sum(calls)  # cached configurations are never re-evaluated


def test_centre_search_stays_when_the_start_is_optimal() -> None:
    calls: list[int] = []
    start = LinearProbeAdapter.Config(lr_head=0.2, epochs=50)
    result = centre_search(LinearProbeAdapter, start, peak_scorer(0.2, 50, calls))
    assert (
        len(result.rounds) == 1
        and result.centre["lr_head"] == 0.2
        and result.centre["epochs"] == 50
    )


@pytest.mark.slow
def test_hpe_search_command_on_digits(tmp_path: Path, invoke) -> None:  # type: ignore[no-untyped-def]
    from fewtrans_board.registry.manager import get_plugin_manager

    pm = get_plugin_manager(entry_points=False)
    out = tmp_path / "centre.json"
    result = invoke(
        [
            "hpe",
            "search",
            "--model",
            "demo-cnn.digits",
            "--adapter",
            "linear-probe",
            "--dataset",
            "digits",
            "--limit",
            "4",
            "--out",
            str(out),
            "--device",
            "cpu",
            "--config",
            "epochs=10",
        ],
        pm=pm,
    )
    assert result.exit_code == 0, result.output
    record = json.loads(out.read_text())
    assert record["dataset"] == "digits" and record["episodes"] == 4 and record["log"]
    assert record["log"][0]["grid"] and record["centre"]["epochs"] in EPOCH_LADDER
    assert (tmp_path / "fewtrans-search--digits.parquet").is_file()
    # The centre and its log travel with results.
    run = tmp_path / "run"
    manifest = (
        Path(__file__).resolve().parents[1]
        / "leaderboard/manifests/fewtrans-varied--digits.parquet"
    )
    result = invoke(
        [
            "evaluate",
            "--model",
            "demo-cnn.digits",
            "--adapter",
            "linear-probe",
            "--manifest",
            str(manifest),
            "--centre",
            str(out),
            "--out",
            str(run),
            "--limit",
            "2",
            "--quiet",
            "--device",
            "cpu",
        ],
        pm=pm,
    )
    assert result.exit_code == 0, result.output
    from fewtrans_board.results.load import load_run

    meta = load_run(run).meta
    assert meta["centre_search"]["centre"] == record["centre"]
    assert meta["adapter"]["centre"]["lr_head"] == record["centre"]["lr_head"]
    grid = json.loads(
        invoke(
            ["hpe", "grid", "--adapter", "linear-probe", "--centre", str(out), "--json"], pm=pm
        ).output
    )
    assert len(grid["grid"]) == 15 and grid["centre"]["epochs"] == record["centre"]["epochs"]
    wrong = invoke(
        [
            "evaluate",
            "--model",
            "demo-cnn.digits",
            "--adapter",
            "cosine-classifier",
            "--manifest",
            str(manifest),
            "--centre",
            str(out),
            "--out",
            str(tmp_path / "x"),
            "--quiet",
        ],
        pm=pm,
    )
    assert wrong.exit_code == 1 and "was searched for adapter 'linear-probe'" in wrong.output
