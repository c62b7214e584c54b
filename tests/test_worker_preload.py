"""What the plugin worker's zygote imports before it forks episode processes, and which
runs share a worker."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest

from fewtrans_board.core.sandbox import Isolation
from fewtrans_board.runner.worker.isolated import PluginWorker, stop_idle_workers
from fewtrans_board.runner.worker.messages import WorkerSettings

PREPARE = """
import json, sys
from fewtrans_board.runner.worker.serve import _configure, _prepare_adapter
settings = json.loads(sys.argv[1])
_configure(settings)
for session in json.loads(sys.argv[2]):
    _prepare_adapter({**settings, **session})
print(json.dumps(sorted(m for m in ("torch._dynamo", "torch.optim") if m in sys.modules)))
"""


def preloaded_by(sessions: list[dict[str, object]]) -> list[str]:
    settings = {"model": "demo-cnn.digits", "plugin_paths": []}
    done = subprocess.run(
        [sys.executable, "-I", "-c", PREPARE, json.dumps(settings), json.dumps(sessions)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.slow  # a Python process per case
@pytest.mark.parametrize("training_free", [True, False])
def test_only_a_zygote_for_an_adapter_that_trains_preloads_the_optimiser_compiler(
    training_free: bool,
) -> None:
    # torch.optim imports torch._dynamo at an optimiser's first step (seconds per forked
    # episode unless the zygote has it); a training-free adapter's step is trapped first, so
    # a zygote that serves only such adapters must not spend those seconds.
    loaded = preloaded_by([{"adapter": "prototypes", "training_free": training_free}])
    assert "torch.optim" in loaded
    assert ("torch._dynamo" in loaded) is not training_free


def worker_pid(settings: WorkerSettings) -> tuple[int, str]:
    with PluginWorker(settings) as worker:
        assert worker.info is not None and worker.info.load_error is None
        assert worker._process is not None
        return worker._process.pid, str(worker.info.schema["name"])


@pytest.mark.slow  # plugin workers
def test_runs_of_other_adapters_on_the_same_plugins_and_model_share_one_worker() -> None:
    stop_idle_workers()
    free = WorkerSettings(
        model="demo-cnn.digits",
        adapter="mean-centroid",
        training_free=True,
        isolation=Isolation.PROCESS,
    )
    first, name = worker_pid(free)
    assert name == "mean-centroid"
    # Another adapter (one that trains): the idle worker serves it, with its own adapter.
    trains = dataclasses.replace(free, adapter="linear-probe", training_free=False)
    assert worker_pid(trains) == (first, "linear-probe")
    # Control: another model is another worker.
    other = dataclasses.replace(free, model="demo-cnn.random")
    assert worker_pid(other)[0] != first
    stop_idle_workers()
