"""Default torch threads: the cores this process may use, shared among workers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fewtrans_board.core import threads
from tests.conftest import REPO

SEARCH = REPO / "leaderboard" / "manifests" / "fewtrans-search--digits.parquet"


@pytest.mark.parametrize(
    ("files", "limit"),
    [
        ({"cpu.max": "200000 100000\n"}, 2),
        ({"cpu.max": "150000 100000\n"}, 2),
        ({"cpu.max": "max 100000\n"}, None),
        ({"cpu/cpu.cfs_quota_us": "400000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 4),
        ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),
        ({}, None),
    ],
)
def test_cgroup_cpu_quota_is_read(tmp_path: Path, files: dict[str, str], limit: int | None) -> None:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert threads.cgroup_cpu_limit(tmp_path) == limit


def test_a_cpu_quota_caps_the_default_and_workers_share_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(threads.os, "sched_getaffinity", lambda _: set(range(64)))
    monkeypatch.setattr(threads, "cgroup_cpu_limit", lambda: 2)
    assert threads.available_cores() == 2
    assert threads.default_threads() == 2 and threads.default_threads(workers=4) == 1
    monkeypatch.setattr(threads, "cgroup_cpu_limit", lambda: None)
    assert threads.default_threads(workers=4) == 16
    assert threads.replay_threads(128) == 64 and threads.replay_threads(1) == 1
    assert threads.replay_threads(None) == 64


def test_evaluate_defaults_to_one_thread_whatever_the_cores_and_records_it(
    invoke, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    import torch

    from fewtrans_board.registry.manager import get_plugin_manager
    from fewtrans_board.results.shards import read_shard

    # The thread count is part of the run identity: the default must not follow the machine.
    monkeypatch.setattr(threads, "available_cores", lambda: 3)
    before = torch.get_num_threads()
    recorded = {}
    for given in (None, 2):
        args = ["evaluate", "--model", "demo-cnn.digits", "--adapter", "mean-centroid"]
        args += ["--manifest", str(SEARCH), "--limit", "1", "--hpe", "single"]
        args += ["--device", "cpu", "--quiet", "--out", str(tmp_path / f"run-{given}"), "--json"]
        args += ["--threads", str(given)] if given else []
        result = invoke(args, pm=get_plugin_manager(entry_points=False))
        assert result.exit_code == 0, result.output
        assert json.loads(result.output)["report"]["shards_total"] == 1
        shard = next((tmp_path / f"run-{given}" / "shards").glob("*.parquet"))
        recorded[given] = read_shard(shard)[1]["environment"]["torch_threads"]
        assert torch.get_num_threads() == before  # restored after the run
    assert recorded == {None: 1, 2: 2}
