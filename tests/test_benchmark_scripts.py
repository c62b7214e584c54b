"""The timing scripts under ``benchmarks/`` still run against the current code.

They are not imported by the package, so nothing else notices when an API they use
changes; a GPU session that finds one broken wastes device time it cannot get back. Each
script runs here in its smallest CPU form; no timing is asserted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def run_script(name: str, *args: str, out: Path) -> str:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OUT": str(out)}
    result = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / name), *args],
        cwd=out,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    return result.stdout


@pytest.mark.slow
def test_hpe_batching_measures_every_family_it_is_given(tmp_path: Path) -> None:
    families = ["linear-probe", "finetune", "cache"]
    small = ["--ways", "2", "--shots", "1", "--queries", "1", "--epochs", "1"]
    run_script(
        "hpe_batching.py", "--families", *families, *small, "--cache-episodes", "1",
        "--out", str(tmp_path), out=tmp_path,
    )  # fmt: skip
    report = json.loads((tmp_path / "hpe_batching_cpu.json").read_text())
    rows = report["families"]
    assert sorted(rows) == sorted(families)
    assert not [name for name, row in rows.items() if "error" in row or "skipped" in row], rows
    assert rows["finetune"]["configs"] == 27 and "achieved_tflops" in rows["finetune"]
    assert rows["finetune"]["lockstep"], "full fine-tuning did not train in lockstep"
    assert "uncached_over_cached" in rows["cache"]


@pytest.mark.slow
def test_feature_cache_benchmark_runs(tmp_path: Path) -> None:
    output = run_script("feature_cache.py", "--episodes", "1", out=tmp_path)
    assert "speed-up" in output and "timm:vit_tiny_patch16_224" in output


@pytest.mark.slow
def test_verification_cost_benchmark_runs(tmp_path: Path) -> None:
    output = run_script(
        "verification_cost.py",
        *("--episodes", "1", "--families", "mean-centroid", "--start-repeats", "0"),
        out=tmp_path,
    )
    assert "worker start" in output and "mean-centroid" in output and "P(catch)" in output


@pytest.mark.slow
def test_demo_embedding_benchmark_runs(tmp_path: Path) -> None:
    output = run_script("demo_embedding.py", "--images", "40", "--repeats", "1", out=tmp_path)
    assert "speed-up of the embedding" in output and "features equal" in output
    assert "importing torchvision added" in output


@pytest.mark.slow
def test_store_reading_benchmark_runs(tmp_path: Path) -> None:
    output = run_script("store_reading.py", "--repeats", "1", "--resamples", "200", out=tmp_path)
    assert "every run passes at once: True" in output
    assert "digests equal: True" in output and "counts equal: True" in output
    assert "site templates" in output
