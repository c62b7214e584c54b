"""``validate``: passes an honest adapter; names each kind of cheat or breakage."""

from __future__ import annotations

import json

import pytest

from fewtrans_board.registry.manager import get_plugin_manager


def bad_pm():  # type: ignore[no-untyped-def]
    from tests.plugins import bad_adapters

    return get_plugin_manager(entry_points=False, extra_plugins={"bad": bad_adapters})


def validate(invoke, adapter: str, *extra: str):  # type: ignore[no-untyped-def]
    return invoke(
        [
            "preflight",
            "--model",
            "demo-cnn.digits",
            "--adapter",
            adapter,
            "--episodes",
            "2",
            "--device",
            "cpu",
            *extra,
        ],
        pm=bad_pm(),
    )


@pytest.fixture(scope="module")
def honest_report() -> dict:  # type: ignore[type-arg]
    """``preflight --json`` of the built-in linear probe in the worker plugins get (once per
    module: the honest control of the tests below)."""
    from click.testing import CliRunner

    from fewtrans_board.cli import make_cli
    from fewtrans_board.core.sandbox.bwrap import sandbox_problem

    # A built-in pair runs inline by default; the worker is what plugins get.
    worker = "sandbox" if sandbox_problem() is None else "process"

    def invoke(args, pm):  # type: ignore[no-untyped-def]
        return CliRunner().invoke(make_cli(pm), list(args), catch_exceptions=False)

    result = validate(
        invoke, "linear-probe", "--json", "--isolation", worker, "--hpe", "fewtrans-paper"
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["isolation"] == worker
    return report


@pytest.mark.slow
def test_validate_passes_an_honest_adapter(honest_report: dict) -> None:  # type: ignore[type-arg]
    report = honest_report
    assert report["configurations"] == 15 and report["episodes"] == 2
    checks = report["checks"]
    assert "predictions independent of query order (labels never reach the worker)" in checks
    assert any(c.startswith("fit_many matches fit in accuracy") for c in checks), checks
    assert "inductive: each query's logits independent of the other queries" in checks
    assert "identical results when re-run with the same seeds in a fresh worker" in checks


@pytest.mark.slow
@pytest.mark.parametrize(
    ("adapter", "isolation", "message"),
    [
        ("unseeded", "auto", "same seed gave different logits"),
        ("peeks-labels", "inline", "reads query positions or labels"),
        ("wrong-shape", "auto", "logits have shape"),
    ],
)
def test_validate_rejects(invoke, adapter: str, isolation: str, message: str) -> None:  # type: ignore[no-untyped-def]
    result = validate(invoke, adapter, "--isolation", isolation)
    assert result.exit_code == 1 and message in result.output, result.output


@pytest.mark.slow
def test_a_label_peeker_finds_no_labels_in_the_worker(invoke, honest_report: dict) -> None:  # type: ignore[no-untyped-def,type-arg]
    """The same cheat preflighted in a worker: nothing to read, so it predicts class 0."""
    result = validate(invoke, "peeks-labels", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["isolation"] == honest_report["isolation"]  # like with like
    assert report["hpe_accuracy"] < honest_report["hpe_accuracy"] - 20
