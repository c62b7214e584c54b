"""Errors users see: plugin failures in a few lines, no tracebacks, --debug, bad run options."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import click
import numpy as np
import pytest
from click.testing import Result

from fewtrans_board import Adapter, ModelSpec, hookimpl
from fewtrans_board.cli.groups import device_problem
from fewtrans_board.core.errors import ContractError
from fewtrans_board.registry.manager import PluginManager, get_plugin_manager
from fewtrans_board.testing import check_adapter
from tests.conftest import REPO, CentroidAdapter, adapter_plugin

DIGITS = REPO / "leaderboard" / "manifests" / "fewtrans-search--digits.parquet"


class DividingAdapter(CentroidAdapter):
    """Fails inside fit with an error of its own (a bug in the plugin)."""

    name = "dividing"

    def fit(self, backbone, support, class_names, config):  # type: ignore[no-untyped-def]
        return support.n_way / 0  # the plugin's line the message must point at


class NumpyAdapter(CentroidAdapter):
    """Returns logits as a numpy array."""

    name = "numpy-logits"

    def fit(self, backbone, support, class_names, config):  # type: ignore[no-untyped-def]
        class _P:
            def predict(self, query):  # type: ignore[no-untyped-def]
                return np.zeros((len(query), support.n_way), dtype=np.float32)

        return _P()


def broken_loader(weights: Path | None, device: str) -> object:
    raise RuntimeError("checkpoint server said no")


class BrokenModelPlugin:
    @hookimpl
    def register_models(self, register: Callable[[ModelSpec], None]) -> None:
        register(
            ModelSpec(
                name="broken.model",
                loader=broken_loader,  # type: ignore[arg-type]
                family="test",
                architecture="broken",
                source="nowhere",
            )
        )


class CrashingCommandPlugin:
    @hookimpl
    def register_commands(self, cli: click.Group) -> None:
        @cli.command("crash")
        def crash() -> None:
            """Fail with an exception that is not a FewtransError."""
            raise KeyError("an internal key")


def manager(**plugins: object) -> PluginManager:
    return get_plugin_manager(entry_points=False, extra_plugins=plugins)


def evaluate(invoke, pm: PluginManager, tmp_path: Path, *extra: str) -> Result:  # type: ignore[no-untyped-def]
    args = ["evaluate", "--model", "demo-cnn.digits", "--adapter", "mean-centroid"]
    args += ["--manifest", str(DIGITS), "--limit", "1", "--out", str(tmp_path / "run")]
    args += ["--device", "cpu", "--threads", "1", "--quiet", *extra]
    return invoke(args, pm=pm)


def test_a_plugin_exception_in_fit_names_adapter_episode_and_line(invoke, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    pm = manager(mine=adapter_plugin(DividingAdapter))
    result = evaluate(invoke, pm, tmp_path, "--adapter", "dividing", "--hpe", "single")
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Error:"))
    assert lines[start].startswith(
        "Error: adapter 'dividing' (module tests.test_cli_errors) raised ZeroDivisionError in "
        "fit: division by zero"
    )
    assert "episode 0 (stream" in result.output and "configuration 0" in result.output
    assert f"{Path(__file__).name}:" in result.output and "in fit" in result.output
    assert "--debug" in result.output and "Traceback" not in result.output
    assert len(lines) - start <= 5


def test_debug_adds_the_full_traceback(invoke, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    pm = manager(mine=adapter_plugin(DividingAdapter))
    args = ["--debug", "evaluate", "--model", "demo-cnn.digits", "--adapter", "dividing"]
    args += ["--manifest", str(DIGITS), "--limit", "1", "--hpe", "single"]
    args += ["--out", str(tmp_path / "run"), "--device", "cpu", "--quiet"]
    result = invoke(args, pm=pm)
    assert result.exit_code == 1
    assert "Traceback" in result.output and "ZeroDivisionError: division by zero" in result.output


@pytest.mark.slow
def test_a_model_loader_that_raises_is_reported_in_a_few_lines(invoke, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    pm = manager(broken=BrokenModelPlugin())
    for command in ("evaluate", "preflight"):
        args = [command, "--model", "broken.model", "--adapter", "mean-centroid"]
        args += ["--manifest", str(DIGITS), "--device", "cpu"]
        args += ["--limit", "1", "--out", str(tmp_path / "run")] if command == "evaluate" else []
        result = invoke(args, pm=pm)
        assert result.exit_code == 1, result.output
        lines = result.output.strip().splitlines()
        start = next(i for i, line in enumerate(lines) if line.startswith("Error:"))
        assert lines[start] == (
            "Error: model 'broken.model' (module tests.test_cli_errors) raised RuntimeError in "
            "loading: checkpoint server said no"
        )
        assert "broken_loader" in result.output and "Traceback" not in result.output
        assert len(lines) - start <= 4
        assert not (tmp_path / "run").exists()


def test_predict_returning_numpy_is_a_contract_error_not_a_traceback(invoke) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ContractError, match=r"predict returned ndarray; return a torch\.Tensor"):
        check_adapter(NumpyAdapter)
    pm = manager(mine=adapter_plugin(NumpyAdapter))
    args = ["preflight", "--model", "demo-cnn.digits", "--adapter", "numpy-logits"]
    result = invoke([*args, "--manifest", str(DIGITS), "--episodes", "1", "--device", "cpu"], pm=pm)
    assert result.exit_code == 1 and "predict returned ndarray" in result.output
    assert "Traceback" not in result.output and "'detach'" not in result.output


def test_any_other_exception_is_one_line_naming_the_command(invoke) -> None:  # type: ignore[no-untyped-def]
    pm = manager(crashing=CrashingCommandPlugin())
    result = invoke(["crash"], pm=pm)
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        "Error: 'cli crash' failed unexpectedly: KeyError: 'an internal key' (run "
        "'fewtrans-board --debug ...' for the full traceback, and please report it)"
    ]
    with pytest.raises(KeyError):
        invoke(["--debug", "crash"], pm=pm)


def test_a_plugin_module_without_hookimpl_warns() -> None:
    import types

    module = types.ModuleType("fewtrans_unmarked")

    def register_adapters(register: Callable[[type[Adapter]], None]) -> None:
        register(CentroidAdapter)

    module.register_adapters = register_adapters  # type: ignore[attr-defined]
    pm = manager(unmarked=module)
    assert pm.warnings == [
        "plugin 'unmarked' (not from an installed distribution) registers nothing: its "
        "register_adapters lacks the @hookimpl decorator. Decorate each hook with @hookimpl "
        "(from fewtrans_board import hookimpl)."
    ]


def test_the_cli_prints_plugin_warnings(invoke) -> None:  # type: ignore[no-untyped-def]
    import types

    result = invoke(["benchmarks"], pm=manager(empty=types.ModuleType("fewtrans_empty")))
    assert (
        "Warning: plugin 'empty'" in result.output and "defines no hook function" in result.output
    )


def test_contract_message_names_the_class_once() -> None:
    class NoTrains(CentroidAdapter):
        name = "no-trains"
        trains = ""

    with pytest.raises(ContractError) as info:
        check_adapter(NoTrains)
    message = str(info.value)
    assert message.count("adapter class") == 1 and "has an empty 'trains'" in message


def test_device_problems_are_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert device_problem("cuda") == "no CUDA device is available on this machine; use --device cpu"
    assert device_problem("cuda:1") is not None
    assert "not a torch device" in str(device_problem("tpu"))
    assert "not supported" in str(device_problem("meta"))
    assert device_problem("cpu") is None


def test_cuda_without_a_gpu_is_refused_before_anything_runs(
    invoke, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    result = evaluate(invoke, manager(), tmp_path, "--device", "cuda")
    assert result.exit_code == 2 and "no CUDA device is available" in result.output
    assert "Traceback" not in result.output and not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "bad", [["--threads", "0"], ["--workers", "0"], ["--workers", "-1"], ["--limit", "0"]]
)
def test_non_positive_counts_are_refused(invoke, tmp_path: Path, bad: list[str]) -> None:  # type: ignore[no-untyped-def]
    result = evaluate(invoke, manager(), tmp_path, *bad)
    assert result.exit_code == 2 and f"Invalid value for '{bad[0]}'" in result.output
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "command",
    [
        ["preflight", "--model", "m", "--adapter", "a"],
        ["hpe", "search", "--model", "m", "--adapter", "a", "--out", "c.json"],
        ["submission", "verify", str(DIGITS)],
    ],
)
def test_threads_option_exists_and_is_checked(invoke, command: list[str]) -> None:  # type: ignore[no-untyped-def]
    result = invoke([*command, "--threads", "0"], pm=manager())
    assert result.exit_code == 2 and "Invalid value for '--threads'" in result.output
