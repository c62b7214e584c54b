"""The plugin worker's sandbox: what plugin code can and cannot see, write and keep.

Each refusal has a control: the same probe outside the sandbox succeeds, so the test would
fail on an unsandboxed worker.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from fewtrans_board.core.sandbox import (
    Isolation,
    Limits,
    sandbox_argv,
    sandbox_problem,
    worker_policy,
)
from fewtrans_board.runner.isolated import PluginWorker
from fewtrans_board.runner.remote import plugin_places
from fewtrans_board.runner.worker_messages import FitRequest, WorkerError, WorkerSettings
from tests.conftest import installed_distribution

needs_sandbox = pytest.mark.skipif(
    sandbox_problem() is not None and not os.environ.get("FEWTRANS_REQUIRE_SANDBOX"),
    reason=f"no sandbox here: {sandbox_problem()} (.ci/run installs bubblewrap)",
)

PROBE = r"""
import json, os, socket, sys
port, planted, package = int(sys.argv[1]), sys.argv[2], sys.argv[3]
found = {}
try:
    socket.create_connection(("127.0.0.1", port), timeout=2).close()
    found["connect"] = "connected"
except OSError as exc:
    found["connect"] = type(exc).__name__
try:
    found["planted"] = open(planted).read()
except OSError as exc:
    found["planted"] = type(exc).__name__
found["processes"] = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
found["parent_cmdline"] = open(f"/proc/{os.getppid()}/cmdline", "rb").read().decode(errors="replace") if os.getppid() else ""
for name, target in (("package", os.path.join(package, "planted.py")), ("prefix", os.path.join(sys.prefix, "planted.py"))):
    try:
        open(target, "w").write("x")
        found[name] = "written"
    except OSError as exc:
        found[name] = type(exc).__name__
found["cwd_files"] = os.listdir(".")
print(json.dumps(found))
"""


@pytest.fixture
def listener() -> Iterator[int]:
    """A TCP server on this machine's loopback, answering one connection at a time."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()

    def serve() -> None:
        while True:
            try:
                connection, _ = server.accept()
            except OSError:
                return
            connection.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    server.close()


def probe(argv: list[str], port: int, planted: Path) -> dict:  # type: ignore[type-arg]
    import fewtrans_board

    package = str(Path(fewtrans_board.__file__).parent)
    done = subprocess.run(
        [*argv, "-c", PROBE, str(port), str(planted), package],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    found: dict = json.loads(done.stdout)  # type: ignore[type-arg]
    for leftover in (Path(package) / "planted.py", Path(sys.prefix) / "planted.py"):
        leftover.unlink(missing_ok=True)
    return found


@pytest.mark.slow
@needs_sandbox
def test_the_sandbox_has_no_network_no_planted_file_and_no_other_process(
    listener: int, tmp_path: Path
) -> None:
    planted = tmp_path / "answers.txt"
    planted.write_text("the labels")
    outside = probe([sys.executable, "-I"], listener, planted)
    assert outside["connect"] == "connected" and outside["planted"] == "the labels"
    own_cmdline = Path("/proc/self/cmdline").read_bytes().decode(errors="replace")
    assert len(outside["processes"]) > 3 and outside["parent_cmdline"] == own_cmdline

    policy = worker_policy(sys.executable, forbidden=[tmp_path])
    inside = probe(sandbox_argv(policy, [sys.executable, "-I"]), listener, planted)
    assert inside["connect"] in ("ConnectionRefusedError", "OSError"), inside
    assert inside["planted"] in ("FileNotFoundError", "PermissionError"), inside
    assert inside["processes"] == [1], inside  # its own PID namespace: only itself
    assert inside["parent_cmdline"] == ""
    assert outside["package"] == "written"  # root may write there, outside the sandbox
    assert inside["package"] != "written" and inside["prefix"] != "written", inside
    # An empty private scratch folder, but for the read-only binds of host paths in /tmp
    # (this checkout or its virtualenv, when they live there).
    binds = {Path(p).parts[2] for p in policy.read_only if p.startswith("/tmp/")}
    assert set(inside["cwd_files"]) == binds


def test_a_plugin_folder_that_holds_the_store_is_refused(tmp_path: Path) -> None:
    from fewtrans_board.core.errors import FewtransError

    store = tmp_path / "leaderboard"
    store.mkdir()
    with pytest.raises(FewtransError, match=r"would see .*leaderboard"):
        worker_policy(sys.executable, plugin_paths=[tmp_path], forbidden=[store])


@pytest.fixture(scope="module")
def probe_dist(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("probe-dist")
    with installed_distribution(root, "fewtrans-probe", "0.1", "tests.plugins.sandbox_probe"):
        yield root


def probe_worker(adapter: str, isolation: Isolation, limits: Limits | None = None) -> PluginWorker:
    places = plugin_places(["fewtrans-probe"])
    return PluginWorker(
        WorkerSettings(
            model="demo-cnn.digits",
            adapter=adapter,
            threads=1,
            plugins={"allow": ["fewtrans-probe"]},
            training_free=True,
            plugin_paths=tuple(places.sys_path),
            bind_paths=tuple(places.binds),
            isolation=isolation,
            limits=limits or Limits(),
        )
    )


def ask(worker: PluginWorker) -> np.ndarray:
    features = np.zeros((5, worker.info.feature_dim if worker.info else 64), dtype=np.float32)
    reply = worker.fit(
        FitRequest(
            support=features,
            labels=np.arange(5),
            class_names=list("abcde"),
            configs=[{}],
            seeds=[0],
            query_sets=[features[:1]],
            kind="features",
        )
    )
    return reply.query[0][0][0]


@pytest.mark.slow
@needs_sandbox
@pytest.mark.parametrize("isolation", [Isolation.SANDBOX, Isolation.PROCESS])
def test_no_episode_inherits_files_shared_memory_or_processes_of_another(
    probe_dist: Path, isolation: Isolation
) -> None:
    with probe_worker("probe-scratch", isolation) as worker:
        first, second = ask(worker), ask(worker)
    Path("/dev/shm/probe-marker").unlink(missing_ok=True)  # the host's, when unsandboxed
    assert worker.info is not None and worker.info.isolation == "namespaces"
    assert first[0] == 0.0 and second[0] == 0.0  # each episode's scratch starts empty
    if isolation is Isolation.SANDBOX:
        # Nor does it see the first one's shared memory or its sleeping process.
        assert first[1:3].tolist() == [0.0, 0.0] and second[1:3].tolist() == [0.0, 0.0]


@pytest.mark.slow
@needs_sandbox
def test_resource_limits_end_a_request_with_a_clear_error(probe_dist: Path) -> None:
    # The forked episode process already maps about 4 GiB (torch); the probe asks 4 more.
    hogs = [
        ("probe-memory", Limits(memory_bytes=6 << 30), r"memory limit of 6\.0 GiB"),
        ("probe-file", Limits(file_bytes=8 << 20), "file larger than its limit"),
        ("probe-sleep", Limits(seconds=3), "took longer than 3 s"),
    ]
    for adapter, limits, message in hogs:
        with (
            probe_worker(adapter, Isolation.SANDBOX, limits) as worker,
            pytest.raises(WorkerError, match=message),
        ):
            ask(worker)


def test_emptying_the_scratch_spares_the_binds_and_the_folders_leading_to_them(
    tmp_path: Path,
) -> None:
    from fewtrans_board.core.sandbox.episode import _prune

    bound = tmp_path / "clone" / ".venv"  # a read-only bind of a host path under /tmp
    (bound / "bin").mkdir(parents=True)
    (bound / "bin" / "python").write_text("interpreter")
    (tmp_path / "clone" / "left-by-an-episode").write_text("answers")
    (tmp_path / "other" / "deep").mkdir(parents=True)
    (tmp_path / "note.txt").write_text("answers")
    (tmp_path / "link").symlink_to(bound)
    _prune(tmp_path, {str(bound)}, {str(tmp_path / "clone"), str(tmp_path)})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["clone"]
    assert sorted(p.name for p in (tmp_path / "clone").iterdir()) == [".venv"]
    assert (bound / "bin" / "python").read_text() == "interpreter"
