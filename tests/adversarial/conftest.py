"""Fixtures of the red-team suite: an installed cheater distribution and a tiny leaderboard.

The cheaters are registered through a fake distribution (``fewtrans-redteam 0.1``) found
by ``importlib.metadata`` on ``sys.path``; ``PYTHONPATH`` carries it into verification
workers. The leaderboard holds small digits manifests and a two-manifest ``redteam``
sub-benchmark, so whole submissions are evaluated, packed and refused in seconds.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from fewtrans_board.cli import make_cli
from fewtrans_board.leaderboard.sub_benchmarks import SUB_BENCHMARKS, SubBenchmark
from fewtrans_board.registry.manager import PluginManager, get_plugin_manager
from tests.conftest import REPO, installed_distribution, require_sandbox, shared_folder

MANIFESTS = REPO / "leaderboard" / "manifests"
PINS = '["fewtrans-board==0.1.0", "fewtrans-redteam==0.1"]'
VARIED, FIXED = "redteam-varied.parquet", "redteam-fixed.parquet"


@pytest.fixture(scope="package")
def redteam_dist(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Install ``tests/adversarial/cheaters.py`` as the entry point of ``fewtrans-redteam``.

    Package-scoped: the cheaters (which import torch at import time) must not stay
    installed for the rest of the session, where every CLI test would load them.
    """
    root = tmp_path_factory.mktemp("redteam-dist")
    with installed_distribution(root, "fewtrans-redteam", "0.1", "tests.adversarial.cheaters"):
        yield root


@pytest.fixture(scope="package")
def redteam_pm(redteam_dist: Path) -> PluginManager:
    """Built-ins plus the cheaters (and nothing else that happens to be installed)."""
    return get_plugin_manager(allow=["fewtrans-redteam"])


def run_cli(pm: PluginManager, args: Sequence[str]) -> Result:
    """Invoke the CLI built from ``pm``."""
    return CliRunner().invoke(make_cli(pm), [str(a) for a in args], catch_exceptions=False)


def ok(result: Result) -> Result:
    assert result.exit_code == 0, result.output
    return result


def verifies_sandboxed(args: Sequence[Any]) -> bool:
    """Whether a command line re-runs plugin code in the sandboxed verification worker."""
    words = [str(a) for a in args]
    if "--unsandboxed" in words:
        return False
    command = words[:2]
    return (
        command == ["submission", "verify"]
        or (command == ["leaderboard", "add"] and "--unsafe-no-verify" not in words)
        or (
            command[:1] == ["leaderboard"]
            and command[1:] in (["check"], ["check-pr"])
            and "--verify" in words
        )
    )


@dataclass
class Board:
    """A tiny leaderboard store with the ``redteam`` sub-benchmark and helpers."""

    root: Path
    work: Path
    pm: PluginManager

    @property
    def store(self) -> Path:
        return self.root / "leaderboard"

    def manifest(self, name: str) -> Path:
        return self.store / "manifests" / name

    def evaluate(
        self,
        adapter: str,
        out: str,
        *,
        manifest: str = VARIED,
        protocol: str = "fewtrans-reference",
        config: Sequence[str] = (),
        centre: Path | None = None,
        model: str = "demo-cnn.digits",
        isolation: str = "auto",
    ) -> Result:
        args = ["evaluate", "--model", model, "--adapter", adapter, "--isolation", isolation]
        args += ["--manifest", self.manifest(manifest), "--hpe", protocol]
        args += ["--out", self.work / out, "--quiet", "--device", "cpu", "--threads", "1"]
        for item in config:
            args += ["--config", item]
        if centre is not None:
            args += ["--centre", centre]
        return run_cli(self.pm, args)

    def meta(
        self, ident: str, adapter: str, model: str = "demo-cnn.digits", benchmark: str = "redteam"
    ) -> Path:
        path = self.work / f"{ident}.toml"
        path.write_text(
            f"""[submission]
id = "{ident}"
method = "{adapter}"
model = "{model}"
adapter = "{adapter}"
benchmark = "{benchmark}"
hpe_protocol = "fewtrans-reference"
authors = ["Red Team"]
hardware = "CPU"
plugins = {PINS}
"""
        )
        return path

    def pack(
        self, ident: str, adapter: str, runs: Sequence[str], benchmark: str = "redteam"
    ) -> Path:
        bundle = self.work / f"{ident}.zip"
        args = ["submission", "pack", *(self.work / r for r in runs)]
        args += ["--meta", self.meta(ident, adapter, benchmark=benchmark), "--out", bundle]
        ok(run_cli(self.pm, [*args, "--leaderboard", self.store]))
        return bundle

    def json(self, args: Sequence[Any]) -> tuple[int, dict[str, Any]]:
        if verifies_sandboxed(args):
            require_sandbox()
        result = run_cli(get_plugin_manager(entry_points=False), [*args, "--json"])
        return result.exit_code, json.loads(result.output)

    def verify(self, bundle: Path, *extra: str) -> tuple[int, dict[str, Any]]:
        """``submission verify --json``: the default rule, every probe."""
        return self.json(["submission", "verify", bundle, "--leaderboard", self.store, *extra])

    def verify_reruns(
        self, bundle: Path, *, unsandboxed: bool = False
    ) -> tuple[int, dict[str, Any]]:
        """``submission verify --json`` without the probes: the default sample, re-runs only.

        What ``submission verify`` runs (:func:`~fewtrans_board.leaderboard.intake.verify_bundle`
        with the command's default options, its JSON answer), except that no episode also
        gets the inductiveness, ``fit_many`` and memorisation probes
        (``probe_episodes=0``; the command has no option for it). A probe can only add a
        failure, so a forgery refused here is refused by the re-run comparison alone (the
        defence its test names); for the linear probe it is a quarter of the requests.
        """
        return self.verify_with(bundle, probe_episodes=0, unsandboxed=unsandboxed)

    def verify_with(self, bundle: Path, **options: Any) -> tuple[int, dict[str, Any]]:
        """What ``submission verify --json`` answers, with any
        :class:`~fewtrans_board.leaderboard.verification.VerificationOptions` (the command
        passes most of them; ``probe_episodes`` it does not)."""
        if not options.get("unsandboxed"):
            require_sandbox()
        from fewtrans_board.core.errors import SubmissionError
        from fewtrans_board.leaderboard.intake import verify_bundle
        from fewtrans_board.leaderboard.store import LeaderboardStore
        from fewtrans_board.leaderboard.verification import VerificationOptions

        try:
            report = verify_bundle(
                bundle, LeaderboardStore(self.store), VerificationOptions(**options)
            )
        except SubmissionError as exc:
            refusal = {"code": exc.code, "error": str(exc), "report": getattr(exc, "report", None)}
            return 1, json.loads(json.dumps({"ok": False, **refusal}, default=str))
        return 0, json.loads(json.dumps({"ok": True, **report}, default=str))


REDTEAM = SubBenchmark(
    name="redteam",
    title="Red team",
    description="Two small digits manifests for the red-team suite.",
    manifests=(VARIED, FIXED),
    held_out=("digits",),
)
REDTEAM_FIXED = SubBenchmark(
    name="redteam-fixed",
    title="Red team, one manifest",
    description="The fixed-ways manifest of the red-team suite alone.",
    manifests=(FIXED,),
    held_out=("digits",),
)
"""For a test whose cost is the cheater's own work in every request, and whose defence acts
on each plugin worker alike (one per dataset): it runs on one manifest."""
REDTEAM_VARIED = SubBenchmark(
    name="redteam-varied",
    title="Red team, varied ways and shots",
    description="The varied manifest of the red-team suite alone.",
    manifests=(VARIED,),
    held_out=("digits",),
)
"""The same for a defence whose statistic is widest on the varied manifest."""
CENTRE = "centre.json"
HONEST = {"varied": "lp-varied", "fixed": "lp-fixed"}
"""Run folders of the honest linear-probe submission, one per manifest."""


@contextlib.contextmanager
def redteam_benchmark(*extra: SubBenchmark) -> Iterator[None]:
    """The ``redteam`` sub-benchmark (and ``extra`` ones) registered inside a block (the table
    is restored after)."""
    saved = dict(SUB_BENCHMARKS)
    for benchmark in (REDTEAM, *extra):
        SUB_BENCHMARKS[benchmark.name] = benchmark
    try:
        yield
    finally:
        SUB_BENCHMARKS.clear()
        SUB_BENCHMARKS.update(saved)


@pytest.fixture(scope="package")
def board_template(redteam_pm: PluginManager, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A board built once per test run: its manifests, a centre search, the honest runs.

    Every module copies it (:func:`board`), so the centre search and the honest evaluations
    run once, not once per module (nor once per xdist worker: :func:`shared_folder`),
    while each module still writes to a store of its own.
    """
    return shared_folder(
        tmp_path_factory, "redteam-board-template", lambda root: _build_board(root, redteam_pm)
    )


def _build_board(root: Path, redteam_pm: PluginManager) -> None:
    manifests = root / "leaderboard" / "manifests"
    manifests.mkdir(parents=True)
    shutil.copy(MANIFESTS / "fewtrans-search--digits.parquet", manifests)
    shutil.copy(MANIFESTS / "fewtrans-search--digits.parquet.sha256", manifests)
    board = Board(root, root / "work", redteam_pm)
    board.work.mkdir()
    with redteam_benchmark():
        for name, extra in ((VARIED, []), (FIXED, ["--ways", "5", "--shots", "1"])):
            protocol = "fewtrans-varied" if name == VARIED else "fewtrans-fixed"
            ok(
                run_cli(
                    redteam_pm,
                    [
                        *("manifest", "build", "--protocol", protocol, "--dataset", "digits"),
                        *(*extra, "--episodes", "8", "--out", manifests / name),
                    ],
                )
            )
        # A held-out centre search of linear-probe on the digits search tasks.
        ok(
            run_cli(
                redteam_pm,
                [
                    *("hpe", "search", "--model", "demo-cnn.digits", "--adapter", "linear-probe"),
                    *("--manifest", MANIFESTS / "fewtrans-search--digits.parquet", "--limit", "2"),
                    *("--config", "epochs=10", "--out", board.work / CENTRE, "--device", "cpu"),
                    "--json",
                ],
            )
        )
        for manifest, out in ((VARIED, HONEST["varied"]), (FIXED, HONEST["fixed"])):
            ok(board.evaluate("linear-probe", out, manifest=manifest, centre=board.work / CENTRE))


@pytest.fixture(scope="module")
def board(
    board_template: Path, redteam_pm: PluginManager, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Board]:
    """Small digits manifests (8 varied, 8 fixed episodes), the redteam benchmark, a centre.

    A copy of :func:`board_template` of this module's own.
    """
    root = tmp_path_factory.mktemp("board")
    shutil.copytree(board_template, root, dirs_exist_ok=True, symlinks=True)
    with redteam_benchmark():
        yield Board(root, root / "work", redteam_pm)


@pytest.fixture(scope="module")
def centre(board: Board) -> Path:
    """A held-out centre search of linear-probe on the digits search tasks."""
    return board.work / CENTRE


@pytest.fixture(scope="module")
def honest(board: Board, centre: Path) -> dict[str, str]:
    """An honest linear-probe submission on both manifests: run folder names."""
    assert all((board.work / run / "run.json").is_file() for run in HONEST.values())
    return dict(HONEST)


Edit = Callable[[dict[str, Any]], None]


def rewrite(bundle: Path, out: Path, edit: Callable[[str, bytes], bytes]) -> Path:
    """Copy a bundle zip, passing every member's bytes through ``edit(name, data)``."""
    import zipfile

    with zipfile.ZipFile(bundle) as src, zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            dst.writestr(info.filename, edit(info.filename, src.read(info)))
    return out


def edit_provenance(bundle: Path, out: Path, edit: Edit) -> Path:
    """Rewrite the provenance of every result shard and run.json's identity, as a forger
    would: run ids re-hashed from the edited identity, rows relabelled, checksums re-sealed."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    from fewtrans_board.results.row_schema import METADATA_KEY, run_id_of
    from fewtrans_board.results.shards import seal_table

    def change(name: str, data: bytes) -> bytes:
        if name.endswith(".parquet"):
            table = pq.read_table(io.BytesIO(data))
            meta = json.loads(table.schema.metadata[METADATA_KEY])
            edit(meta)
            meta["run_id"] = run_id_of(meta["identity"])
            ids = pa.array([meta["run_id"]] * table.num_rows).dictionary_encode()
            table = table.set_column(table.column_names.index("run_id"), "run_id", ids)
            meta.pop("schema_version")
            buffer = io.BytesIO()
            pq.write_table(seal_table(table, meta), buffer)
            return buffer.getvalue()
        if name.endswith("run.json"):
            record = json.loads(data)
            edit(record)
            record["run_id"] = run_id_of(record["identity"])
            return json.dumps(record).encode()
        return data

    return rewrite(bundle, out, change)
