"""A new method author's frictions (issue 27, item 6), one test each, with a control.

1. ``site build --results`` leaves out a limited or unfinished run, one line each, and
   still shows the complete one (it crashed with "failed unexpectedly: ValueError").
2. ``results summary runs/`` summarises the finished runs with their HPE protocol and
   lists the unfinished ones with shards present / total (it aborted on one of them).
3. ``adapters list --options`` prints hyperparameters as they are set (``--config``),
   not as flags that do not exist.
4. ``preflight --centre`` checks the grid around an ``hpe search`` centre; each check
   shows a progress bar on stderr (none with ``--json``).
5. An unknown hyperparameter name gets a did-you-mean, in ``--config``, ``hpe search`` and
   ``sweep --grid``.
6. The outdated commands in docs and messages (``tests/test_doc_commands.py`` checks every
   shown command); the broken CONTRIBUTING sentence.
7. A run records a digest of its plugin's installed files next to the pin; verification
   names a mismatch in one line, and accepts runs that predate the digest.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result

from fewtrans_board.cli import make_cli
from fewtrans_board.core.errors import ConfigError, SubmissionError
from fewtrans_board.registry.manager import get_plugin_manager
from tests.conftest import REPO, extra_benchmark

SEARCH = REPO / "leaderboard" / "manifests" / "fewtrans-search--digits.parquet"
RUN = ["--model", "demo-cnn.digits", "--device", "cpu", "--threads", "1"]


@dataclass
class Probe:
    """A store with one small frozen manifest and runs of it in every state."""

    root: Path
    cli: click.Group

    @property
    def store(self) -> Path:
        return self.root / "store"

    @property
    def manifest(self) -> Path:
        return self.store / "manifests" / "probe.parquet"

    def run(self, name: str) -> Path:
        return self.root / "runs" / name

    def invoke(self, *args: str | Path) -> Result:
        return CliRunner().invoke(self.cli, [str(a) for a in args], catch_exceptions=False)

    def ok(self, *args: str | Path) -> Result:
        result = self.invoke(*args)
        assert result.exit_code == 0, result.output
        return result


@pytest.fixture(scope="module")
def probe(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Probe]:
    """``full``: every episode; ``limited``: --limit 2; ``unfinished``: 2 of 3 shards;
    ``empty``: no shard yet. The manifest is the frozen one of the ``probe`` sub-benchmark."""
    probe = Probe(tmp_path_factory.mktemp("frictions"), make_cli(get_plugin_manager()))
    with extra_benchmark("probe", "probe.parquet"):
        probe.ok(
            *("manifest", "build", "--protocol", "fewtrans-varied", "--dataset", "digits"),
            *("--episodes", "3", "--out", probe.manifest),
        )
        evaluate = ["evaluate", *RUN, "--manifest", probe.manifest, "--quiet"]
        evaluate += ["--leaderboard", probe.store]
        probe.ok(*evaluate, "--adapter", "mean-centroid", "--hpe", "fewtrans-reference",
                 "--out", probe.run("full"))  # fmt: skip
        probe.ok(
            *evaluate, "--adapter", "simpleshot", "--limit", "2", "--out", probe.run("limited")
        )
        probe.ok(*evaluate, "--adapter", "simpleshot", "--shards", "3", "--out", probe.run("unfinished"))  # fmt: skip
        shutil.copytree(probe.run("unfinished"), probe.run("empty"))
        for shard in sorted((probe.run("empty") / "shards").glob("shard-*.parquet")):
            shard.unlink()
        next((probe.run("unfinished") / "shards").glob("shard-00001-*.parquet")).unlink()
        yield probe


# --- 1. site build --results ---------------------------------------------------------------


def test_site_build_leaves_out_limited_and_unfinished_runs_one_line_each(probe: Probe) -> None:
    out = probe.root / "site"
    result = probe.invoke(
        "site",
        "build",
        "--leaderboard",
        probe.store,
        "--out",
        out,
        "--results",
        probe.root / "runs",
    )
    assert result.exit_code == 0, result.output
    assert "failed unexpectedly" not in result.output
    warnings = [line for line in result.stderr.splitlines() if line.startswith("Warning:")]
    assert len(warnings) == 3, result.stderr
    limited, unfinished, empty = (
        next(w for w in warnings if f"{probe.run(name)}:" in w)
        for name in ("limited", "unfinished", "empty")
    )
    assert "only the first 2 episodes" in limited and "without --limit" in limited
    assert "2/3 shards present" in unfinished and "again" in unfinished
    assert "0/3 shards present" in empty
    # the control: the complete run is shown as a local entry, the others are not
    pages = " ".join(p.read_text() for p in out.glob("*.html"))
    assert "local-mean-centroid--demo-cnn.digits" in pages
    assert "local-simpleshot" not in pages


def test_a_damaged_run_is_still_named_not_skipped(probe: Probe, tmp_path: Path) -> None:
    """Leaving a limited run out never hides a damaged shard of it."""
    run = tmp_path / "limited"
    shutil.copytree(probe.run("limited"), run)
    shard = next((run / "shards").glob("shard-*.parquet"))
    shard.write_bytes(shard.read_bytes()[:-100])
    result = probe.invoke(
        "site", "build", "--leaderboard", probe.store, "--out", tmp_path / "s", "--results", run
    )
    assert result.exit_code == 1 and shard.name in result.output, result.output


# --- 2. results summary over a folder with unfinished runs ---------------------------------


def test_results_summary_lists_unfinished_runs_and_shows_each_protocol(probe: Probe) -> None:
    result = probe.ok("results", "summary", probe.root / "runs")
    lines = result.output.splitlines()
    header = lines[0].split("  ")
    assert "HPE protocol" in [h.strip() for h in header if h.strip()]
    rows = {line.split()[1]: line.split()[3] for line in lines[2:4]}
    assert rows == {"mean-centroid": "fewtrans-reference", "simpleshot": "fewtrans-paper"}
    unfinished = [line for line in lines if "unfinished" in line]
    assert len(unfinished) == 2
    assert any(
        f"{probe.run('unfinished')}: " in u and "2/3 shards present" in u for u in unfinished
    )
    assert any(f"{probe.run('empty')}: " in u and "0/3 shards present" in u for u in unfinished)
    # --json: the finished runs' summaries, the unfinished ones named on stderr
    result = probe.ok("results", "summary", probe.root / "runs", "--json")
    summaries = json.loads(result.stdout)
    assert sorted(s["adapter"] for s in summaries) == ["mean-centroid", "simpleshot"]
    assert result.stderr.count("Warning:") == 2


def test_results_summary_of_finished_runs_is_unchanged(probe: Probe) -> None:
    """The control: complete runs only, nothing listed as unfinished."""
    result = probe.ok("results", "summary", probe.run("full"), probe.run("limited"))
    assert "unfinished" not in result.output and "Warning" not in result.output


# --- 3. adapters list --options ------------------------------------------------------------


def test_options_are_printed_as_they_are_set(probe: Probe) -> None:
    from fewtrans_board.methods.adapters.heads import LinearProbeAdapter

    text = probe.ok("adapters", "list", "linear-probe", "--options").output
    assert "  --" not in text  # no flag that 'evaluate' would refuse ("No such option")
    assert "options (set each with --config NAME=VALUE):" in text
    line = "    lr_head (float, default 0.2, > 0) [HPE lr]: Learning rate of the head."
    assert line in text
    # every name shown is one '--config NAME=VALUE' accepts
    shown = [ln.split()[0] for ln in text.splitlines() if ln.startswith("    ") and "(" in ln]
    fields = [f.name for f in LinearProbeAdapter.Config.fields_info()]
    assert shown[: len(fields)] == fields
    LinearProbeAdapter.Config.from_dict(
        {name: getattr(LinearProbeAdapter.Config(), name) for name in shown[: len(fields)]}
    )


def test_options_json_is_unchanged(probe: Probe) -> None:
    (row,) = json.loads(probe.ok("adapters", "list", "linear-probe", "--json").output)
    first = row["options"][0]
    assert first["name"] == "lr_head" and first["type"] == "float" and first["hpe"] == "lr"
    assert set(first) == {"name", "type", "default", "help", "hpe", "range", "choices"}


# --- 4. preflight --centre and its progress ------------------------------------------------


def _centre_file(folder: Path) -> Path:
    path = folder / "centre.json"
    centre = {"lr_head": 0.7, "epochs": 1}
    path.write_text(json.dumps({"adapter": "linear-probe", "centre": centre, "log": [{}]}))
    return path


PREFLIGHT = ["preflight", *RUN, "--adapter", "linear-probe", "--hpe", "single", "--episodes", "1"]


def test_preflight_checks_the_grid_around_a_searched_centre(probe: Probe, tmp_path: Path) -> None:
    centre = _centre_file(tmp_path)
    report = json.loads(probe.ok(*PREFLIGHT, "--centre", centre, "--json").stdout)
    assert (report["centre"]["lr_head"], report["centre"]["epochs"]) == (0.7, 1)
    assert report["centre_file"] == str(centre)
    # the control: without --centre the adapter's defaults are the centre
    report = json.loads(probe.ok(*PREFLIGHT, "--config", "epochs=1", "--json").stdout)
    assert report["centre"]["lr_head"] == 0.2 and report["centre_file"] is None
    # a centre searched for another adapter is refused in one line, as evaluate refuses it
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"adapter": "finetune", "centre": {}, "log": [{}]}))
    result = probe.invoke(*PREFLIGHT, "--centre", other)
    assert result.exit_code == 1 and "searched for adapter 'finetune'" in result.output


def test_preflight_shows_a_progress_bar_per_check(
    probe: Probe, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import fewtrans_board.cli.preflight_cmd as preflight_cmd

    # as on a terminal (show_progress draws bars only where stderr is one)
    monkeypatch.setattr(preflight_cmd, "show_progress", lambda wanted: wanted)
    args = [*PREFLIGHT, "--centre", _centre_file(tmp_path)]
    result = probe.ok(*args)
    steps = [f"preflight {i}/6: " for i in range(1, 7)]  # contracts, grid, re-run, order,
    assert all(step in result.stderr for step in steps), result.stderr  # fit_many, subsets
    assert "preflight 1/6: adapter and model contracts" in result.stderr
    assert "ok  inductive" in result.stdout
    for quiet in ("--json", "--quiet"):  # the control: no bars
        assert "preflight 1/" not in probe.ok(*args, quiet).stderr


# --- 5. did you mean, for hyperparameter names ----------------------------------------------


@pytest.mark.parametrize(
    ("args", "typo", "meant"),
    [
        (["evaluate", "--manifest", SEARCH, "--config", "lr_haed=0.1"], "lr_haed", "'lr_head'"),
        (["hpe", "search", "--manifest", SEARCH, "--config", "epoch=1"], "epoch", "'epochs'"),
        (["sweep", "--manifest", SEARCH, "--grid", "lr_haed=0.1,0.2"], "lr_haed", "'lr_head'"),
    ],
)
def test_unknown_hyperparameters_get_a_suggestion(
    probe: Probe, tmp_path: Path, args: list[str], typo: str, meant: str
) -> None:
    out = tmp_path / "out"
    result = probe.invoke(*args, *RUN, "--adapter", "linear-probe", "--out", out)
    assert result.exit_code == 1 and result.output.count("\n") == 1, result.output
    assert f"unknown option(s) {typo} (did you mean {meant}" in result.output
    assert "valid options: lr_head, epochs" in result.output
    assert not out.exists()


def test_a_name_like_no_option_gets_no_suggestion() -> None:
    from fewtrans_board.methods.adapters.heads import LinearProbeAdapter

    with pytest.raises(ConfigError, match=r"unknown option\(s\) no_such; valid options") as err:
        LinearProbeAdapter.Config.from_dict({"no_such": 1})
    assert "did you mean" not in str(err.value)


def test_adapter_names_and_hyperparameters_share_the_suggestion_rule() -> None:
    from fewtrans_board.core.errors import close_names
    from fewtrans_board.registry.lookup import Registry

    adapters = Registry.from_plugin_manager(get_plugin_manager(entry_points=False)).adapters
    assert adapters.suggest("linear-prob") == close_names("linear-prob", [e.name for e in adapters])
    assert close_names("probe", ["linear-probe", "finetune"]) == ["linear-probe"]


# --- 6. outdated commands, the broken sentence ----------------------------------------------


def test_the_template_and_the_sub_benchmarks_footer_name_sub_benchmarks(probe: Probe) -> None:
    template = probe.ok("submission", "template").output
    assert "# see 'fewtrans-board sub-benchmarks'" in template
    footer = probe.ok("sub-benchmarks").output.splitlines()[-1]
    assert "'fewtrans-board sub-benchmarks --json'" in footer


def test_the_manifests_readme_is_generated_and_names_datasets_scan() -> None:
    from fewtrans_board.episodes.__main__ import readme_text

    readme = (REPO / "leaderboard" / "manifests" / "README.md").read_text(encoding="utf-8")
    assert readme == readme_text()  # regenerated by 'make manifests', not hand-edited
    assert "`fewtrans-board datasets scan NAME --root PATH`" in readme
    assert "datasets check" not in readme


def test_the_submit_page_names_preflight() -> None:
    page = (REPO / "site" / "templates" / "submit.html").read_text(encoding="utf-8")
    assert "fewtrans-board preflight --model MODEL --adapter ADAPTER" in page
    assert "fewtrans-board validate" not in page


def test_contributing_has_no_broken_sentence() -> None:
    text = (REPO / "CONTRIBUTING.md").read_text(encoding="utf-8")
    assert text.count("you do not get them") == 1  # step 3's sentence, not a stray repeat
    paragraph = "Two predictor attributes are optional: `encoder` (the adapted image encoder"
    assert paragraph in " ".join(text.split())


# --- 7. a digest of the plugin's installed files ---------------------------------------------


def _fake_distribution(site: Path, source: str) -> None:
    package = site / "fewtrans_fake"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text(source)
    info = site / "fewtrans_fake-1.0.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fewtrans-fake\nVersion: 1.0\n")
    (info / "top_level.txt").write_text("fewtrans_fake\n")
    (info / "RECORD").write_text("fewtrans_fake/__init__.py,,\n")


def test_editing_a_plugin_without_a_version_bump_changes_its_digest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib
    import importlib.metadata

    from fewtrans_board.registry.files import compute_files_sha256

    site = tmp_path / "site"
    _fake_distribution(site, "SCALE = 1.0\n")
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    first = compute_files_sha256("fewtrans-fake")
    assert first is not None and compute_files_sha256("fewtrans_fake") == first
    (site / "fewtrans_fake" / "__pycache__").mkdir()
    (site / "fewtrans_fake" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\0")
    assert compute_files_sha256("fewtrans-fake") == first  # byte-code caches do not count
    _fake_distribution(site, "SCALE = 2.0\n")  # edited in place, same version
    assert importlib.metadata.version("fewtrans-fake") == "1.0"
    assert compute_files_sha256("fewtrans-fake") not in (None, first)
    assert compute_files_sha256("fewtrans-no-such-distribution") is None


def test_a_run_records_the_digest_and_verification_compares_a_plugins(probe: Probe) -> None:
    from types import SimpleNamespace

    from fewtrans_board.leaderboard.verification import check_plugin_files
    from fewtrans_board.registry.files import files_sha256
    from fewtrans_board.results.load import load_run

    run = load_run(probe.run("full"))
    digest = files_sha256("fewtrans-board")
    assert digest is not None
    assert run.provenance.model.files_sha256 == digest  # built-ins: fewtrans-board's files
    assert run.provenance.adapter.files_sha256 == digest
    # The judge's own code is not compared: a checkout past the release still verifies.
    check_plugin_files(run, {"fewtrans-board": digest})
    check_plugin_files(run, {"fewtrans_board": "0" * 64})
    # A plugin's recorded digest is: the same files pass, edited files are refused.
    record = run.provenance
    plugin = record.adapter.model_copy(
        update={"distribution": "fewtrans-fake", "version": "1.0", "files_sha256": "a" * 64}
    )
    stub = SimpleNamespace(
        dataset=run.dataset, provenance=record.model_copy(update={"adapter": plugin})
    )
    check_plugin_files(stub, {"fewtrans_fake": "a" * 64})  # type: ignore[arg-type]
    with pytest.raises(SubmissionError) as err:
        check_plugin_files(stub, {"fewtrans-fake": "0" * 64})  # type: ignore[arg-type]
    message = str(err.value)
    assert err.value.code == "plugin-files-mismatch" and "\n" not in message
    assert "fewtrans-fake 1.0" in message and "a" * 16 in message and "0" * 16 in message
    with pytest.raises(SubmissionError, match=r"\(none found\)"):
        check_plugin_files(stub, {})  # type: ignore[arg-type]


def test_runs_that_predate_the_digest_are_still_accepted() -> None:
    """Runs without a digest (the committed entries before it) are judged on their pin alone."""
    from types import SimpleNamespace

    from fewtrans_board.leaderboard.verification import check_plugin_files
    from fewtrans_board.results.load import load_run

    run = load_run(next((REPO / "leaderboard" / "results").rglob("run.json")).parent)
    record = run.provenance
    plugin = record.adapter.model_copy(
        update={"distribution": "fewtrans-fake", "files_sha256": None}
    )
    stub = SimpleNamespace(
        dataset=run.dataset, provenance=record.model_copy(update={"adapter": plugin})
    )
    check_plugin_files(stub, {"fewtrans-fake": "0" * 64})  # type: ignore[arg-type]


def test_a_malformed_digest_is_refused_by_the_schema(probe: Probe) -> None:
    from fewtrans_board.results.documents import RunProvenance
    from fewtrans_board.results.load import load_run

    meta = load_run(probe.run("full")).meta
    RunProvenance.from_json(meta, "shard metadata", intake=True)
    for role in ("model", "adapter"):
        bad = {**meta, role: {**meta[role], "files_sha256": "not a digest"}}
        with pytest.raises(SubmissionError, match=f"{role}.files_sha256"):
            RunProvenance.from_json(bad, "shard metadata", intake=True)


@pytest.mark.slow
def test_the_plugin_worker_reports_the_digest_evaluate_records() -> None:
    """What verification compares: the files as the (sandboxed) worker sees them."""
    from fewtrans_board.core.sandbox.bwrap import sandbox_problem
    from fewtrans_board.registry.files import files_sha256
    from fewtrans_board.registry.lookup import Registry
    from fewtrans_board.runner.plan import plan_run
    from fewtrans_board.runner.session import RunSession
    from fewtrans_board.runner.spec import RunSpec

    spec = RunSpec(
        model="demo-cnn.digits",
        adapter="mean-centroid",
        manifest=str(SEARCH),
        limit=1,
        isolation="sandbox" if sandbox_problem() is None else "process",
    )
    registry = Registry.from_plugin_manager(get_plugin_manager(entry_points=False))
    with RunSession(plan_run(spec, registry)) as session:
        info = session.worker.info
        assert info is not None
        assert info.files == {"fewtrans-board": files_sha256("fewtrans-board")}
