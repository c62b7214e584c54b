"""Runner and results: oracle recomputations, resume, bad input, executors (kill -9: test_integrity_runs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from fewtrans_board.episodes.manifest import Manifest
from fewtrans_board.hpe.aggregate import vote
from fewtrans_board.registry.manager import get_plugin_manager
from fewtrans_board.results.load import load_run
from fewtrans_board.results.row_schema import METADATA_KEY

ROOT = Path(__file__).resolve().parents[1]
DIGITS = ROOT / "leaderboard" / "manifests" / "fewtrans-varied--digits.parquet"


def evaluate_args(out: Path, adapter: str = "linear-probe", *extra: str) -> list[str]:
    return [
        "evaluate",
        "--model",
        "demo-cnn.digits",
        "--adapter",
        adapter,
        "--manifest",
        str(DIGITS),
        "--out",
        str(out),
        "--device",
        "cpu",
        "--quiet",
        *(() if "--hpe" in extra else ("--hpe", "fewtrans-paper")),  # the grid tests count
        *extra,
    ]


def bad_pm():  # type: ignore[no-untyped-def]
    from tests.plugins import bad_adapters

    return get_plugin_manager(entry_points=False, extra_plugins={"bad": bad_adapters})


def table_without_timing(out: Path) -> list[dict[str, object]]:
    rows = load_run(out).table.drop(["seconds"]).to_pylist()
    return sorted(rows, key=lambda r: (r["episode"], r["config_index"], r["aggregation"]))


@pytest.fixture(scope="module")
def linear_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from click.testing import CliRunner

    from fewtrans_board.cli import make_cli

    out = tmp_path_factory.mktemp("run") / "linear"
    result = CliRunner().invoke(
        make_cli(get_plugin_manager(entry_points=False)),
        evaluate_args(out, "linear-probe", "--limit", "6", "--shards", "2"),
    )
    assert result.exit_code == 0, result.output
    return out


@pytest.mark.slow
def test_ensembles_recomputed_from_stored_logits(linear_run: Path) -> None:
    run = load_run(linear_run)
    rows = run.table.to_pylist()
    manifest = Manifest.load(DIGITS)
    for episode in manifest.episodes()[:6]:
        labels = np.array([label for _, label in episode.query])
        config_rows = sorted(
            (r for r in rows if r["episode"] == episode.index and r["kind"] == "config"),
            key=lambda r: r["config_index"],
        )
        assert len(config_rows) == 15
        logits = np.stack(
            [
                np.array(r["logits"], dtype=np.float16).reshape(len(labels), episode.ways)
                for r in config_rows
            ]
        )
        ensembles = {
            r["aggregation"]: r
            for r in rows
            if r["episode"] == episode.index and r["kind"] == "ensemble"
        }
        mean_prediction = logits.astype(np.float32).mean(axis=0).argmax(axis=1)
        assert ensembles["logit-mean"]["predictions"] == mean_prediction.tolist()
        member_predictions = np.array([r["predictions"] for r in config_rows])
        counts = np.stack(
            [(member_predictions == c).sum(axis=0) for c in range(episode.ways)], axis=1
        )
        assert (
            ensembles["vote"]["predictions"] == counts.argmax(axis=1).tolist()
        )  # ties: lowest class
        for row in [*config_rows, *ensembles.values()]:
            accuracy = 100.0 * float(np.mean(np.array(row["predictions"]) == labels))
            assert row["accuracy"] == pytest.approx(accuracy, abs=1e-12)


def test_vote_tie_rule_is_lowest_class() -> None:
    predictions = np.array([[2, 0, 1], [1, 0, 2], [0, 1, 1]])
    # query 0: 2,1,0 tie -> 0; query 1: 0,0,1 -> 0; query 2: 1,2,1 -> 1
    assert vote(predictions, 3).tolist() == [0, 0, 1]


def test_provenance_metadata(linear_run: Path) -> None:
    shard = sorted((linear_run / "shards").glob("shard-*.parquet"))[0]
    meta = json.loads(pq.read_schema(shard).metadata[METADATA_KEY])
    assert meta["manifest"]["sha256"] == Manifest.load(DIGITS).sha256
    assert meta["package"]["name"] == "fewtrans-board"
    assert meta["adapter"]["distribution"] == "fewtrans-board" and meta["adapter"]["version"]
    assert meta["model"]["weights_id"].startswith("sha256:")
    assert meta["hpe"]["name"] == "fewtrans-paper" and len(meta["hpe"]["hash"]) == 64
    assert meta["preprocessing"]["name"] == "fewtrans" and meta["preprocessing"]["image_size"] == 32
    assert {"torch", "device", "python"} <= set(meta["environment"]) and meta["created_at"]
    assert meta["shard"] == {**meta["shard"], "index": 0, "count": 2}


def test_summary_command(linear_run: Path, invoke) -> None:  # type: ignore[no-untyped-def]
    summary = json.loads(invoke(["results", "summary", str(linear_run), "--json"]).output)[0]
    hpe = load_run(linear_run).aggregations()["hpe"]
    assert summary["aggregations"]["hpe"]["mean"] == pytest.approx(hpe.mean())
    ci = 1.96 * hpe.std(ddof=1) / np.sqrt(len(hpe))
    assert summary["aggregations"]["hpe"]["ci95"] == pytest.approx(ci)
    assert summary["episodes"] == 6 and summary["configurations"] == 15 and summary["complete"]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["bscd-5w5s--bscd-eurosat.parquet", "renamed.parquet"])
def test_summary_takes_ddof_from_the_sub_benchmark(tmp_path: Path, invoke, name: str) -> None:  # type: ignore[no-untyped-def]
    # A BSCD-FSL run (recognised by its frozen file name, else by its sampling protocol)
    # is summarised with the population std, as the index and the site do.
    manifest = tmp_path / name
    build = ["manifest", "build", "--protocol", "bscd", "--dataset", "digits", "--episodes", "4"]
    assert invoke([*build, "--out", str(manifest)]).exit_code == 0
    out = tmp_path / "run"
    args = evaluate_args(out, "mean-centroid")
    args[args.index(str(DIGITS))] = str(manifest)
    evaluated = json.loads(invoke([a for a in args if a != "--quiet"] + ["--json"]).output)[
        "summary"
    ]
    summary = json.loads(invoke(["results", "summary", str(out), "--json"]).output)[0]
    hpe = load_run(out).aggregations()["hpe"]
    for stats in (summary["aggregations"]["hpe"], evaluated["aggregations"]["hpe"]):
        assert stats["ddof"] == 0
        assert stats["ci95"] == pytest.approx(1.96 * hpe.std(ddof=0) / np.sqrt(len(hpe)))
    forced = json.loads(invoke(["results", "summary", str(out), "--ddof", "1", "--json"]).output)
    assert forced[0]["aggregations"]["hpe"]["ddof"] == 1


@pytest.mark.slow
def test_resume_skips_finished_shards_and_matches_fresh_run(tmp_path: Path, invoke) -> None:  # type: ignore[no-untyped-def]
    pm = get_plugin_manager(entry_points=False)
    out = tmp_path / "resumed"
    assert (
        invoke(
            evaluate_args(out, "mean-centroid", "--limit", "6", "--shard", "1/3"), pm=pm
        ).exit_code
        == 0
    )
    assert [p.name for p in sorted((out / "shards").glob("*.parquet"))] == [
        "shard-00001-of-00003.parquet"
    ]
    result = invoke(
        [*evaluate_args(out, "mean-centroid", "--limit", "6", "--shards", "3"), "--json"], pm=pm
    )
    report = json.loads(result.output)["report"]
    assert report["shards_skipped"] == [1] and report["shards_run"] == [0, 2]
    fresh = tmp_path / "fresh"
    invoke(evaluate_args(fresh, "mean-centroid", "--limit", "6", "--shards", "3"), pm=pm)
    assert table_without_timing(out) == table_without_timing(fresh)


def test_other_run_in_same_folder_is_refused(linear_run: Path, invoke) -> None:  # type: ignore[no-untyped-def]
    result = invoke(
        evaluate_args(linear_run, "cosine-classifier", "--limit", "6", "--shards", "2"),
        pm=get_plugin_manager(entry_points=False),
    )
    assert result.exit_code == 1 and "different run" in result.output and "adapter" in result.output


NON_FINITE = "adapter returned non-finite logits"
BAD_SHAPE = "adapter returned logits of shape"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("adapter", "where", "problem", "not_problem"),
    [
        ("nan-late", "episode 3 (stream 603), configuration 0", NON_FINITE, BAD_SHAPE),
        ("wrong-shape", "episode 0 (stream 600), configuration 0", BAD_SHAPE, NON_FINITE),
    ],
)
def test_bad_logits_name_episode_and_configuration(
    tmp_path: Path, invoke, adapter: str, where: str, problem: str, not_problem: str
) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / adapter
    result = invoke(evaluate_args(out, adapter, "--limit", "6", "--shards", "3"), pm=bad_pm())
    assert result.exit_code == 1 and where in result.output
    # Each fault gets its own diagnosis, never the other one's.
    assert problem in result.output and not_problem not in result.output
    if adapter == "wrong-shape":
        # The bad adapter returns one column too many for episode 0 of the manifest.
        episode = Manifest.load(DIGITS).episodes()[0]
        n, ways = len(episode.query), episode.ways
        assert f"of shape ({n}, {ways + 1}), expected ({n}, {ways})" in result.output
    shards = sorted(p.name for p in (out / "shards").glob("*.parquet"))
    if adapter == "nan-late":
        assert shards == ["shard-00000-of-00003.parquet"]  # the finished shard is intact
        assert load_run(out).table.num_rows > 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "demo-cnn.digit"], "Did you mean 'demo-cnn.digits'"),
        (["--adapter", "linear-prob"], "Did you mean 'linear-probe'"),
        (["--protocol", "fewtrans-papr"], "unknown HPE protocol"),
        (["--config", "lr_headd=1"], "unknown option(s) lr_headd"),
        (["--model", "timm:"], "argument must be non-empty"),
    ],
)
def test_bad_names_fail_clearly(tmp_path: Path, invoke, args: list[str], message: str) -> None:  # type: ignore[no-untyped-def]
    base = {
        "--model": "demo-cnn.digits",
        "--adapter": "linear-probe",
        "--protocol": "fewtrans-paper",
    }
    base.update(dict(zip(args[::2], args[1::2], strict=True)))
    flat = [x for kv in base.items() for x in kv]
    cli = [
        "evaluate",
        *flat,
        "--manifest",
        str(DIGITS),
        "--out",
        str(tmp_path / "o"),
        "--quiet",
        "--limit",
        "2",
    ]
    result = invoke(cli, pm=get_plugin_manager(entry_points=False))
    assert result.exit_code != 0 and message in result.output


@pytest.mark.slow
def test_manifest_not_matching_dataset_copy(tmp_path: Path, invoke, datasets_registry) -> None:  # type: ignore[no-untyped-def]
    from fewtrans_board.datasets.synthetic import write_synthetic_copy

    pm = get_plugin_manager(entry_points=False)
    root = tmp_path / "eurosat"
    write_synthetic_copy(datasets_registry["eurosat"], root, 12, image_size=8)
    manifest = tmp_path / "m.parquet"
    invoke(
        [
            "manifest",
            "build",
            "--protocol",
            "fewtrans-fixed",
            "--dataset",
            "eurosat",
            "--root",
            str(root),
            "--ways",
            "3",
            "--shots",
            "2",
            "--queries",
            "3",
            "--episodes",
            "4",
            "--out",
            str(manifest),
        ],
        pm=pm,
    )
    first = Manifest.load(manifest).rows["item"][0]
    (root / first).unlink()
    result = invoke(
        [
            "evaluate",
            "--model",
            "demo-cnn.random",
            "--adapter",
            "mean-centroid",
            "--manifest",
            str(manifest),
            "--root",
            str(root),
            "--out",
            str(tmp_path / "o"),
            "--quiet",
        ],
        pm=pm,
    )
    assert (
        result.exit_code == 1
        and "does not match manifest" in result.output
        and first in result.output
    )


@pytest.mark.slow
def test_evaluate_on_a_synthetic_folder_dataset(tmp_path: Path, invoke, datasets_registry) -> None:  # type: ignore[no-untyped-def]
    from fewtrans_board.datasets.synthetic import write_synthetic_copy

    pm = get_plugin_manager(entry_points=False)
    root = tmp_path / "dtd"
    write_synthetic_copy(
        datasets_registry["dtd"], root, [4 + i % 3 for i in range(47)], image_size=8
    )
    manifest = tmp_path / "m.parquet"
    invoke(
        [
            "manifest",
            "build",
            "--protocol",
            "fewtrans-varied",
            "--dataset",
            "dtd",
            "--root",
            str(root),
            "--episodes",
            "3",
            "--out",
            str(manifest),
        ],
        pm=pm,
    )
    out = tmp_path / "o"
    result = invoke(
        [
            "evaluate",
            "--model",
            "demo-cnn.random",
            "--adapter",
            "mean-centroid",
            "--manifest",
            str(manifest),
            "--root",
            str(root),
            "--out",
            str(out),
            "--quiet",
            "--json",
        ],
        pm=pm,
    )
    summary = json.loads(result.output)["summary"]
    assert summary["dataset"] == "dtd" and summary["episodes"] == 3


@pytest.mark.slow
def test_process_executor_matches_inline(tmp_path: Path, invoke) -> None:  # type: ignore[no-untyped-def]
    pm = get_plugin_manager(entry_points=False)
    inline, pooled = tmp_path / "inline", tmp_path / "pooled"
    # Default thread counts: equal across executors, so the runs are one run (same run_id).
    invoke(evaluate_args(inline, "cosine-classifier", "--limit", "4", "--shards", "2"), pm=pm)
    result = invoke(
        evaluate_args(
            pooled,
            "cosine-classifier",
            "--limit",
            "4",
            "--shards",
            "2",
            "--executor",
            "process",
            "--workers",
            "2",
        ),
        pm=pm,
    )
    assert result.exit_code == 0, result.output
    assert table_without_timing(inline) == table_without_timing(pooled)
    assert load_run(inline).meta["run_id"] == load_run(pooled).meta["run_id"]


@pytest.mark.slow
def test_process_workers_load_only_the_callers_plugins(  # type: ignore[no-untyped-def]
    tmp_path: Path, invoke, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.conftest import installed_distribution
    from tests.plugins.import_marker import MARKER_ENV

    marker = tmp_path / "imported-by.txt"
    monkeypatch.setenv(MARKER_ENV, str(marker))
    # One pool worker computes both shards: it is a spawned process like any other, and a
    # second one would only import torch and the plugins again.
    pooled = ("--limit", "2", "--shards", "2", "--executor", "process", "--workers", "1")

    def importers() -> set[str]:
        """Processes other than this one that imported the plugin (the workers)."""
        lines = marker.read_text().split() if marker.exists() else []
        return set(lines) - {str(os.getpid())}

    module = "tests.plugins.import_marker"
    with installed_distribution(tmp_path / "dist", "fewtrans-marker", "0.1", module):
        result = invoke(
            evaluate_args(tmp_path / "without", "mean-centroid", *pooled),
            pm=get_plugin_manager(allow=["fewtrans-example"]),  # installed, allowed; not it
        )
        assert result.exit_code == 0, result.output
        assert importers() == set(), "a worker loaded a plugin the caller's allow-list excludes"

        result = invoke(
            evaluate_args(tmp_path / "with", "marked-centroid", *pooled),
            pm=get_plugin_manager(allow=["fewtrans-marker"]),
        )
        assert result.exit_code == 0, result.output
        assert importers(), "the workers ran the plugin's adapter without importing it?"
        assert load_run(tmp_path / "with").meta["adapter"]["name"] == "marked-centroid"


@pytest.mark.slow
def test_an_in_process_plugin_object_is_refused_before_any_pool(tmp_path: Path, invoke) -> None:  # type: ignore[no-untyped-def]
    from tests.conftest import CentroidAdapter, adapter_plugin

    pm = get_plugin_manager(
        entry_points=False, extra_plugins={"local": adapter_plugin(CentroidAdapter)}
    )
    out = tmp_path / "pooled"
    args = ("--limit", "2", "--shards", "2", "--executor", "process", "--workers", "2")
    result = invoke(evaluate_args(out, "test-centroid", *args), pm=pm)
    assert result.exit_code == 1
    assert "plugin 'local'" in result.output and "inline executor" in result.output
    assert "Traceback" not in result.output and not out.exists()
    inline = invoke(evaluate_args(out, "test-centroid", "--limit", "2", "--shards", "2"), pm=pm)
    assert inline.exit_code == 0, inline.output


@pytest.mark.slow
def test_ray_executor_matches_inline(tmp_path: Path, invoke) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("ray")
    pm = get_plugin_manager(entry_points=False)
    inline, distributed = tmp_path / "inline", tmp_path / "ray"
    invoke(
        evaluate_args(inline, "linear-probe", "--limit", "4", "--shards", "2", "--threads", "1"),
        pm=pm,
    )
    result = invoke(
        evaluate_args(
            distributed,
            "linear-probe",
            "--limit",
            "4",
            "--shards",
            "2",
            "--threads",
            "1",
            "--executor",
            "ray",
            "--workers",
            "2",
        ),
        pm=pm,
    )
    assert result.exit_code == 0, result.output
    assert table_without_timing(inline) == table_without_timing(distributed)


def _evaluate_stderr(out: Path, *, terminal: bool) -> str:
    """Run ``evaluate`` (progress on) in a subprocess; stderr a pipe or a pseudo-terminal."""
    import fcntl
    import pty
    import struct
    import termios

    args = evaluate_args(out, "mean-centroid", "--limit", "3")
    args.remove("--quiet")
    command = [sys.executable, "-m", "fewtrans_board", *args]
    if not terminal:
        done = subprocess.run(command, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        return done.stderr
    leader, follower = pty.openpty()
    # A new pseudo-terminal is 0 columns wide, which tqdm would fill with an empty bar.
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))
    try:
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=follower)
        os.close(follower)
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # the terminal closes when the child exits
                break
            if not chunk:
                break
            chunks.append(chunk)
        assert process.wait(timeout=300) == 0
    finally:
        os.close(leader)
    return b"".join(chunks).decode(errors="replace")


@pytest.mark.slow
def test_progress_bars_only_on_a_terminal(tmp_path: Path) -> None:
    # A CI log (stderr not a terminal) gets no redrawn bars; an interactive run keeps them.
    logged = _evaluate_stderr(tmp_path / "logged", terminal=False)
    bars = [line for line in logged.splitlines() if not line.startswith("Warning: ")]
    assert not any("episode" in line for line in bars) and "\r" not in logged
    interactive = _evaluate_stderr(tmp_path / "interactive", terminal=True)
    assert "3/3" in interactive and "episode" in interactive
