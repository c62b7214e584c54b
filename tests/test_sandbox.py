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
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from fewtrans_board.core.sandbox import (
    Isolation,
    Limits,
    sandbox_argv,
    worker_policy,
)
from fewtrans_board.runner.worker.isolated import PluginWorker, stop_idle_workers
from fewtrans_board.runner.worker.messages import FitRequest, WorkerError, WorkerSettings
from fewtrans_board.runner.worker.remote import plugin_places
from tests.conftest import installed_distribution, require_sandbox

needs_sandbox = pytest.mark.usefixtures("sandbox_required")
"""Skipped without a sandbox, failed there under FEWTRANS_REQUIRE_SANDBOX=1 (tests/conftest.py)."""

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


def ask(worker: PluginWorker, n_way: int = 5) -> np.ndarray:
    features = np.zeros((n_way, worker.info.feature_dim if worker.info else 64), dtype=np.float32)
    reply = worker.fit(
        FitRequest(
            support=features,
            labels=np.arange(n_way),
            class_names=list("abcdefghij"[:n_way]),
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
def test_no_episode_finds_what_another_left_behind_locked_folders_or_in_root_or_dev(
    probe_dist: Path,
) -> None:
    # The plugin's metadata is read through a bind of a host path under /tmp (below).
    assert str(probe_dist).startswith("/tmp/")
    with probe_worker("probe-persist", Isolation.SANDBOX) as worker:
        first, second = ask(worker, 9), ask(worker, 9)
    assert worker.info is not None and worker.info.isolation == "namespaces"
    # Red team: the first episode left a mode-000 folder in /tmp and tried / and /dev.
    assert first[:3].tolist() == [0.0, 0.0, 0.0]
    assert second[:3].tolist() == [0.0, 0.0, 0.0], "an episode found another's state"
    assert second[7:].tolist() == [1.0, 1.0]  # / and /dev are read-only
    # Honest control: each episode writes and reads its /tmp and /dev/shm, works in its
    # /tmp, and reads the host paths bound under /tmp (the plugin's own metadata).
    for found in (first, second):
        assert found[3:7].tolist() == [1.0, 1.0, 1.0, 1.0], found


@pytest.mark.slow
@needs_sandbox
def test_another_adapter_served_by_the_same_worker_finds_nothing_the_first_left(
    probe_dist: Path,
) -> None:
    stop_idle_workers()
    with probe_worker("probe-persist", Isolation.SANDBOX) as worker:
        assert worker._process is not None
        pid, left = worker._process.pid, ask(worker, 9)
    assert left[:3].tolist() == [0.0, 0.0, 0.0]  # nothing there yet; it leaves its folders
    # Red team: the next run, of another adapter, gets the idle worker (same process) and
    # looks for the locked folder in /tmp and the folders in / and /dev.
    with probe_worker("probe-persist-next", Isolation.SANDBOX) as worker:
        assert worker._process is not None and worker._process.pid == pid
        found = ask(worker, 9)
    assert found[:3].tolist() == [0.0, 0.0, 0.0], "an adapter found another adapter's state"
    # Honest control: the same probe reads and writes its own /tmp, /dev/shm and bound paths.
    assert found[3:7].tolist() == [1.0, 1.0, 1.0, 1.0], found
    stop_idle_workers()


@pytest.mark.slow
@pytest.mark.parametrize("isolation", [Isolation.SANDBOX, Isolation.PROCESS])
def test_bytes_an_episode_leaves_in_its_request_pipe_stop_the_worker(
    probe_dist: Path, isolation: Isolation
) -> None:
    if isolation is Isolation.SANDBOX:
        require_sandbox()
    # Control: the same worker answers one honest request after another.
    with probe_worker("probe-scratch", isolation) as worker:
        ask(worker), ask(worker)
    # Red team: a message for the next episode, written into the pipe its requests come by.
    with (
        probe_worker("probe-pipe", isolation) as worker,
        pytest.raises(WorkerError, match="left 28 bytes in its request pipe"),
    ):
        ask(worker)


def unprivileged(work: Callable[[], None]) -> None:
    """Run ``work`` in a child process without root's permission override, if root.

    In the sandbox the worker is an unprivileged user: root would delete a mode-000 folder
    where the worker cannot (or could not, before it unlocked it).
    """
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            if os.getuid() == 0:
                os.setgroups([])
                os.setresgid(65534, 65534, 65534)
                os.setresuid(65534, 65534, 65534)
            work()
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the unprivileged check failed (stderr)"


def unprivileged_scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder every user may write, made the working folder (tmp_path's parents are
    closed to other users: :func:`unprivileged` work uses relative paths)."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    scratch.chmod(0o777)
    monkeypatch.chdir(scratch)
    return scratch


def test_emptying_the_scratch_removes_folders_an_episode_locked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fewtrans_board.core.sandbox.episode import _prune

    unprivileged_scratch(tmp_path, monkeypatch)

    def check() -> None:
        bound = Path("clone/.venv")  # a read-only bind of a host path under /tmp
        (bound / "bin").mkdir(parents=True)
        (bound / "bin" / "python").write_text("interpreter")
        (Path("locked/deep/deeper")).mkdir(parents=True)
        Path("locked/deep/deeper/state").write_text("answers")
        Path("clone/hidden").mkdir()
        Path("clone/hidden/state").write_text("answers")
        for folder in ("locked/deep/deeper", "locked/deep", "locked", "clone/hidden", "clone"):
            os.chmod(folder, 0)  # "clone": an ancestor of a bind, made unreadable
        _prune(Path("."), {str(bound)}, {"clone", "."})
        assert os.listdir(".") == ["clone"]
        assert os.listdir("clone") == [".venv"]
        assert (bound / "bin" / "python").read_text() == "interpreter"

    unprivileged(check)


def test_what_emptying_the_scratch_cannot_remove_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fewtrans_board.core.sandbox.episode import _leftovers, _prune

    scratch = unprivileged_scratch(tmp_path, monkeypatch)
    foreign = ["foreign"] if os.getuid() == 0 else []  # root's: the worker cannot delete it
    for name in foreign:
        (scratch / name).mkdir()
        (scratch / name / "file").write_text("root's")

    def check() -> None:
        Path("clone/.venv").mkdir(parents=True)
        Path("clone/extra").write_text("answers")
        keep, ancestors = {"clone/.venv"}, {"clone", "."}
        assert sorted(_leftovers(Path("."), keep, ancestors)) == ["clone/extra", *foreign]
        _prune(Path("."), keep, ancestors)
        assert _leftovers(Path("."), keep, ancestors) == foreign

    unprivileged(check)


DEVICES_AND_SCRATCH = r"""
import json, os, sys
found = {"device": os.path.exists(sys.argv[1])}
for name, path in (("root", "/left"), ("dev", "/dev/left"), ("tmp", "/tmp/x"), ("shm", "/dev/shm/x")):
    try:
        open(path, "w").write("x")
        found[name] = "written"
    except OSError as exc:
        found[name] = type(exc).__name__
with open("/dev/null", "wb") as null, open("/dev/urandom", "rb") as random:
    null.write(b"x")
    found["random"] = len(random.read(8))
print(json.dumps(found))
"""


@pytest.mark.slow
@needs_sandbox
def test_the_sandbox_root_and_dev_are_read_only_but_its_devices_and_scratch_work() -> None:
    policy = worker_policy(sys.executable)
    # A device bound into /dev (as CUDA's are) needs its mount point made there before /dev
    # is read-only: one that bubblewrap's minimal /dev lacks.
    device = next(
        (d for d in ("/dev/loop-control", "/dev/fuse", "/dev/kvm") if os.path.exists(d)),
        "/dev/full",
    )
    policy = type(policy)(policy.read_only, (device,), policy.env)
    argv = sandbox_argv(policy, [sys.executable, "-I", "-c", DEVICES_AND_SCRATCH, device])
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True)
    assert json.loads(done.stdout) == {
        "device": True,
        "root": "OSError",
        "dev": "OSError",
        "tmp": "written",
        "shm": "written",
        "random": 8,
    }


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
