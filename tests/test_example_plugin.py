"""The example plugin, installed as its own distribution, is discovered with provenance."""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from fewtrans_board.registry.lookup import Registry
from fewtrans_board.registry.manager import get_plugin_manager
from fewtrans_board.testing import check_adapter

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "plugins" / "fewtrans-example"


def test_example_is_an_installed_distribution() -> None:
    dist = importlib.metadata.distribution("fewtrans-example")
    groups = {ep.group: ep.name for ep in dist.entry_points}
    assert groups.get("fewtrans_board") == "example"


def test_example_appears_in_plugins_json(invoke) -> None:  # type: ignore[no-untyped-def]
    rows = json.loads(invoke(["plugins", "--json"]).output)
    example = next(r for r in rows if r["name"] == "example")
    assert example["distribution"] == "fewtrans-example"
    assert example["version"] == importlib.metadata.version("fewtrans-example")
    assert example["hooks"] == ["register_adapters", "register_commands", "register_models"]
    assert not example["builtin"]


def test_example_adapter_listed_with_provenance(invoke) -> None:  # type: ignore[no-untyped-def]
    result = invoke(["adapters"])
    line = next(line for line in result.output.splitlines() if line.startswith("simpleshot"))
    assert "fewtrans-example 0.1.0" in line
    rows = json.loads(invoke(["models", "--json"]).output)
    model = next(r for r in rows if r["name"] == "example-resnet10t.c3_in1k")
    assert model["distribution"] == "fewtrans-example" and model["plugin"] == "example"


def test_example_allow_list_can_exclude_it() -> None:
    pm = get_plugin_manager(environ={"FEWTRANS_BOARD_LOAD_PLUGINS": "something-else"})
    assert "simpleshot" not in Registry.from_plugin_manager(pm).adapters


def test_example_adapter_passes_contract() -> None:
    registry = Registry.from_plugin_manager(get_plugin_manager())
    report = check_adapter(registry.adapters.get("simpleshot").obj)
    assert report.passed[-1] == "fit_many agrees with fit"


@pytest.mark.slow
def test_example_builds_a_wheel_with_the_entry_point(tmp_path: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(EXAMPLE),
        ],
        check=True,
        capture_output=True,
    )
    wheel = next(tmp_path.glob("fewtrans_example-*.whl"))
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith("entry_points.txt"))
        text = archive.read(name).decode()
    assert "[fewtrans_board]" in text and "example = fewtrans_example" in text
