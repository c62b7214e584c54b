"""Shared fixtures: fresh plugin managers, registries, CLI invocation, toy plugins."""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import hashlib
import importlib
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from fewtrans_board import Adapter, AdapterConfig, hookimpl, hparam

# Builds cache entry summaries in the user's cache folder (~/.cache/fewtrans-board); the
# suite keeps its own, one per test process, so a run neither reads nor leaves one there.
os.environ["FEWTRANS_BUILD_CACHE"] = tempfile.mkdtemp(prefix="fewtrans-build-cache-")
from fewtrans_board.cli import make_cli
from fewtrans_board.registry.lookup import Registry
from fewtrans_board.registry.manager import PluginManager, get_plugin_manager


def _remove_build_cache(folder: str, owner: int) -> None:
    if os.getpid() == owner:  # not in a forked child, which inherits this hook
        shutil.rmtree(folder, ignore_errors=True)


atexit.register(_remove_build_cache, os.environ["FEWTRANS_BUILD_CACHE"], os.getpid())

REPO = Path(__file__).resolve().parents[1]
VARIED_DIGITS = REPO / "leaderboard" / "manifests" / "fewtrans-varied--digits.parquet"
DEMO_MODELS = ("demo-cnn.digits", "demo-cnn.random")


class CentroidAdapter(Adapter):
    """A minimal nearest-centroid adapter used to build test plugins."""

    name = "test-centroid"
    description = "Nearest centroid on frozen features (test helper)."
    trains = "nothing (class means)"
    frozen_backbone = True
    training_free = True

    @dataclass(frozen=True)
    class Config(AdapterConfig):
        scale: float = hparam(1.0, "Logit scale.")

    def fit(self, backbone, support, class_names, config):  # type: ignore[no-untyped-def]
        import torch

        feats = support.images.features(backbone)
        cents = torch.stack([feats[support.labels == c].mean(0) for c in range(support.n_way)])

        class _P:
            def predict(self, query):  # type: ignore[no-untyped-def]
                return -config.scale * torch.cdist(query.features(backbone), cents)

        return _P()


def adapter_plugin(*adapters: type[Adapter]) -> object:
    """Return a plugin object registering the given adapter classes."""

    class _Plugin:
        @hookimpl
        def register_adapters(self, register: Callable[[type[Adapter]], None]) -> None:
            for adapter in adapters:
                register(adapter)

    return _Plugin()


def renamed(adapter: type[Adapter], name: str) -> type[Adapter]:
    """Return a subclass of ``adapter`` registered under another name."""
    return type(f"{adapter.__name__}_{name}", (adapter,), {"name": name})


@pytest.fixture(scope="session", autouse=True)
def one_torch_thread() -> Iterator[None]:
    """What a test computes in-process (contract checks, sessions, re-fits) uses one thread.

    ``make test`` runs one pytest-xdist worker per core, and torch starts one intra-op
    thread per core in each: the tiny test models then spend their time handing work
    between oversubscribed threads (measured on 2 cores under load: PromptSRC's
    80-template text ensemble 0.5 s on one thread, 7-8 s on two). Runs started through
    the runner use one thread already (its default). Results differ only in the last bits
    of floats, and no test compares floats across thread counts bit for bit.
    """
    from fewtrans_board.core.threads import torch_threads

    with torch_threads(1):
        yield


@pytest.fixture
def pm() -> PluginManager:
    """A manager with built-ins only (no installed entry points)."""
    return get_plugin_manager(entry_points=False)


@pytest.fixture
def registry(pm: PluginManager) -> Registry:
    return Registry.from_plugin_manager(pm)


@pytest.fixture
def invoke() -> Callable[..., Result]:
    """Invoke the CLI built from a given manager (default: built-ins + installed plugins)."""

    def _invoke(args: Sequence[str], pm: PluginManager | None = None, **kwargs: Any) -> Result:
        manager = pm if pm is not None else get_plugin_manager()
        return CliRunner().invoke(make_cli(manager), list(args), catch_exceptions=False, **kwargs)

    return _invoke


@pytest.fixture
def tiny_dataset_spec() -> Any:
    """A three-class dataset spec whose reader serves in-memory images."""
    from fewtrans_board import ClassSplit, DatasetSpec

    class _Reader:
        def list_items(self, root, spec):  # type: ignore[no-untyped-def]
            return [[f"{cid}/{i}.png" for i in range(4)] for cid in spec.class_ids]

        def load_image(self, root, item):  # type: ignore[no-untyped-def]
            from PIL import Image

            return Image.new("RGB", (8, 8), color=(hash(item) % 255, 0, 0))

    return DatasetSpec(
        name="tiny-three",
        title="Tiny three-class dataset",
        domain="synthetic",
        class_ids=("a", "b", "c"),
        class_names=("apple", "banana", "cherry"),
        split=ClassSplit(base=(2, 0), novel=(1,)),
        reader=_Reader(),
        layout="<class>/<i>.png",
        license="CC0",
        source_url="https://example.invalid/tiny",
        download="Generated in memory.",
        extra={"embedded": True},
    )


@pytest.fixture(scope="session")
def datasets_registry() -> dict[str, Any]:
    """Built-in dataset specs by name."""
    registry = Registry.from_plugin_manager(get_plugin_manager(entry_points=False))
    return {e.name: e.obj for e in registry.datasets}


@contextlib.contextmanager
def installed_distribution(
    root: Path, name: str, version: str, module: str, entry_point: str | None = None
) -> Iterator[Path]:
    """Make ``module`` the ``fewtrans_board`` entry point of an installed distribution.

    The entry point is called ``entry_point`` (default: the distribution name).

    Writes ``<name>-<version>.dist-info`` under ``root`` and puts ``root`` (and the repository,
    so ``tests.*`` modules import) on ``sys.path`` and ``PYTHONPATH``, so this process and the
    worker processes it starts find the plugin as if it were pip-installed.
    """
    info = root / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(f"[fewtrans_board]\n{entry_point or name} = {module}\n")
    old_path, old_env = list(sys.path), os.environ.get("PYTHONPATH")
    sys.path.insert(0, str(root))
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(root), str(REPO), *([old_env] if old_env else [])]
    )
    importlib.invalidate_caches()
    try:
        yield root
    finally:
        sys.path[:] = old_path
        if old_env is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old_env
        importlib.invalidate_caches()


def shared_folder(
    tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], object]
) -> Path:
    """A folder that ``build`` fills once per test run, whichever xdist worker asks first.

    Expensive artefacts that several modules (or several workers running tests of one module)
    need are computed once: the first caller builds the folder under a file lock, the others
    wait for the lock and get the same folder. What is in it is read-only by convention: a
    test that changes it must work on a copy. Without xdist the folder lives in this
    session's own temporary folder. A build that raised leaves no ``.done`` mark, so the next
    caller starts again from an empty folder (and fails the same way).
    """
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the run's folder, above every worker's own (gw0, gw1, ...)
    base = base / "shared"
    base.mkdir(exist_ok=True)
    folder = base / name
    with open(base / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (folder / ".done").is_file():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            build(folder)
            (folder / ".done").touch()
    return folder


def file_digests(folder: Path) -> dict[str, str]:
    """The sha256 of every file below ``folder``, by its path relative to it."""
    return {
        p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


CHROMIUM = Path("/usr/bin/chromium")
"""Debian's chromium, which the browser tests drive (``.ci/run`` installs it)."""


@pytest.fixture(scope="session")
def committed_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The committed store's site, built once per test run (read only)."""
    from fewtrans_board.website.build import build_site

    def build(work: Path) -> None:
        build_site(REPO / "leaderboard", work / "_site")

    return shared_folder(tmp_path_factory, "committed-site", build) / "_site"


@contextlib.contextmanager
def serving(folder: Path) -> Iterator[str]:
    """``folder`` served over HTTP on a free local port (quietly); yields its base URL."""
    import functools
    import http.server
    import threading

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Quiet, directory=str(folder))
    )
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()


@pytest.fixture(scope="session")
def mean_centroid_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Mean-centroid runs of the pretrained demo CNN and its random-init twin on every
    episode of the committed fewtrans-varied digits manifest (the demo benchmark), by model.

    Evaluated once per test run and shared (site, leaderboard CI): read them, never write.
    """

    def build(folder: Path) -> None:
        cli = make_cli(get_plugin_manager(entry_points=False))
        for model in DEMO_MODELS:
            args = ["evaluate", "--model", model, "--adapter", "mean-centroid"]
            args += ["--manifest", str(VARIED_DIGITS), "--out", str(folder / model)]
            args += ["--hpe", "fewtrans-paper"]  # the site tests' second protocol section
            result = CliRunner().invoke(
                cli, [*args, "--quiet", "--device", "cpu"], catch_exceptions=False
            )
            assert result.exit_code == 0, result.output

    folder = shared_folder(tmp_path_factory, "mean-centroid-runs", build)
    return {model: folder / model for model in DEMO_MODELS}


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Print (and, with FEWTRANS_FUZZ_REPORT, save) the fault-injection tally if any ran."""
    from tests.faults import TALLY

    if TALLY.counts:
        terminalreporter.section("fault injection")
        for line in TALLY.lines():
            terminalreporter.write_line(line)
        TALLY.write()


@contextlib.contextmanager
def extra_benchmark(
    name: str, *manifests: str, held_out: tuple[str, ...] = ("digits",)
) -> Iterator[None]:
    """Add a small sub-benchmark to ``SUB_BENCHMARKS`` for a block; the table is restored after."""
    from fewtrans_board.leaderboard.sub_benchmarks import SUB_BENCHMARKS, SubBenchmark

    saved = dict(SUB_BENCHMARKS)
    SUB_BENCHMARKS[name] = SubBenchmark(
        name=name,
        title=name.title(),
        description=f"The {name} test sub-benchmark.",
        manifests=manifests,
        held_out=held_out,
    )
    try:
        yield
    finally:
        SUB_BENCHMARKS.clear()
        SUB_BENCHMARKS.update(saved)


class _ProcessStarted(RuntimeError):
    """A test of the fast tier started a process."""


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """In ``make test-fast`` (``-m "not slow"``), a test that starts a process fails.

    The fast tier promises no subprocesses; this keeps the ``slow`` marks honest as tests
    change (fixtures may still start processes: they are shared with the slow tests).
    """
    if item.config.option.markexpr != "not slow":
        yield
        return
    import multiprocessing.process
    import platform
    import subprocess

    # The standard library runs 'uname -p' once per process for platform.platform(), which
    # run provenance records; it is cached, so it is computed here rather than in a test.
    platform.platform()

    def refuse(*_: object, **__: object) -> None:
        raise _ProcessStarted(
            f"{item.nodeid} started a process but is not marked slow: add "
            "@pytest.mark.slow (make test-fast leaves those out)"
        )

    saved = subprocess.Popen.__init__, multiprocessing.process.BaseProcess.start
    subprocess.Popen.__init__ = refuse  # type: ignore[assignment,method-assign]
    multiprocessing.process.BaseProcess.start = refuse  # type: ignore[assignment,method-assign]
    try:
        yield
    finally:
        subprocess.Popen.__init__, multiprocessing.process.BaseProcess.start = saved  # type: ignore[method-assign]


def assert_rows_score_the_manifest_labels(rows: list[dict[str, Any]], manifest: Path) -> None:
    """Recompute every row's accuracy, and each ensemble, from the manifest's query labels.

    Accuracy is 100 * (correct / n_query), so it can only take multiples of 100 / n_query; the
    vote ensemble is the per-query majority of the member predictions (ties: lowest class).
    """
    import numpy as np

    from fewtrans_board.episodes.manifest import Manifest

    episodes = {e.index: e for e in Manifest.load(manifest).episodes()}
    assert {r["episode"] for r in rows} <= set(episodes) and rows
    for row in rows:
        episode = episodes[row["episode"]]
        labels = np.array([label for _, label in episode.query])
        predictions = np.array(row["predictions"])
        assert row["n_query"] == len(labels) == len(predictions)
        assert row["n_way"] == episode.ways and set(predictions.tolist()) <= set(
            range(episode.ways)
        )
        correct = int((predictions == labels).sum())
        assert row["accuracy"] == pytest.approx(100.0 * correct / len(labels))
    for index in {r["episode"] for r in rows}:
        configs = [r for r in rows if r["episode"] == index and r["kind"] == "config"]
        members = np.array([r["predictions"] for r in configs])
        votes = np.stack([(members == c).sum(axis=0) for c in range(episodes[index].ways)], 1)
        (vote,) = [r for r in rows if r["episode"] == index and r["aggregation"] == "vote"]
        assert vote["kind"] == "ensemble" and vote["predictions"] == votes.argmax(1).tolist()


# --- the sandbox rule -------------------------------------------------------------------

REQUIRE_SANDBOX = "FEWTRANS_REQUIRE_SANDBOX"
"""Set to 1 (``.ci/run`` does) to fail, not skip, a test that needs the plugin sandbox."""


def require_sandbox() -> None:
    """The one rule for a test that needs the plugin worker's OS sandbox.

    On a machine where none can be made (no bubblewrap, or no unprivileged user
    namespaces) the test is skipped with the reason, unless ``FEWTRANS_REQUIRE_SANDBOX=1``
    (CI), where it fails: CI must never pass by skipping the trust boundary's tests.
    """
    from fewtrans_board.core.sandbox import sandbox_problem

    problem = sandbox_problem()
    if problem is None:
        return
    reason = f"no sandbox here: {problem} (.ci/run installs bubblewrap)"
    if os.environ.get(REQUIRE_SANDBOX, "") not in ("", "0"):
        pytest.fail(f"{reason}; {REQUIRE_SANDBOX}=1 requires it", pytrace=False)
    pytest.skip(reason)


@pytest.fixture
def sandbox_required() -> None:
    """:func:`require_sandbox` as a fixture (``pytest.mark.usefixtures``)."""
    require_sandbox()


# --- the CI workflow, parsed -------------------------------------------------------------

WORKFLOW = REPO / ".github" / "workflows" / "leaderboard.yml"
VERIFY_WORKFLOW = REPO / ".github" / "workflows" / "leaderboard-verify.yml"
"""The privileged half (workflow_run): verifies with the secret and comments."""


def workflow(path: Path = WORKFLOW) -> dict[str, Any]:
    """The leaderboard workflow as data (comments dropped; YAML 1.1's ``on:`` key is
    returned under ``"on"``, not ``True``)."""
    import yaml  # PyYAML: a dependency of timm

    data: dict[Any, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    if True in data:
        data["on"] = data.pop(True)
    return data


def workflow_step(job: str, name: str, path: Path = WORKFLOW) -> dict[str, Any]:
    """The step called ``name`` of ``job`` (exactly one)."""
    (step,) = [s for s in workflow(path)["jobs"][job]["steps"] if s.get("name") == name]
    return dict(step)


def run_commands(step: dict[str, Any]) -> list[list[str]]:
    """The commands of a step's ``run:`` script, each split into words like the shell does
    (continued lines joined, ``&&`` chains and redirections split off)."""
    import shlex

    script = step.get("run", "").replace("\\\n", " ")
    commands = []
    for line in script.splitlines():
        for part in line.split("&&"):
            words = shlex.split(part, comments=True)
            if ">" in words:
                words = words[: words.index(">")]
            if words:
                commands.append(words)
    return commands


def command_options(words: Sequence[str]) -> dict[str, str | None]:
    """``--option value`` pairs of a command's words (``None`` for a flag)."""
    options: dict[str, str | None] = {}
    for i, word in enumerate(words):
        if word.startswith("--"):
            following = words[i + 1] if i + 1 < len(words) else None
            options[word] = None if following is None or following.startswith("-") else following
    return options
