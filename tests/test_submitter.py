"""What a method author needs on the way to a submission: early warnings, sub-benchmark
listing, protocol-aware comparison, messages that say what is missing, light imports."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from fewtrans_board.cli import make_cli
from fewtrans_board.episodes.manifest import Manifest
from fewtrans_board.leaderboard.eligibility import submission_problems
from fewtrans_board.leaderboard.store import LeaderboardStore
from fewtrans_board.leaderboard.sub_benchmarks import SUB_BENCHMARKS
from fewtrans_board.registry.manager import get_plugin_manager
from tests.conftest import REPO, extra_benchmark

MANIFESTS = REPO / "leaderboard" / "manifests"
VARIED = MANIFESTS / "fewtrans-varied--digits.parquet"
SEARCH = MANIFESTS / "fewtrans-search--digits.parquet"
ROLES = {"lr_head": "lr", "epochs": "epochs"}
CENTRE = {"lr_head": 0.2, "epochs": 50, "batch_size": 512}


def run(args: list[Any]) -> Result:
    cli = make_cli(get_plugin_manager(entry_points=False))
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def ok(args: list[Any]) -> Result:
    result = run(args)
    assert result.exit_code == 0, result.output
    return result


def problems(manifest: Path = VARIED, hpe: str = "fewtrans-paper", **changes: Any) -> list[str]:
    options: dict[str, Any] = {
        "roles": ROLES,
        "centre": CENTRE,
        "centre_record": {"dataset": "digits", "centre": CENTRE},
        "limit": None,
        "store": LeaderboardStore(REPO / "leaderboard"),
        **changes,
    }
    return submission_problems(manifest, Manifest.load(manifest), hpe, **options)


# --- evaluate warns before it starts --------------------------------------------------


@pytest.mark.slow
def test_a_submittable_run_has_no_problem() -> None:
    assert problems() == []
    assert problems(hpe="fewtrans-reference", store=None) == []


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"limit": 5}, "--limit 5 evaluates part of the manifest"),
        ({"hpe": "single"}, "accept the HPE protocols fewtrans-paper, fewtrans-reference, not 'single'"),
        ({"manifest": SEARCH}, "fewtrans-search--digits.parquet is not a frozen manifest of any sub-benchmark"),
        ({"centre_record": None}, "no centre search: an adapter with HPE axes (lr_head, epochs)"),
        ({"centre_record": {"dataset": "cub", "centre": CENTRE}}, "searched on 'cub'; these sub-benchmarks accept searches on digits only"),
        ({"centre": {**CENTRE, "lr_head": 0.5}}, "--config moves lr_head away from the searched centre"),
    ],
)  # fmt: skip
def test_each_reason_a_run_cannot_be_submitted(changes: dict[str, Any], expected: str) -> None:
    found = problems(**changes)
    assert any(expected in p for p in found), found


def test_a_training_free_adapter_needs_no_centre_search() -> None:
    assert problems(roles={}, centre_record=None) == []


def test_a_copy_that_differs_from_the_frozen_manifest_is_named(tmp_path: Path) -> None:
    copy = tmp_path / VARIED.name
    ok(["manifest", "build", "--protocol", "fewtrans-varied", "--dataset", "digits",
        "--episodes", "3", "--out", copy])  # fmt: skip
    assert any("differs from the frozen" in p for p in problems(manifest=copy))


@pytest.mark.slow
def test_evaluate_warns_up_front_and_json_carries_the_warnings(tmp_path: Path) -> None:
    args = ["evaluate", "--model", "demo-cnn.digits", "--adapter", "linear-probe"]
    args += ["--manifest", VARIED, "--limit", "1", "--config", "epochs=1", "--device", "cpu"]
    args += ["--threads", "1", "--quiet", "--leaderboard", REPO / "leaderboard"]
    text = ok([*args, "--out", tmp_path / "a"]).output
    warnings = [line for line in text.splitlines() if line.startswith("Warning: not submittable")]
    assert len(warnings) == 2 and "--limit 1" in warnings[0] and "no centre search" in warnings[1]
    assert text.index("Warning:") < text.index(str(tmp_path / "a"))  # before the run's report
    report = json.loads(ok([*args, "--out", tmp_path / "b", "--json"]).output)
    assert len(report["warnings"]) == 2 and "--limit 1" in report["warnings"][0]


# --- benchmarks ------------------------------------------------------------------------


def test_benchmarks_lists_every_sub_benchmark_from_the_live_table() -> None:
    with extra_benchmark("added-here", "x.parquet"):
        rows = json.loads(ok(["sub-benchmarks", "--json"]).output)
        text = ok(["sub-benchmarks"]).output
    assert [r["name"] for r in rows] == [*SUB_BENCHMARKS, "added-here"]
    demo = next(r for r in rows if r["name"] == "demo")
    assert demo["hpe_protocols"] == ["fewtrans-paper", "fewtrans-reference"]
    assert demo["held_out"] == ["digits"]
    assert demo["manifests"][0]["file"] == "fewtrans-varied--digits.parquet"
    assert demo["manifests"][0]["build"].startswith("fewtrans-board manifest build")
    assert "added-here: Added-Here" in text and "centre search on: digits" in text


# --- compare across protocols ----------------------------------------------------------


@pytest.fixture(scope="module")
def two_protocols(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    work = tmp_path_factory.mktemp("compare")
    runs = {}
    for protocol in ("fewtrans-paper", "fewtrans-reference"):
        for adapter in ("mean-centroid", "linear-probe"):
            out = work / f"{adapter}-{protocol}"
            ok(["evaluate", "--model", "demo-cnn.digits", "--adapter", adapter, "--manifest",
                SEARCH, "--limit", "4", "--hpe", protocol, "--config",
                *(["epochs=1"] if adapter == "linear-probe" else ["normalize=false"]),
                "--device", "cpu", "--threads", "1", "--quiet", "--out", out])  # fmt: skip
            runs[f"{adapter}/{protocol}"] = out
    return runs


@pytest.mark.slow
def test_compare_refuses_runs_scored_under_different_protocols(
    two_protocols: dict[str, Path],
) -> None:
    a, b = (
        two_protocols["linear-probe/fewtrans-paper"],
        two_protocols["mean-centroid/fewtrans-reference"],
    )
    refused = run(["compare", a, b])
    assert refused.exit_code == 1
    assert "A was scored under HPE protocol fewtrans-paper (logit-mean)" in refused.output
    assert "--allow-protocol-mismatch" in refused.output
    allowed = ok(["compare", a, b, "--allow-protocol-mismatch"]).output
    assert allowed.startswith("WARNING: A and B were scored under different HPE protocols")
    assert "[HPE fewtrans-paper, logit-mean]" in allowed
    assert "[HPE fewtrans-reference, vote]" in allowed


def test_compare_shows_the_shared_protocol(two_protocols: dict[str, Path]) -> None:
    a = two_protocols["linear-probe/fewtrans-reference"]
    b = two_protocols["mean-centroid/fewtrans-reference"]
    text = ok(["compare", a, b]).output
    assert "WARNING" not in text and text.count("[HPE fewtrans-reference, vote]") == 2
    report = json.loads(ok(["compare", a, b, "--json"]).output)
    assert report["protocol_mismatch"] is False
    assert report["protocols"]["a"] == {
        "name": "fewtrans-reference",
        "version": 1,
        "aggregation": "vote",
    }


# --- [incomplete] says what is missing ------------------------------------------------


@pytest.fixture(scope="module")
def tiny_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("tiny-store")
    ok(["manifest", "build", "--protocol", "fewtrans-varied", "--dataset", "digits",
        "--episodes", "4", "--out", root / "leaderboard" / "manifests" / "tiny.parquet"])  # fmt: skip
    (root / "meta.toml").write_text(
        '[submission]\nid = "tiny"\nmethod = "m"\nmodel = "demo-cnn.digits"\n'
        'adapter = "mean-centroid"\nbenchmark = "tiny"\nhpe_protocol = "fewtrans-reference"\n'
        'authors = ["A"]\nhardware = "CPU"\nplugins = ["fewtrans-board==0.1.0"]\n'
    )
    with extra_benchmark("tiny", "tiny.parquet"):
        yield root


@pytest.mark.slow
@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--limit", "2"], r"evaluated only the first 2 episodes \(evaluate --limit\); evaluate every episode of the manifest, without --limit"),
        (["--shards", "2", "--shard", "0/2"], r"1 of 2 shards are finished, shard\(s\) 1 missing; run the same evaluate command again"),
    ],
)  # fmt: skip
def test_an_incomplete_run_is_refused_saying_what_is_missing(
    tiny_store: Path, tmp_path: Path, extra: list[str], message: str
) -> None:
    ok(["evaluate", "--model", "demo-cnn.digits", "--adapter", "mean-centroid",
        "--manifest", tiny_store / "leaderboard" / "manifests" / "tiny.parquet",
        "--hpe", "fewtrans-reference", "--device", "cpu", "--threads", "1", "--quiet",
        "--out", tmp_path / "run", *extra])  # fmt: skip
    refused = run(["submission", "pack", tmp_path / "run", "--meta", tiny_store / "meta.toml",
                   "--out", tmp_path / "b.zip", "--leaderboard", tiny_store / "leaderboard"])  # fmt: skip
    assert refused.exit_code == 1 and "[incomplete]" in refused.output
    assert re.search(message, refused.output), refused.output
    assert not (tmp_path / "b.zip").exists()


# --- validate imports the plugin the way fewtrans-board does ---------------------------

HEAVY_PLUGIN = """
import torch  # at import time: every fewtrans-board command would pay for it

from fewtrans_board import hookimpl
from fewtrans_board.methods.adapters.prototypes import MeanCentroidAdapter


class HeavyAdapter(MeanCentroidAdapter):
    name = "heavy-centroid"


@hookimpl
def register_adapters(register):
    register(HeavyAdapter)
"""


@pytest.mark.slow
def test_validate_refuses_a_plugin_that_imports_torch_at_import_time(tmp_path: Path) -> None:
    from tests.conftest import installed_distribution

    (tmp_path / "fewtrans_heavy.py").write_text(HEAVY_PLUGIN)
    with installed_distribution(tmp_path, "fewtrans-heavy", "0.1", "fewtrans_heavy"):
        cli = make_cli(get_plugin_manager(allow=["fewtrans-heavy"]))
        args = ["preflight", "--model", "demo-cnn.digits", "--adapter", "heavy-centroid"]
        args += ["--manifest", str(SEARCH), "--episodes", "1", "--device", "cpu"]
        result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 1
    assert "importing fewtrans_heavy" in result.output and "imports torch" in result.output


def test_built_in_plugins_are_not_re_imported_by_validate() -> None:
    args = ["preflight", "--model", "demo-cnn.digits", "--adapter", "mean-centroid"]
    args += ["--manifest", SEARCH, "--episodes", "1", "--device", "cpu", "--json"]
    report = json.loads(ok(args).output)
    assert not any("does not import torch" in check for check in report["checks"])


# --- docs and packaging ------------------------------------------------------------------


def test_contributing_documents_what_an_adapter_may_use() -> None:
    text = (REPO / "CONTRIBUTING.md").read_text()
    step3 = text[text.index("3. **Write the adapter.**") : text.index("4. **Or write a model.**")]
    for needle in ("Backbone", "image_encoder", "embed", "frozen_backbone",
                   "support.images.features", "fit_many", "min=", "hpe search"):  # fmt: skip
        assert needle in step3, needle
    assert "adapters list" in text and "--options" in text


def test_listing_groups_say_where_their_options_live() -> None:
    for group in ("adapters", "models", "datasets"):
        assert f"'{group} list --help'" in ok([group, "--help"]).output


def test_setup_lists_every_package_folder() -> None:
    """setuptools warns at every install about importable folders missing from packages."""
    import runpy
    from unittest import mock

    with mock.patch("setuptools.setup") as setup:
        runpy.run_path(str(REPO / "setup.py"))
    packages = set(setup.call_args.kwargs["packages"])
    folders = {
        ".".join(p.relative_to(REPO).parts)
        for p in (REPO / "fewtrans_board").rglob("*")
        if p.is_dir()
        and "__pycache__" not in p.parts
        and "site_files" not in p.parts
        # a folder left holding only bytecode (its modules moved) is no package
        and any(child.name != "__pycache__" for child in p.iterdir())
    }
    folders |= {
        "fewtrans_board.site_files." + ".".join(p.relative_to(REPO / "site").parts)
        for p in (REPO / "site").rglob("*")
        if p.is_dir() and "__pycache__" not in p.parts
    }
    assert folders - packages == set()


def test_readme_documents_the_journey() -> None:
    text = (REPO / "README.md").read_text()
    for needle in ("fewtrans-board sub-benchmarks", "hpe search", "not submittable",
                   "--allow-protocol-mismatch", "timm:<name>.random", "--debug", "--threads"):  # fmt: skip
        assert needle in text, needle
