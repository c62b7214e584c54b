"""The property tests' Hypothesis settings: reproducible in CI, exploring elsewhere."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PROBE = (
    "import json\n"
    "from tests.faults import FUZZ\n"
    "print(json.dumps([FUZZ.derandomize, FUZZ.database is None]))\n"
)


def fuzz_settings(**env: str) -> list[bool]:
    """``[derandomize, no database]`` of ``tests.faults.FUZZ`` imported under ``env``."""
    clean = {k: v for k, v in os.environ.items() if k not in ("CI", "FEWTRANS_CI")}
    result = subprocess.run(
        [sys.executable, "-c", PROBE],
        env={**clean, **env},
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(result.stdout)


@pytest.mark.slow
@pytest.mark.parametrize("env", [{"FEWTRANS_CI": "1"}, {"CI": "true"}])
def test_ci_draws_the_same_examples_every_run(env: dict[str, str]) -> None:
    assert fuzz_settings(**env) == [True, True]


@pytest.mark.slow
@pytest.mark.parametrize("env", [{}, {"FEWTRANS_CI": "0"}])
def test_a_developer_run_explores_and_keeps_failing_examples(env: dict[str, str]) -> None:
    assert fuzz_settings(**env) == [False, False]


def test_ci_script_sets_the_ci_flag() -> None:
    assert "export FEWTRANS_CI=1" in (REPO / ".ci" / "run").read_text()
