"""The demo: pretrained demo CNN beats its random-init twin, with CIs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fewtrans_board.registry.manager import get_plugin_manager


@pytest.mark.slow
def test_demo_pretrained_beats_random(tmp_path: Path, invoke) -> None:  # type: ignore[no-untyped-def]
    result = invoke(
        ["demo", "--out", str(tmp_path / "demo"), "--episodes", "30", "--json"],
        pm=get_plugin_manager(entry_points=False),
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert len(report["summaries"]) == 6
    site = Path(report["site"])
    assert site.is_file() and (site.parent / "benchmark-demo.html").is_file()
    assert "local run" in (site.parent / "benchmark-demo.html").read_text()
    for gain in report["gains"]:
        assert gain["n"] == 30 and gain["mean"] - gain["ci95"] > 0, gain  # CI excludes zero
    runs = {(s["model"], s["adapter"]): s for s in report["summaries"]}
    for adapter in ("mean-centroid", "linear-probe", "cosine-classifier"):
        pretrained = runs[("demo-cnn.digits", adapter)]["aggregations"]["hpe"]
        random = runs[("demo-cnn.random", adapter)]["aggregations"]["hpe"]
        assert pretrained["mean"] > random["mean"]
    again = invoke(
        ["demo", "--out", str(tmp_path / "demo"), "--episodes", "30"],
        pm=get_plugin_manager(entry_points=False),
    )
    assert again.exit_code == 0 and "Pretraining gain" in again.output  # resumes instantly
