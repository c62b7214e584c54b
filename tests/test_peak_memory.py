"""Peak memory per shard (FewTrans Table IX): measured, recorded as typed provenance, summarised.

Oracles: a block that touches a known number of bytes must show at least that growth; the
CUDA fold is checked against a fake allocator; the summary's peak is recomputed from the
shard metadata read with pyarrow.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch
from click.testing import CliRunner

from fewtrans_board.cli import make_cli
from fewtrans_board.core.errors import SubmissionError
from fewtrans_board.registry.manager import get_plugin_manager
from fewtrans_board.results.documents import RunProvenance
from fewtrans_board.results.load import load_run
from fewtrans_board.results.row_schema import METADATA_KEY
from fewtrans_board.results.summary import summarize
from fewtrans_board.runner.worker import memory
from fewtrans_board.runner.worker.memory import PeakMemory, folded_cuda_resets
from tests.conftest import REPO, VARIED_DIGITS

MIB = 2**20


def _invoke(args: list[str]) -> tuple[int, str]:
    cli = make_cli(get_plugin_manager(entry_points=False))
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    return result.exit_code, result.output


def _resettable() -> bool:
    return memory._reset_rss_high_water()


@pytest.mark.skipif(not _resettable(), reason="needs Linux's resettable VmHWM")
def test_cpu_peak_is_the_resident_high_water_mark_of_the_block() -> None:
    import mmap

    with PeakMemory("cpu") as probe:
        # 64 MiB of fresh pages, every one touched. A malloc'd block can reuse free pages a
        # long-lived process already holds resident (seen in a test worker at 1.7 GB RSS,
        # where the mark then did not move); an anonymous mapping cannot.
        block = mmap.mmap(-1, 64 * MIB)
        for offset in range(0, 64 * MIB, mmap.PAGESIZE):
            block[offset] = 1
        block.close()
    record = probe.record()
    assert record is not None and record["measure"] == "rss-high-water"
    assert record["bytes"] - record["baseline_bytes"] >= 60 * MIB
    # The mark is reset at the start of every measurement: a quiet block shows no such growth.
    with PeakMemory("cpu") as quiet:
        pass
    record = quiet.record()
    assert record is not None and record["bytes"] - record["baseline_bytes"] < 32 * MIB


def test_episode_processes_report_their_peaks() -> None:
    with PeakMemory("cpu", in_process=False) as probe:
        for peak in (5 * MIB, 9 * MIB, 7 * MIB):
            probe.observe(peak)
    assert probe.record() == {
        "bytes": 9 * MIB,
        "measure": "episode-process-rss-high-water",
        "device": "cpu",
    }
    with PeakMemory("cuda:0", in_process=False) as silent:  # nothing reported, nothing recorded
        pass
    assert silent.record() is None


def test_cuda_resets_inside_a_shard_are_folded_in(monkeypatch: pytest.MonkeyPatch) -> None:
    allocator = {"peak": 0}

    def reset(device: object = None) -> None:
        allocator["peak"] = 0

    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", reset)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: allocator["peak"])
    with folded_cuda_resets("cuda:0") as seen:
        allocator["peak"] = 300  # e.g. a large episode
        torch.cuda.reset_peak_memory_stats("cuda:0")  # lockstep's memory probe
        allocator["peak"] = 100
    assert seen[0] == 300 and allocator["peak"] == 100
    assert torch.cuda.reset_peak_memory_stats is reset  # restored


def _shard_metas(run: Path) -> list[dict]:  # type: ignore[type-arg]
    metas = []
    for shard in sorted((run / "shards").glob("*.parquet")):
        metadata = pq.read_schema(shard).metadata
        metas.append(json.loads(metadata[METADATA_KEY]))
    return metas


@pytest.mark.skipif(not _resettable(), reason="needs Linux's resettable VmHWM")
def test_evaluate_records_peak_memory_per_shard_and_the_summary_shows_it(tmp_path: Path) -> None:
    out = tmp_path / "run"
    code, output = _invoke(
        ["evaluate", "--model", "demo-cnn.digits", "--adapter", "mean-centroid", "--manifest",
         str(VARIED_DIGITS), "--limit", "4", "--shards", "2", "--hpe", "fewtrans-reference",
         "--device", "cpu", "--quiet", "--out", str(out)]
    )  # fmt: skip
    assert code == 0, output
    metas = _shard_metas(out)
    assert len(metas) == 2
    for meta in metas:
        peak = RunProvenance.from_json(meta, "shard").shard.peak_memory  # typed
        assert peak is not None and peak.measure == "rss-high-water" and peak.device == "cpu"
        assert peak.baseline_bytes is not None and peak.bytes >= peak.baseline_bytes > 0
        assert peak.growth_bytes == peak.bytes - peak.baseline_bytes
    summary = summarize(load_run(out))
    largest = max(m["shard"]["peak_memory"]["bytes"] for m in metas)
    assert summary["peak_memory"]["bytes"] == largest
    assert summary["peak_memory"]["shards_measured"] == summary["peak_memory"]["shards"] == 2
    code, output = _invoke(["results", "summary", str(out)])
    assert code == 0 and "peak memory" in output and "rss-high-water" in output, output
    code, output = _invoke(["results", "summary", str(out), "--json"])
    assert json.loads(output)[0]["peak_memory"]["mib"] == pytest.approx(largest / MIB)


def test_runs_from_before_peaks_were_measured_keep_their_summary() -> None:
    # A committed entry evaluated before shards recorded their peak (newer ones do).
    entry = REPO / "leaderboard" / "results" / "mean-centroid--demo-cnn"
    stored = next(entry.rglob("run.json")).parent
    run = load_run(stored)
    assert all("peak_memory" not in m["shard"] for m in run.shard_meta)
    assert "peak_memory" not in summarize(run)


def test_a_malformed_peak_is_refused_by_the_provenance_shape(tmp_path: Path) -> None:
    stored = next((REPO / "leaderboard" / "results").rglob("run.json")).parent
    meta = load_run(stored).meta
    for bad in ({"bytes": -1, "measure": "rss-high-water"}, {"measure": "x"}, "12 MiB"):
        broken = {**meta, "shard": {**meta["shard"], "peak_memory": bad}}
        with pytest.raises(SubmissionError, match="peak_memory"):
            RunProvenance.from_json(broken, "shard")


@pytest.mark.slow
def test_a_worker_run_records_its_episode_processes_peak(tmp_path: Path) -> None:
    out = tmp_path / "run"
    code, output = _invoke(
        ["evaluate", "--model", "demo-cnn.digits", "--adapter", "mean-centroid", "--manifest",
         str(VARIED_DIGITS), "--limit", "2", "--hpe", "fewtrans-reference", "--device", "cpu",
         "--isolation", "process", "--quiet", "--out", str(out)]
    )  # fmt: skip
    assert code == 0, output
    (meta,) = _shard_metas(out)
    peak = RunProvenance.from_json(meta, "shard").shard.peak_memory
    assert peak is not None and peak.measure == "episode-process-rss-high-water"
    assert peak.bytes > 0 and peak.baseline_bytes is None and peak.growth_bytes is None
