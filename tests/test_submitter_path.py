"""The submitter's path without traps (issue 41, items 1-4).

Protocol defaults follow the sub-benchmark's leaderboard protocol (checked against the
committed entries' own ``submission.toml`` files, read here with tomllib); ``hpe search
--grid`` searches a non-axis option as a cross product (against a scorer whose optimum is
known by construction); progress lines carry rates and ETAs computed by hand; ``leaderboard
add`` reuses only this installation's record of a verification, never a report a bundle
carries; the template's id is a placeholder no entry uses; ``pack`` lists every problem.
"""

from __future__ import annotations

import json
import math
import tomllib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from fewtrans_board import Adapter, AdapterConfig, hparam
from fewtrans_board.core.errors import FewtransError, SubmissionError
from fewtrans_board.registry.manager import get_plugin_manager
from tests.conftest import VARIED_DIGITS, shared_folder

REPO = Path(__file__).resolve().parents[1]
STORE = REPO / "leaderboard"


def committed_protocols() -> dict[str, Counter[str]]:
    """``{benchmark: Counter(protocol)}`` of the committed entries, read from their files."""
    out: dict[str, Counter[str]] = {}
    for path in sorted((STORE / "submissions").glob("*/submission.toml")):
        meta = tomllib.loads(path.read_text())["submission"]
        out.setdefault(meta["benchmark"], Counter())[meta["hpe_protocol"]] += 1
    return out


def run_cli(args: list[str], **kwargs: Any) -> Any:
    from click.testing import CliRunner

    from fewtrans_board.cli import make_cli

    result = CliRunner().invoke(
        make_cli(get_plugin_manager(entry_points=False)), args, catch_exceptions=False, **kwargs
    )
    return result


# --- item 1: each sub-benchmark names its leaderboard protocol -------------------------------


def test_each_sub_benchmark_ranks_under_a_protocol_it_accepts_and_the_demos_match_their_entries() -> (
    None
):
    from fewtrans_board.leaderboard.sub_benchmarks import SUB_BENCHMARKS, SubBenchmark

    for benchmark in SUB_BENCHMARKS.values():
        assert benchmark.leaderboard_protocol in benchmark.hpe_protocols, benchmark.name
    # Every committed entry of a sub-benchmark is ranked under its leaderboard protocol: a
    # default run lands in the same ranking as the committed ones.
    for name, protocols in committed_protocols().items():
        assert set(protocols) == {SUB_BENCHMARKS[name].leaderboard_protocol}, name
    with pytest.raises(ValueError, match="not one of"):
        SubBenchmark("x", "X", "x", (), hpe_protocols=("single",), leaderboard_protocol="published")


def test_sub_benchmarks_shows_the_protocol_and_the_entries_under_each() -> None:
    counts = committed_protocols()
    result = run_cli(["sub-benchmarks", "--leaderboard", str(STORE)])
    assert result.exit_code == 0, result.output
    demo = ("\n" + result.stdout).split("\ndemo: ", 1)[1].split("\nfewtrans-models:", 1)[0]
    n = counts["demo"]["fewtrans-reference"]
    assert f"leaderboard protocol: fewtrans-reference (the --hpe default; {n} entries" in demo
    assert "other HPE protocols, ranked apart: fewtrans-paper (0 entries)" in demo
    rows = json.loads(run_cli(["sub-benchmarks", "--json", "--leaderboard", str(STORE)]).stdout)
    by_name = {r["name"]: r for r in rows}
    assert by_name["demo-clip-inductive"]["entries"] == dict(counts["demo-clip-inductive"])
    assert by_name["fewtrans-models"]["leaderboard_protocol"] == "fewtrans-paper"


def test_the_default_protocol_is_said_and_another_one_names_who_it_ranks_with() -> None:
    from fewtrans_board.cli.protocol_choice import protocol_for_benchmark, protocol_for_manifest

    chosen = protocol_for_manifest(None, VARIED_DIGITS, STORE)
    assert chosen.protocol == "fewtrans-reference" and not chosen.warning
    assert "leaderboard protocol of sub-benchmark demo" in chosen.line
    other = protocol_for_manifest("fewtrans-paper", VARIED_DIGITS, STORE)
    assert other.protocol == "fewtrans-paper" and other.warning
    assert other.line.startswith("Warning: --hpe fewtrans-paper") and "\n" not in other.line
    assert "linear-probe--demo-cnn" in other.line  # the board it leaves
    assert "ranked only with the fewtrans-paper entries (no entry yet)" in other.line
    # A manifest of no sub-benchmark keeps FewTrans's definition, and says why.
    loose = protocol_for_manifest(None, "my-own.parquet", STORE)
    assert loose.protocol == "fewtrans-paper" and "belongs to no sub-benchmark" in loose.line
    # The two CLIP settings share a manifest and a protocol.
    clip = protocol_for_manifest(None, "clip-kshot--digits-5-9.parquet", STORE)
    assert clip.protocol == "published" and "demo-clip-partially-transductive" in clip.line
    assert protocol_for_benchmark(None, "bscd").protocol == "fewtrans-paper"


def test_hpe_grid_follows_the_benchmark() -> None:
    # fewtrans-reference: linear probe's one learning rate x{1/5, 1, 5} at fixed epochs
    # (3 configurations); fewtrans-paper: 5 learning rates x 3 epoch counts (15).
    args = ["hpe", "grid", "--adapter", "linear-probe", "--json"]
    demo = run_cli([*args, "--benchmark", "demo"])
    assert demo.exit_code == 0 and len(json.loads(demo.stdout)["grid"]) == 3
    plain = run_cli(args)
    assert len(json.loads(plain.stdout)["grid"]) == 15
    bad = run_cli([*args, "--benchmark", "nope"])
    assert bad.exit_code == 2 and "no sub-benchmark 'nope'" in bad.output


@pytest.fixture(scope="module")
def limited_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Two one-episode mean-centroid runs on the demo manifest: by default and under --hpe."""

    def build(folder: Path) -> None:
        base = ["evaluate", "--model", "demo-cnn.digits", "--adapter", "mean-centroid"]
        base += ["--manifest", str(VARIED_DIGITS), "--limit", "2", "--device", "cpu"]
        base += ["--leaderboard", str(STORE), "--threads", "1"]
        outputs = {}
        for name, extra in (("default", []), ("paper", ["--hpe", "fewtrans-paper"])):
            result = run_cli(
                [*base, *extra, "--out", str(folder / name)],
                env={"FEWTRANS_PROGRESS_EVERY_S": "0"},
            )
            assert result.exit_code == 0, result.output
            outputs[name] = result.stderr
        (folder / "stderr.json").write_text(json.dumps(outputs))

    folder = shared_folder(tmp_path_factory, "submitter-path-runs", build)
    return {"folder": folder, "stderr": json.loads((folder / "stderr.json").read_text())}


def test_evaluate_defaults_to_the_benchmark_protocol_and_logs_progress(limited_runs) -> None:  # type: ignore[no-untyped-def]
    from fewtrans_board.results.load import load_run

    folder, stderr = limited_runs["folder"], limited_runs["stderr"]
    assert load_run(folder / "default").provenance.identity.hpe == "fewtrans-reference"
    assert load_run(folder / "paper").provenance.identity.hpe == "fewtrans-paper"
    said = [line for line in stderr["default"].splitlines() if line.startswith("HPE protocol")]
    assert said == [
        "HPE protocol: fewtrans-reference, the leaderboard protocol of sub-benchmark demo "
        "(--hpe chooses another)"
    ]
    warned = [line for line in stderr["paper"].splitlines() if "--hpe fewtrans-paper" in line]
    assert len(warned) == 1
    # stderr is not a terminal here: plain progress lines (every update, as the env asks),
    # never a redrawn bar.
    lines = [line for line in stderr["default"].splitlines() if " on digits: " in line]
    assert "\r" not in stderr["default"]
    assert lines[0].startswith("mean-centroid x 1 configs on digits: 1/2 episodes (50%)")
    assert "left" in lines[0] and "2/2 episodes (100%) in" in lines[-1]


# --- item 3: progress that reaches a log --------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_log_lines_carry_count_rate_and_time_left_at_most_every_interval() -> None:
    from fewtrans_board.core.progress import LogMeter

    clock, lines = FakeClock(), []
    meter = LogMeter(10, "evaluate", "episode", lines.append, every_s=30, clock=clock)
    clock.now += 20
    meter.update(4)  # 20 s < 30 s: silent
    assert lines == []
    clock.now += 20
    meter.update(1)  # 5 episodes in 40 s: 8 s each, 5 left -> 40 s
    assert lines == ["evaluate: 5/10 episodes (50%), 8 s/episode, about 40 s left (40 s so far)"]
    clock.now += 10
    meter.update(5)  # 10 s after the last line: silent until the step ends
    meter.close()
    assert lines[-1] == "evaluate: 10/10 episodes (100%) in 50 s, 5 s/episode"
    quiet = LogMeter(3, "short", "episode", lines.append, every_s=30, clock=clock)
    quiet.update(3)
    quiet.close()  # a step that never printed stays silent
    assert len(lines) == 2
    fast = LogMeter(None, "search", "config", lines.append, every_s=0, clock=clock)
    clock.now += 2
    fast.update(10)
    assert lines[-1] == "search: 10 configs, 5 configs/s (2 s so far)"


def test_a_terminal_gets_a_bar_a_log_gets_lines_quiet_gets_nothing() -> None:
    import io

    from fewtrans_board.core.progress import LogMeter, NullMeter, progress_meter

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert isinstance(progress_meter(5, "x", "episode", stream=io.StringIO()), LogMeter)
    assert isinstance(progress_meter(5, "x", "episode", enabled=False), NullMeter)
    bar = progress_meter(5, "x", "episode", stream=Terminal())
    assert type(bar).__name__ == "tqdm"
    bar.close()


# --- item 2: hpe search --grid ------------------------------------------------------------------


class PullProbe(Adapter):
    """A prototype-anchored probe's declarations (never fitted: the scorer is synthetic)."""

    name = "pull-probe"
    description = "Prototype-anchored linear probe (test)."
    trains = "linear head"

    @dataclass(frozen=True)
    class Config(AdapterConfig):
        lr: float = hparam(0.01, "Learning rate.", hpe="lr")
        epochs: int = hparam(10, "Epochs.", hpe="epochs")
        pull: float = hparam(1.0, "Pull towards the prototypes.", min=0)

    def fit(self, backbone, support, class_names, config):  # type: ignore[no-untyped-def]
        raise NotImplementedError


def synthetic_score(configs: list[AdapterConfig]) -> list[float]:
    """Best at lr 0.05, epochs 20, pull 0.5 (separable, so each axis can be read alone)."""
    out = []
    for c in configs:
        v = c.to_dict()
        out.append(
            90
            - 5 * (math.log10(v["lr"]) - math.log10(0.05)) ** 2
            - 0.01 * (v["epochs"] - 20) ** 2
            - 4 * abs(v["pull"] - 0.5)
        )
    return out


def test_the_search_covers_a_non_axis_option_as_a_cross_product() -> None:
    from fewtrans_board.hpe.search import centre_search

    seen: list[dict[str, Any]] = []

    def score(configs: list[AdapterConfig]) -> list[float]:
        seen.extend(c.to_dict() for c in configs)
        return synthetic_score(configs)

    result = centre_search(PullProbe, PullProbe.Config(), score, options={"pull": [0.1, 0.5, 2]})
    assert result.centre["pull"] == 0.5
    assert result.centre["lr"] == 0.05 and result.centre["epochs"] == 20
    assert result.options == {"pull": [0.1, 0.5, 2.0]}
    first = result.rounds[0]["grid"]
    assert len(first) == 3 * 3 * 3  # lr x epochs x pull
    for round_ in result.rounds:  # every axis point of every round with every pull value
        points = Counter((p["config"]["lr"], p["config"]["epochs"]) for p in round_["grid"])
        assert set(points.values()) == {3}
    assert len({json.dumps(s, sort_keys=True) for s in seen}) == len(seen)  # scored once each


def test_grid_options_are_checked_before_anything_runs() -> None:
    from fewtrans_board.cli.hpe_cmd import parse_grid_options
    from fewtrans_board.hpe.search import grid_options

    start = PullProbe.Config()
    assert grid_options(PullProbe, start, {"pull": [1, 2]}) == {"pull": [1.0, 2.0]}
    for options, message in (
        ({"lr": [0.1]}, "is an HPE axis"),
        ({"push": [1]}, "has no option 'push'"),
        ({"pull": [1, 1]}, "distinct values"),
    ):
        with pytest.raises(FewtransError, match=message):
            grid_options(PullProbe, start, options)
    with pytest.raises(FewtransError, match="pull"):
        grid_options(PullProbe, start, {"pull": [-1]})  # below its min
    assert parse_grid_options(("pull=0.1,0.5",), ()) == {"pull": [0.1, 0.5]}
    import click

    for bad, config in ((("pull",), ()), (("pull=",), ()), (("pull=1",), ("pull=2",))):
        with pytest.raises(click.BadParameter):
            parse_grid_options(bad, config)


def test_hpe_search_grid_records_the_values_and_says_one_round(tmp_path: Path) -> None:
    out = tmp_path / "centre.json"
    args = ["hpe", "search", "--model", "demo-cnn.digits", "--adapter", "linear-probe"]
    args += ["--manifest", str(STORE / "manifests" / "fewtrans-search--digits.parquet")]
    args += ["--limit", "1", "--max-rounds", "1", "--config", "epochs=1", "--device", "cpu"]
    args += ["--grid", "batch_size=8,512", "--out", str(out)]
    result = run_cli(args)
    assert result.exit_code == 0, result.output
    record = json.loads(out.read_text())
    assert record["grid_options"] == {"batch_size": [8, 512]}
    assert record["centre"]["batch_size"] in (8, 512)
    # lr_head x{/2, 1, x2} x epochs {1, 2} (1 is the ladder's bottom) x batch_size {8, 512}
    assert len(record["log"][0]["grid"]) == 3 * 2 * 2
    assert ", 1 round, " in result.stdout and "1 rounds" not in result.stdout
    assert f"batch_size: {record['centre']['batch_size']!r} chosen of 8, 512" in result.stdout


# --- item 4: template, pack, one verification per bundle ----------------------------------------


def test_the_template_proposes_an_unused_placeholder_id_that_add_refuses() -> None:
    from fewtrans_board.leaderboard.intake import check_named
    from fewtrans_board.leaderboard.meta import read_meta

    result = run_cli(
        ["submission", "template", "--benchmark", "demo", "--model", "demo-cnn.digits"]
    )
    assert result.exit_code == 0, result.output
    meta = read_meta(result.stdout.encode())
    stored = {p.name for p in (STORE / "submissions").iterdir()}
    assert meta.id not in stored and meta.id.startswith("my-method--")
    assert meta.hpe_protocol == "fewtrans-reference" and meta.benchmark == "demo"
    with pytest.raises(SubmissionError, match=r"placeholder-id.*name your entry"):
        check_named(meta, "submission.toml")
    check_named(read_meta(result.stdout.replace(meta.id, "proto-probe--demo").encode()), "x")
    clip = run_cli(["submission", "template", "--benchmark", "demo-clip-inductive"])
    assert read_meta(clip.stdout.encode()).hpe_protocol == "published"


def test_pack_names_each_folder_it_was_given_and_lists_every_problem(
    limited_runs, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    folder = limited_runs["folder"]
    meta = tmp_path / "submission.toml"
    meta.write_text(
        run_cli(["submission", "template", "--adapter", "mean-centroid"]).stdout.replace(
            "my-method--demo-cnn.digits", "mc--demo"
        )
    )
    runs = [folder / "default", folder / "paper"]
    result = run_cli(
        ["submission", "pack", *map(str, runs), "--meta", str(meta), "--out", str(tmp_path / "b.zip"),
         "--leaderboard", str(STORE)]
    )  # fmt: skip
    assert result.exit_code == 1 and not (tmp_path / "b.zip").exists()
    assert "problems: (1)" in result.output and "(2)" in result.output
    for run in runs:  # each named as given, not as results/<name> inside a bundle
        assert str(run) in result.output


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """test_submissions' valid linear-probe bundle (shared with it: built once per run)."""
    from tests.test_submissions import build_valid_bundle

    return shared_folder(tmp_path_factory, "submission", build_valid_bundle) / "bundle.zip"


class CountedVerifications(list):  # type: ignore[type-arg]
    """The digests verified; with ``tamper`` set, the next one rewrites an extracted file
    (what an unsandboxed worker that reaches the judge's folder could do) and still passes."""

    tamper = False


@pytest.fixture
def counted_verifications(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> CountedVerifications:
    """Stand in for the sandboxed re-run (its own tests cover it) and count the calls."""
    import fewtrans_board.leaderboard.intake as intake

    monkeypatch.setenv("FEWTRANS_VERIFY_RECORDS", str(tmp_path / "records"))
    calls = CountedVerifications()

    def fake_verify(contents, store, options=None, *, runs=None):  # type: ignore[no-untyped-def]
        digest = contents.digest()
        calls.append(digest)
        if calls.tamper:
            calls.tamper = False
            run_json = next(p for n, p in contents.files.items() if n.endswith("run.json"))
            run_json.write_text(run_json.read_text() + " ")
        return {"digest": digest, "seed": "ab" * 32, "passed": True, "datasets": []}

    monkeypatch.setattr(intake, "verify_contents", fake_verify)
    return calls


def fresh_store(tmp_path: Path) -> Any:
    import shutil

    from fewtrans_board.leaderboard.store import LeaderboardStore

    shutil.copytree(STORE / "manifests", tmp_path / "store" / "manifests")
    return LeaderboardStore(tmp_path / "store")


def test_add_after_verify_reuses_this_installations_verification(
    bundle: Path, counted_verifications: CountedVerifications, tmp_path: Path
) -> None:
    from fewtrans_board.leaderboard.intake import Verification, add_bundle, verify_bundle
    from fewtrans_board.leaderboard.verification import VerificationOptions

    store = fresh_store(tmp_path)
    verify_bundle(bundle, store)
    result = add_bundle(bundle, store, Verification())
    assert len(counted_verifications) == 1 and result.reused is not None
    assert result.verification is not None and result.verification["passed"]
    # Other options are another experiment: a given seed is re-run.
    other = fresh_store(tmp_path / "again")
    seeded = Verification(options=VerificationOptions(seed="cd" * 32))
    assert add_bundle(bundle, other, seeded).reused is None
    assert len(counted_verifications) == 2


def test_a_bundle_carrying_its_own_report_is_still_re_run(
    bundle: Path, counted_verifications: CountedVerifications, tmp_path: Path
) -> None:
    """Red team: a report inside the bundle (centre-search.json keeps unknown keys), even one
    naming the bundle's digest and passing, is never taken for this installation's; nor is a
    verification during which the extracted files changed (fails without the digest check
    after verifying: the second add reused it)."""
    import zipfile

    from fewtrans_board.leaderboard.intake import Verification, add_bundle
    from fewtrans_board.leaderboard.verify_records import find_record, record_key

    forged = tmp_path / "forged.zip"
    with zipfile.ZipFile(bundle) as src, zipfile.ZipFile(forged, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename.endswith("centre-search.json"):
                record = json.loads(data)
                record["verification"] = {"passed": True, "digest": "0" * 64, "reused": True}
                data = json.dumps(record).encode()
            dst.writestr(info, data)
    store = fresh_store(tmp_path)
    result = add_bundle(forged, store, Verification())
    assert result.reused is None and len(counted_verifications) == 1
    # A verification during which the extracted files changed is refused, and not
    # remembered: the next add of the same bundle is re-run, not waved through.
    counted_verifications.tamper = True
    with pytest.raises(SubmissionError, match="changed-during-check"):
        add_bundle(bundle, fresh_store(tmp_path / "tampered"), Verification())
    again = add_bundle(bundle, fresh_store(tmp_path / "after"), Verification())
    assert again.reused is None and len(counted_verifications) == 3
    # A record of another bundle's digest is no record of this one.
    key = record_key("0" * 64, {"fewtrans-board": "0.1.0"}, Verification().options)
    assert find_record(tmp_path / "records", key) is None


def test_a_record_is_found_only_under_its_own_key(tmp_path: Path) -> None:
    from fewtrans_board.leaderboard.verification import VerificationOptions
    from fewtrans_board.leaderboard.verify_records import find_record, record_key, save_record

    pins = {"fewtrans-board": "0.1.0"}
    key = record_key("a" * 64, pins, VerificationOptions())
    report = {"digest": "a" * 64, "passed": True}
    path = save_record(tmp_path, key, report)
    assert path is not None and find_record(tmp_path, key) == (report, path)
    for options in (
        VerificationOptions(sample=5),
        VerificationOptions(secret=b"s"),
        VerificationOptions(seed="ef" * 32),
        VerificationOptions(device="cuda"),
    ):
        assert find_record(tmp_path, record_key("a" * 64, pins, options)) is None
    assert find_record(tmp_path, record_key("b" * 64, pins, VerificationOptions())) is None
    assert save_record(tmp_path, key, {"digest": "a" * 64, "passed": False}) is None
    path.write_text(json.dumps({"key": key, "report": {**report, "passed": False}}))
    assert find_record(tmp_path, key) is None  # an edited record that did not pass


def test_preflight_says_when_fit_many_is_the_default_and_there_is_nothing_to_compare() -> None:
    from click.testing import CliRunner

    from fewtrans_board.cli import make_cli
    from tests.conftest import CentroidAdapter, adapter_plugin

    assert not CentroidAdapter.overrides_fit_many()  # it inherits Adapter.fit_many
    pm = get_plugin_manager(
        entry_points=False, extra_plugins={"mine": adapter_plugin(CentroidAdapter)}
    )
    args = ["preflight", "--model", "demo-cnn.digits", "--adapter", "test-centroid"]
    args += ["--hpe", "single", "--episodes", "1", "--isolation", "inline", "--device", "cpu"]
    args += ["--quiet"]
    result = CliRunner().invoke(make_cli(pm), args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert (
        "  --  fit() against fit_many(): nothing to compare, test-centroid inherits the default "
        "fit_many (fit() once per configuration)"
    ) in result.stdout
    assert "fit_many" in make_cli(pm).commands["preflight"].help  # and --help says when
