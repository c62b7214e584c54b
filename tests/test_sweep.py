"""``fewtrans-board sweep``: FewTrans Table I and Fig. 2 from an explicit hyperparameter grid.

Oracles: the grid written out by hand, and the per-episode optima, per-configuration means
and CIs recomputed with numpy from the stored rows (read from the shard files directly).
"""

from __future__ import annotations

import itertools
import json
import math
import shutil
from pathlib import Path

import click
import numpy as np
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from fewtrans_board.cli import make_cli
from fewtrans_board.cli.sweep_cmd import parse_grid_options
from fewtrans_board.core.errors import ConfigError, FewtransError
from fewtrans_board.hpe.protocols import HPE_PROTOCOLS, SWEEP, get_hpe_protocol
from fewtrans_board.methods.adapters.heads import LinearProbeAdapter
from fewtrans_board.registry.manager import get_plugin_manager
from tests.conftest import extra_benchmark

MODEL = ["--model", "demo-cnn.digits", "--device", "cpu", "--threads", "1"]


def _cli() -> click.Group:
    return make_cli(get_plugin_manager(entry_points=False))


def _invoke(args: list[str]) -> tuple[int, str]:
    result = CliRunner().invoke(_cli(), args, catch_exceptions=False)
    return result.exit_code, result.output


@pytest.fixture(scope="module")
def manifest(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sweep-manifest") / "sweep-digits.parquet"
    code, output = _invoke(
        ["manifest", "build", "--protocol", "fewtrans-fixed", "--dataset", "digits", "--ways",
         "3", "--shots", "2", "--queries", "3", "--episodes", "4", "--seed", "0", "--out",
         str(path)]
    )  # fmt: skip
    assert code == 0, output
    return path


def _stored_matrix(run: Path) -> tuple[np.ndarray, np.ndarray, list[dict]]:  # type: ignore[type-arg]
    """Per-episode accuracy of every configuration, read from the shard files with pyarrow."""
    rows = []
    for shard in sorted((run / "shards").glob("shard-*.parquet")):
        rows += pq.read_table(shard).to_pylist()
    config_rows = [r for r in rows if r["kind"] == "config"]
    episodes = sorted({r["episode"] for r in config_rows})
    count = max(r["config_index"] for r in config_rows) + 1
    matrix = np.full((len(episodes), count), np.nan)
    configs: list[dict] = [{}] * count  # type: ignore[type-arg]
    for r in config_rows:
        matrix[episodes.index(r["episode"]), r["config_index"]] = r["accuracy"]
        configs[r["config_index"]] = json.loads(r["config"])
    return np.array(episodes), matrix, configs


# --- the protocol ------------------------------------------------------------------------


def test_grid_option_parses_axes_in_order_with_json_values() -> None:
    axes = parse_grid_options(("lr_head=2e-6,1e-5,5e-5", "epochs=10,20", "normalize=true,false"))
    assert list(axes) == ["lr_head", "epochs", "normalize"]
    assert axes == {
        "lr_head": [2e-06, 1e-05, 5e-05],
        "epochs": [10, 20],
        "normalize": [True, False],
    }
    assert parse_grid_options(("name=a,b",)) == {"name": ["a", "b"]}
    for bad in (("lr_head",), ("=1,2",), ("lr_head=",), ("lr_head=1,,2",), ("a=1", "a=2")):
        with pytest.raises(click.BadParameter):
            parse_grid_options(bad)


def test_sweep_grid_is_the_cartesian_product_of_its_axes() -> None:
    sweep = SWEEP.with_axes({"lr_head": [0.01, 0.05, 0.2], "epochs": [15, 30]})
    grid = sweep.grid(LinearProbeAdapter, LinearProbeAdapter.Config())
    expected = [
        {"lr_head": 0.01, "epochs": 15}, {"lr_head": 0.01, "epochs": 30},
        {"lr_head": 0.05, "epochs": 15}, {"lr_head": 0.05, "epochs": 30},
        {"lr_head": 0.2, "epochs": 15}, {"lr_head": 0.2, "epochs": 30},
    ]  # fmt: skip
    assert [{"lr_head": c.lr_head, "epochs": c.epochs} for c in grid] == expected
    assert all(c.batch_size == 512 for c in grid)  # the centre's other fields
    assert sweep.describe()["axes"] == [["lr_head", [0.01, 0.05, 0.2]], ["epochs", [15, 30]]]
    # Another grid, another digest; the named protocols describe themselves as before.
    other = SWEEP.with_axes({"lr_head": [0.01, 0.05], "epochs": [15, 30]})
    centre = LinearProbeAdapter.Config()
    assert sweep.digest(LinearProbeAdapter, centre) != other.digest(LinearProbeAdapter, centre)
    assert all("axes" not in p.describe() for p in HPE_PROTOCOLS.values())


def test_a_sweep_is_no_leaderboard_protocol() -> None:
    from fewtrans_board.leaderboard.sub_benchmarks import SUB_BENCHMARKS

    assert get_hpe_protocol("sweep") is SWEEP and not SWEEP.leaderboard
    assert "sweep" not in HPE_PROTOCOLS
    assert all("sweep" not in b.hpe_protocols for b in SUB_BENCHMARKS.values())


def test_bad_sweep_axes_are_refused() -> None:
    with pytest.raises(FewtransError, match="repeats"):
        SWEEP.with_axes({"epochs": [10, 10]})
    with pytest.raises(FewtransError, match="no values"):
        SWEEP.with_axes({"epochs": []})
    with pytest.raises(FewtransError, match="at least one axis"):
        SWEEP.with_axes({})
    with pytest.raises(FewtransError, match="not a fewtrans-paper"):
        HPE_PROTOCOLS["fewtrans-paper"].with_axes({"epochs": [1]})
    with pytest.raises(ConfigError, match="unknown option"):
        SWEEP.with_axes({"no_such": [1, 2]}).grid(LinearProbeAdapter, LinearProbeAdapter.Config())
    with pytest.raises(ConfigError, match="twice"):  # 1 and 1.0 are one learning rate
        SWEEP.with_axes({"lr_head": [1, 1.0]}).grid(LinearProbeAdapter, LinearProbeAdapter.Config())


# --- the command -------------------------------------------------------------------------


def test_sweep_command_reports_table_i_and_figure_2_from_the_stored_rows(
    manifest: Path, tmp_path: Path
) -> None:
    out = tmp_path / "sweep"
    args = ["sweep", *MODEL, "--adapter", "linear-probe", "--manifest", str(manifest)]
    args += ["--grid", "lr_head=0.01,0.2", "--grid", "epochs=1,2", "--out", str(out), "--quiet"]
    code, output = _invoke(args)
    assert code == 0, output
    assert "per configuration (FewTrans Fig. 2)" in output
    assert "best configuration per episode (FewTrans Table I)" in output
    record = json.loads((out / "run.json").read_text())
    assert record["identity"]["hpe"] == "sweep"
    hand = [{"lr_head": a, "epochs": e} for a, e in itertools.product((0.01, 0.2), (1, 2))]
    assert [{k: c[k] for k in ("lr_head", "epochs")} for c in record["identity"]["grid"]] == hand
    data = json.loads((out / "sweep.json").read_text())
    assert (out / "sweep.svg").read_text().startswith("<svg")
    episodes, matrix, configs = _stored_matrix(out)
    assert data["fields"] == ["lr_head", "epochs"] and data["episodes"] == 4
    assert [c["config"] for c in data["per_config"]] == hand
    for index, row in enumerate(data["per_config"]):
        column = matrix[:, index]
        assert row["mean"] == pytest.approx(column.mean())
        assert row["ci95"] == pytest.approx(1.96 * column.std(ddof=1) / math.sqrt(len(column)))
    for row, episode in zip(data["per_episode"], episodes, strict=True):
        accuracy = matrix[list(episodes).index(episode)]
        assert row["episode"] == episode and row["accuracy"] == pytest.approx(accuracy.max())
        assert row["best_index"] == int(np.argmax(accuracy))  # first of the tied
        assert row["tied"] == [int(i) for i in np.flatnonzero(accuracy == accuracy.max())]
        assert row["best"] == {k: configs[row["best_index"]][k] for k in ("lr_head", "epochs")}
    optimal = int(np.argmax(matrix.mean(axis=0)))
    assert data["average_optimal"]["index"] == optimal
    assert data["distinct_optima"] == len({int(np.argmax(r)) for r in matrix})
    assert data["provenance"]["inputs"]["run_id"] == record["run_id"]

    # Resumable like evaluate: the same command finds the finished shard and reports the same.
    code, output = _invoke(args)
    assert code == 0 and "0 shard(s) run, 1 already done" in output
    again = json.loads((out / "sweep.json").read_text())
    assert again["per_config"] == data["per_config"]


def test_sweep_refuses_bad_input_in_one_line_and_writes_nothing(
    manifest: Path, tmp_path: Path
) -> None:
    out = tmp_path / "never"
    base = ["sweep", *MODEL, "--manifest", str(manifest), "--out", str(out)]
    for extra in (
        ["--adapter", "linear-probe", "--grid", "no_such_field=1,2"],
        ["--adapter", "linear-probe", "--grid", "lr_head=-1,0.2"],
        ["--adapter", "linear-probe", "--grid", "epochs=1,1"],
        ["--adapter", "linear-probe", "--grid", "epochs"],
        ["--adapter", "no-such-adapter", "--grid", "epochs=1,2"],
    ):
        code, output = _invoke([*base, *extra])
        errors = [line for line in output.splitlines() if line.startswith("Error:")]
        assert code != 0 and len(errors) == 1 and "Traceback" not in output, output
        assert not out.exists()


def test_evaluate_refuses_the_sweep_protocol_without_axes(manifest: Path, tmp_path: Path) -> None:
    code, output = _invoke(
        ["evaluate", *MODEL, "--adapter", "mean-centroid", "--manifest", str(manifest),
         "--hpe", "sweep", "--out", str(tmp_path / "x")]
    )  # fmt: skip
    assert code != 0 and "fewtrans-board sweep --grid" in output
    assert not (tmp_path / "x").exists()


def test_a_sweep_of_a_sub_benchmark_manifest_cannot_be_submitted(
    manifest: Path, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    (store / "manifests").mkdir(parents=True)
    frozen = store / "manifests" / manifest.name
    shutil.copy(manifest, frozen)
    shutil.copy(manifest.with_name(manifest.name + ".sha256"), str(frozen) + ".sha256")
    with extra_benchmark("sweeptest", manifest.name):
        code, output = _invoke(
            ["sweep", *MODEL, "--adapter", "mean-centroid", "--manifest", str(frozen),
             "--grid", "normalize=false,true", "--out", str(tmp_path / "run"), "--quiet"]
        )  # fmt: skip
        assert code == 0, output
        for protocol in ("fewtrans-paper", "sweep"):
            (tmp_path / "meta.toml").write_text(
                '[submission]\nid = "sweep-entry"\nmethod = "Mean centroid"\n'
                'model = "demo-cnn.digits"\nadapter = "mean-centroid"\nbenchmark = "sweeptest"\n'
                f'hpe_protocol = "{protocol}"\nauthors = ["T"]\nhardware = "CPU"\n'
                'plugins = ["fewtrans-board==0.1.0"]\n'
            )
            code, output = _invoke(
                ["submission", "pack", str(tmp_path / "run"), "--meta", str(tmp_path / "meta.toml"),
                 "--out", str(tmp_path / "bundle.zip"), "--leaderboard", str(store)]
            )  # fmt: skip
            assert code != 0 and "protocol-mismatch" in output, output
            assert not (tmp_path / "bundle.zip").exists()
