"""``validate``: passes an honest adapter; names each kind of cheat or breakage."""

from __future__ import annotations

import json

import pytest

from fewtrans_board.plugins import get_plugin_manager


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


def test_validate_passes_an_honest_adapter(invoke) -> None:  # type: ignore[no-untyped-def]
    result = validate(invoke, "linear-probe", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["configurations"] == 15 and report["episodes"] == 2
    assert (
        "predictions independent of query order and hidden labels; fit_many equals fit"
        in (report["checks"])
    )
    assert "inductive: each query's logits independent of the other queries" in report["checks"]
    assert "identical results when re-run with the same seeds" in report["checks"]


@pytest.mark.parametrize(
    ("adapter", "message"),
    [
        ("unseeded", "same seed gave different logits"),
        ("peeks-labels", "reads query positions or labels"),
        ("wrong-shape", "logits have shape"),
    ],
)
def test_validate_rejects(invoke, adapter: str, message: str) -> None:  # type: ignore[no-untyped-def]
    result = validate(invoke, adapter)
    assert result.exit_code == 1 and message in result.output, result.output
