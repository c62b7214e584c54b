"""CLIP k-shot runs are reported per K (mean over seeds, their spread) with the average over
shots as headline, in results summaries, the index and the site."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from fewtrans_board.cli import make_cli
from fewtrans_board.datasets.synthetic import write_synthetic_copy
from fewtrans_board.episodes.manifest import Manifest
from fewtrans_board.registry.manager import get_plugin_manager
from fewtrans_board.results.load import load_run
from fewtrans_board.results.per_shot import average_over_datasets, run_per_shot


def cli(*args: str) -> str:
    result = CliRunner().invoke(
        make_cli(get_plugin_manager(entry_points=False)), list(args), catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    return result.output


@pytest.fixture(scope="module")
def kshot_runs(tmp_path_factory: pytest.TempPathFactory, datasets_registry) -> dict[str, Path]:  # type: ignore[no-untyped-def]
    """Mean-centroid on the demo CNN over two synthetic CLIP datasets (15 episodes each)."""
    work = tmp_path_factory.mktemp("kshot")
    runs = {}
    for name in ("clip-eurosat", "clip-dtd"):
        root = work / name
        write_synthetic_copy(datasets_registry[name], root, 36, image_size=8)
        manifest = work / f"clip-kshot--{name}.parquet"
        cli(
            "manifest", "build", "--protocol", "clip-kshot", "--dataset", name,
            "--root", str(root), "--out", str(manifest),
        )  # fmt: skip
        cli(
            "evaluate", "--model", "demo-cnn.digits", "--adapter", "mean-centroid",
            "--manifest", str(manifest), "--root", str(root), "--out", str(work / f"run-{name}"),
            "--device", "cpu", "--quiet",
        )  # fmt: skip
        runs[name] = work / f"run-{name}"
    return runs


def expected_per_shot(run_dir: Path, manifest: Path) -> dict[int, list[float]]:
    """Oracle: per K, the seeds' HPE accuracies in seed order, from the raw ensemble rows and
    the (K, seed) the manifest recorded for each episode."""
    run = load_run(run_dir)
    info = Manifest.load(manifest).meta["episode_info"]
    headline = run.meta["hpe"]["aggregation"]
    rows = [r for r in run.table.to_pylist() if r["kind"] == "ensemble"]
    accuracy = {r["episode"]: r["accuracy"] for r in rows if r["aggregation"] == headline}
    grouped: dict[int, list[tuple[int, float]]] = {}
    for episode, pair in enumerate(info):
        grouped.setdefault(pair["shots"], []).append((pair["seed"], accuracy[episode]))
    return {k: [a for _, a in sorted(v)] for k, v in sorted(grouped.items())}


@pytest.mark.slow
def test_summary_reports_each_k_over_seeds(kshot_runs: dict[str, Path]) -> None:
    run_dir = kshot_runs["clip-eurosat"]
    manifest = run_dir.parent / "clip-kshot--clip-eurosat.parquet"
    expected = expected_per_shot(run_dir, manifest)
    assert sorted(expected) == [1, 2, 4, 8, 16] and all(len(v) == 3 for v in expected.values())
    summary = json.loads(cli("results", "summary", str(run_dir), "--json"))[0]
    reported = summary["per_shot"]["hpe"]
    for k_result in reported["shots"]:
        seeds = expected[k_result["shots"]]
        assert [s["accuracy"] for s in k_result["seeds"]] == pytest.approx(seeds)
        assert [s["seed"] for s in k_result["seeds"]] == [1, 2, 3]
        assert k_result["mean"] == pytest.approx(np.mean(seeds))
        assert k_result["std"] == pytest.approx(np.std(seeds))
    assert reported["average"] == pytest.approx(np.mean([np.mean(v) for v in expected.values()]))
    per_seed = [np.mean([v[i] for v in expected.values()]) for i in range(3)]
    assert reported["average_std"] == pytest.approx(np.std(per_seed))
    text = cli("results", "summary", str(run_dir))
    assert "K=1 " in text and "K=16 " in text and "average over shots" in text


@pytest.mark.slow
def test_table_average_is_over_shots_and_datasets(kshot_runs: dict[str, Path]) -> None:
    per_dataset = {name: run_per_shot(load_run(path)) for name, path in kshot_runs.items()}
    assert all(v is not None for v in per_dataset.values())
    table = average_over_datasets({k: v for k, v in per_dataset.items() if v is not None})
    expected = {
        name: expected_per_shot(path, path.parent / f"clip-kshot--{name}.parquet")
        for name, path in kshot_runs.items()
    }
    for k_result in table.shots:
        by_seed = [
            np.mean([expected[name][k_result.shots][i] for name in expected]) for i in range(3)
        ]
        assert k_result.mean == pytest.approx(np.mean(by_seed))
        assert k_result.std == pytest.approx(np.std(by_seed))
    assert table.average == pytest.approx(
        np.mean([np.mean(v) for e in expected.values() for v in e.values()])
    )


def test_site_reports_per_k_with_the_headline_stated(
    kshot_runs: dict[str, Path], tmp_path: Path
) -> None:
    from fewtrans_board.website.build import build_site

    store = tmp_path / "leaderboard"
    (store / "manifests").mkdir(parents=True)
    out = tmp_path / "_site"
    build_site(store, out, local_runs=list(kshot_runs.values()))
    page = (out / "benchmark-clip-partially-transductive.html").read_text()
    assert "average over shots" in page.lower() and "Headline" in page
    assert 'id="table-hpe"' not in page  # no mean ± CI pooled over shots
    per_dataset = {name: run_per_shot(load_run(path)) for name, path in kshot_runs.items()}
    table = average_over_datasets({k: v for k, v in per_dataset.items() if v is not None})
    first_table = page.split('id="per-shot-hpe"')[1].split("</table>")[0]
    cells = re.findall(
        r'<span class="mean">([\d.]+)</span>&nbsp;<span class="pm">± ([\d.]+)', first_table
    )
    expected = [(k.mean, k.std) for k in table.shots] + [(table.average, table.average_std)]
    assert [(float(m), float(s)) for m, s in cells] == [
        (round(m, 2), round(s, 2)) for m, s in expected
    ]
    for k in (1, 2, 4, 8, 16):
        assert f"<th>K = {k}</th>" in first_table
    method = (out / "method-local-mean-centroid--demo-cnn.digits.html").read_text()
    assert "Per K (HPE)" in method and "Average over shots (headline)" in method
    assert "Accuracy % (95% CI)" not in method  # no CI pooled over shots
    dataset = (out / "dataset-clip-eurosat.html").read_text()
    assert "average over shots ± std over seeds" in dataset
