"""The papers' forms of a summary: FewTrans Fig. 1, Tables III, VIII and IX, Fig. 6.

Each is checked against an oracle computed here from the stored shards (read with pyarrow,
not through the loader) and the frozen manifest's labels: numpy's percentiles and sample
standard deviation for the single-task spread, a float64 logit average for the lr
ensemble, the sum of the rows' seconds for the time, scipy's paired t-test and Holm's rule
written out for the comparison, and hand-computed values for the pure functions.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import scipy.stats

from fewtrans_board.core.errors import FewtransError
from fewtrans_board.results.cost import PAPER_TASKS, duration
from fewtrans_board.results.spread import single_task_spread

ROOT = Path(__file__).resolve().parents[1]
MANIFESTS = ROOT / "leaderboard" / "manifests"
FIXED = MANIFESTS / "fewtrans-fixed-5w1s--digits.parquet"
SEARCH = MANIFESTS / "fewtrans-search--digits.parquet"
EPISODES = 6


# --- pure functions against hand-computed values ---------------------------------------------


def test_single_task_spread_of_four_tasks_by_hand() -> None:
    spread = single_task_spread([40.0, 60.0, 80.0, 100.0], shots=1)
    std = math.sqrt((30**2 + 10**2 + 10**2 + 30**2) / 3)  # sample std
    assert (spread.tasks, spread.mean, spread.shots) == (4, 70.0, 1)
    assert spread.std == pytest.approx(std, rel=1e-12)
    assert (spread.low, spread.high) == pytest.approx((70 - 1.96 * std, 70 + 1.96 * std))
    # linear interpolation: rank 0.025 * 3 = 0.075 and 0.975 * 3 = 2.925
    assert (spread.p2_5, spread.p97_5) == pytest.approx((41.5, 98.5))
    assert (spread.min, spread.max) == (40.0, 100.0)
    assert spread.ci95 == pytest.approx(1.96 * std / 2)  # the CI of the mean, for contrast
    population = single_task_spread([40.0, 60.0, 80.0, 100.0], ddof=0)
    assert population.std == pytest.approx(math.sqrt(500))
    one = single_task_spread([55.0])
    assert one.mean == 55.0 and math.isnan(one.std) and math.isnan(one.low)
    with pytest.raises(ValueError, match="at least one task"):
        single_task_spread([])


def test_durations_read_in_the_papers_units() -> None:
    assert duration(13.3 * 3600) == "13.3 h" and duration(90) == "1.5 min"
    assert duration(2.25) == "2.25 s" and duration(0.01234) == "0.0123 s"
    assert duration(float("nan")) == "n/a"


# --- runs on the committed digits manifests --------------------------------------------------


def evaluate(out: Path, adapter: str, manifest: Path, hpe: str, **config: Any) -> Path:
    from fewtrans_board.registry.lookup import Registry
    from fewtrans_board.registry.manager import get_plugin_manager
    from fewtrans_board.runner.run import run_evaluation
    from fewtrans_board.runner.spec import RunSpec

    registry = Registry.from_plugin_manager(get_plugin_manager(entry_points=False))
    spec = RunSpec(
        model="demo-cnn.digits", adapter=adapter, manifest=str(manifest), hpe=hpe,
        config=config, threads=1, limit=EPISODES,
    )  # fmt: skip
    run_evaluation(spec, registry, out, progress=False)
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Linear probe (3x lr at fixed epochs; 5x lr x 3 epochs) and mean-centroid runs."""
    root = tmp_path_factory.mktemp("paper-forms")
    found = {
        "paper": evaluate(root / "paper", "linear-probe", FIXED, "fewtrans-paper", epochs=2),
        "probe": evaluate(root / "a" / "fixed", "linear-probe", FIXED, "fewtrans-reference"),
        "probe-search": evaluate(
            root / "a" / "search", "linear-probe", SEARCH, "fewtrans-reference"
        ),
        "centroid": evaluate(root / "b" / "fixed", "mean-centroid", FIXED, "fewtrans-reference"),
        "centroid-search": evaluate(
            root / "b" / "search", "mean-centroid", SEARCH, "fewtrans-reference"
        ),
    }
    return {**found, "a": root / "a", "b": root / "b"}


def shard_rows(run: Path) -> list[dict[str, Any]]:
    """Every stored row of a run, read with pyarrow alone."""
    tables = [pq.read_table(p) for p in sorted((run / "shards").glob("shard-*.parquet"))]
    return pa.concat_tables(tables).to_pylist()


def manifest_labels(path: Path) -> dict[int, np.ndarray]:
    from fewtrans_board.episodes.manifest import Manifest

    return {
        e.index: np.array([label for _, label in e.query]) for e in Manifest.load(path).episodes()
    }


@pytest.mark.slow
def test_the_single_task_spread_is_the_spread_of_the_stored_task_accuracies(
    runs: dict[str, Path],
) -> None:
    from fewtrans_board.results.load import load_run
    from fewtrans_board.results.summary import paper_forms

    rows = [r for r in shard_rows(runs["probe"]) if r["aggregation"] == "vote"]
    accuracy = np.array([r["accuracy"] for r in sorted(rows, key=lambda r: r["episode"])])
    (spread,) = paper_forms(load_run(runs["probe"]))["single_task"]
    assert spread["shots"] == 1 and spread["tasks"] == EPISODES  # fewtrans-fixed: 5-way 1-shot
    assert spread["mean"] == pytest.approx(accuracy.mean())
    assert spread["std"] == pytest.approx(np.std(accuracy, ddof=1))
    low, high = np.percentile(accuracy, [2.5, 97.5])
    assert (spread["p2_5"], spread["p97_5"]) == pytest.approx((low, high))
    assert spread["high"] - spread["low"] == pytest.approx(2 * 1.96 * np.std(accuracy, ddof=1))


@pytest.mark.slow
def test_table_iii_cells_and_the_lr_ensemble_per_epoch_count(runs: dict[str, Path]) -> None:
    from fewtrans_board.results.grid_table import labels_for
    from fewtrans_board.results.load import load_run
    from fewtrans_board.results.summary import paper_forms

    run = load_run(runs["paper"])
    labels = labels_for(run, [SEARCH, FIXED])
    grid = paper_forms(run, query_labels=labels)["grid"]
    # one learning rate: five points x{1/25..25}; epochs {E/3, 2E/3, E}, E = 2 + 10
    assert [a["field"] for a in grid["lr_axes"]] == ["lr_head"]
    assert grid["group_axes"] == [{"field": "epochs", "values": [4, 8, 12]}]
    rows = [r for r in shard_rows(runs["paper"]) if r["kind"] == "config"]
    truth = manifest_labels(FIXED)
    for group in grid["groups"]:
        epochs = group["values"]["epochs"]
        cells = group["cells"]
        assert [c["label"] for c in cells] == ["(1)", "(2)", "(3)", "(4)", "(5)"]
        members = [r for r in rows if json.loads(r["config"])["epochs"] == epochs]
        rates = sorted({json.loads(r["config"])["lr_head"] for r in members})
        for cell, rate in zip(cells, rates, strict=True):
            mine = [r["accuracy"] for r in members if json.loads(r["config"])["lr_head"] == rate]
            assert cell["mean"] == pytest.approx(np.mean(mine))
        assert group["average"] == pytest.approx(np.mean([c["mean"] for c in cells]))
        hits = []
        for episode in sorted({r["episode"] for r in members}):
            mine = [r for r in members if r["episode"] == episode]
            logits = np.mean(
                [np.array(r["logits"], dtype=np.float64).reshape(-1, r["n_way"]) for r in mine],
                axis=0,
            )  # FewTrans Eq. 1: the average of the members' logits
            hits.append(100.0 * np.mean(logits.argmax(axis=1) == truth[episode]))
        assert group["lr_ensemble"] == pytest.approx(np.mean(hits))
    stored = [r["accuracy"] for r in shard_rows(runs["paper"]) if r["aggregation"] == "logit-mean"]
    assert grid["hpe"] == pytest.approx(np.mean(stored))  # the lr+epoch ensemble
    assert paper_forms(run)["grid"]["groups"][0]["lr_ensemble"] is None  # no labels, no ensemble
    assert "--manifest" in paper_forms(run)["grid"]["note"]


@pytest.mark.slow
def test_a_fixed_epoch_grid_s_lr_ensemble_is_its_stored_vote(runs: dict[str, Path]) -> None:
    from fewtrans_board.results.grid_table import labels_for
    from fewtrans_board.results.load import load_run
    from fewtrans_board.results.summary import paper_forms

    run = load_run(runs["probe"])
    (group,) = paper_forms(run, query_labels=labels_for(run, [FIXED]))["grid"]["groups"]
    stored = [r["accuracy"] for r in shard_rows(runs["probe"]) if r["aggregation"] == "vote"]
    assert group["values"] == {} and len(group["cells"]) == 3
    assert group["lr_ensemble"] == pytest.approx(np.mean(stored), abs=1e-12)


@pytest.mark.slow
def test_time_per_600_tasks_is_the_rows_seconds_scaled(runs: dict[str, Path], invoke) -> None:  # type: ignore[no-untyped-def]
    from fewtrans_board.results.load import load_run
    from fewtrans_board.results.summary import paper_forms

    rows = [r for r in shard_rows(runs["paper"]) if r["kind"] == "config" and r["split"] == "base"]
    total = sum(float(r["seconds"]) for r in rows)
    cost = paper_forms(load_run(runs["paper"]))["cost"]
    assert cost["tasks"] == EPISODES and cost["scaled"] and cost["tasks_reported"] == PAPER_TASKS
    assert cost["seconds"] == pytest.approx(total, rel=1e-6)
    assert cost["seconds_reported"] == pytest.approx(total / EPISODES * PAPER_TASKS, rel=1e-6)
    args = ["results", "summary", str(runs["paper"]), "--cost", "--spread", "--grid"]
    text = invoke([*args, "--manifest", str(FIXED)]).output
    assert f"(scaled from {EPISODES} tasks)" in text and "total time (600 tasks)" in text
    assert "FewTrans Fig. 1" in text and "lr ensemble" in text and "(5)" in text
    assert "FewTrans Table III" in text and "FewTrans Table IX" in text


@pytest.mark.slow
def test_compare_prints_the_raw_paired_p_and_holm_apart(runs: dict[str, Path], invoke) -> None:  # type: ignore[no-untyped-def]
    from fewtrans_board.results.load import load_run

    report = json.loads(invoke(["compare", str(runs["a"]), str(runs["b"]), "--json"]).output)
    raw = []
    for name in ("probe", "probe-search"):
        a = load_run(runs[name]).aggregations()["hpe"]
        b = load_run(runs[name.replace("probe", "centroid")]).aggregations()["hpe"]
        raw.append(float(scipy.stats.ttest_rel(a, b).pvalue))
    got = sorted(r["t_p"] for r in report["datasets"])
    assert got == pytest.approx(sorted(raw), rel=1e-9)
    low, high = sorted(raw)  # Holm over two p-values: 2 p_(1), then max(that, p_(2)), capped at 1
    adjusted = {low: min(1.0, 2 * low), high: max(min(1.0, 2 * low), high)}
    for row in report["datasets"]:
        nearest = min(adjusted, key=lambda p: abs(p - row["t_p"]))
        assert row["t_p_holm"] == pytest.approx(adjusted[nearest], rel=1e-9)
    text = invoke(["compare", str(runs["a"]), str(runs["b"])]).output
    assert "p (t)" in text and "p (t, Holm)" in text and "FewTrans Table VIII" in text
    for row in report["datasets"]:
        assert f"{row['t_p']:.4g}" in text  # the paper's form: the raw p of each dataset


# --- Fig. 6 with fewer than three datasets --------------------------------------------------


def fake_run(adapter: str, dataset: str, accuracy: list[float]) -> Any:
    """What zipf reads of a run: its model, adapter, dataset, path and HPE accuracies."""
    provenance = SimpleNamespace(
        model=SimpleNamespace(name="demo-clip.digits"), adapter=SimpleNamespace(name=adapter)
    )
    return SimpleNamespace(
        provenance=provenance,
        dataset=dataset,
        path=Path(f"runs/{dataset}/{adapter}"),
        aggregations=lambda: {"hpe": np.array(accuracy)},
    )


def test_zipf_reports_one_dataset_s_point_and_no_correlation() -> None:
    from fewtrans_board.analysis.zipf import MIN_DATASETS, adjusted_zipf, zipf_report
    from fewtrans_board.datasets.digits import DIGITS

    runs = [
        fake_run("finetune-clip-both", "digits", [80.0, 90.0]),
        fake_run("zero-shot-clip", "digits", [50.0, 70.0]),
    ]
    data, svg = zipf_report(runs, {"digits": DIGITS})
    (point,) = data["points"]
    assert point["gain"] == pytest.approx(85.0 - 60.0)
    names = DIGITS.names_of(DIGITS.split.base)
    assert point["zipf"]["mean"] == pytest.approx(np.mean([adjusted_zipf(n) for n in names]))
    assert MIN_DATASETS == 3 and math.isnan(data["spearman"]["coefficient"])
    assert "at least 3 datasets" in data["note"] and svg.startswith("<svg")
    with pytest.raises(FewtransError, match="at least one dataset"):
        zipf_report(runs[:1], {"digits": DIGITS})
