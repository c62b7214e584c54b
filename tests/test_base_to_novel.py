"""Base-to-novel: manifests draw unseen classes after the base episode; CLIP predictors score
them by name; results carry base, novel and the harmonic mean."""

from __future__ import annotations

import json
from itertools import islice
from pathlib import Path

import numpy as np
import pytest

from fewtrans_board.episodes.manifest import Manifest
from fewtrans_board.episodes.protocols import get_protocol
from fewtrans_board.episodes.samplers import ClassPool, VariedWayShotSampler
from fewtrans_board.registry.manager import get_plugin_manager
from fewtrans_board.results.load import load_run
from fewtrans_board.results.summary import harmonic_mean


def pm():  # type: ignore[no-untyped-def]
    from tests.plugins import tiny_models

    return get_plugin_manager(entry_points=False, extra_plugins={"tiny-clip": tiny_models})


def test_novel_draws_follow_the_base_draws_in_one_stream() -> None:
    pool = ClassPool(
        classes=(0, 1, 2),
        items=tuple(tuple(f"b{c}/{i}" for i in range(12)) for c in range(3)),
        novel_classes=(3, 4, 5, 6),
        novel_items=tuple(tuple(f"n{c}/{i}" for i in range(20)) for c in range(4)),
    )
    sampler = VariedWayShotSampler(novel_queries=15)
    draws = list(islice(sampler.stream(pool, 0), 5))
    plain = list(islice(VariedWayShotSampler().stream(pool, 0), 1))
    # Episode 0's base part is drawn first, exactly as without novel classes.
    assert draws[0].classes == plain[0].classes and draws[0].support == plain[0].support
    for draw in draws:
        assert 2 <= len(draw.novel_classes) <= 4 and set(draw.novel_classes) <= {3, 4, 5, 6}
        assert all(len(q) == 15 for q in draw.novel_query)
        assert not {i for q in draw.novel_query for i in q} & {i for q in draw.query for i in q}
    assert len({d.novel_classes for d in draws}) > 1


ZERO_SHOT_EPISODES = 3
"""Episodes of the shared zero-shot run's base-to-novel manifest (each one a fresh worker
process): a spread across episodes (CIs above zero) and every one re-run by verification."""


@pytest.fixture(scope="module")
def zero_shot_b2n(tmp_path_factory: pytest.TempPathFactory) -> dict:  # type: ignore[type-arg]
    """A short base-to-novel digits manifest in a fresh store and the zero-shot tiny CLIP's
    run on it (with ``evaluate --json``'s output), made once per test run: read only."""
    from click.testing import CliRunner

    from fewtrans_board.cli import make_cli
    from fewtrans_board.leaderboard.store import LeaderboardStore
    from tests.conftest import shared_folder

    def build(folder: Path) -> None:
        app = make_cli(pm())
        manifest = LeaderboardStore(folder / "leaderboard").manifests_dir / "b2n.parquet"
        args = ["--protocol", "fewtrans-base2novel", "--dataset", "digits"]
        args += ["--episodes", str(ZERO_SHOT_EPISODES), "--out", str(manifest)]
        result = CliRunner().invoke(app, ["manifest", "build", *args], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        args = ["--model", "tiny-clip.test", "--adapter", "zero-shot-clip"]
        args += ["--manifest", str(manifest), "--out", str(folder / "zs")]
        result = CliRunner().invoke(
            app, ["evaluate", *args, "--quiet", "--device", "cpu", "--json"], catch_exceptions=False
        )
        assert result.exit_code == 0, result.output
        (folder / "evaluate.json").write_text(result.output)

    folder = shared_folder(tmp_path_factory, "b2n-zero-shot-run", build)
    store = folder / "leaderboard"
    return {
        "store": store,
        "manifest": store / "manifests" / "b2n.parquet",
        "run": folder / "zs",
        "output": json.loads((folder / "evaluate.json").read_text()),
    }


@pytest.mark.slow
def test_base2novel_manifest_and_evaluation(zero_shot_b2n) -> None:  # type: ignore[no-untyped-def]
    manifest = zero_shot_b2n["manifest"]
    episodes = Manifest.load(manifest).episodes()
    assert len(episodes) == ZERO_SHOT_EPISODES
    for ep in episodes:
        assert set(ep.classes) <= {5, 6, 7, 8, 9} and set(ep.novel_classes) <= {0, 1, 2, 3, 4}
        assert sorted({label for _, label in ep.novel_query}) == list(range(len(ep.novel_classes)))
    assert get_protocol("fewtrans-base2novel").sampler.params()["novel_queries"] == 15
    assert (
        "novel_queries" not in get_protocol("fewtrans-varied").sampler.params()
    )  # frozen hashes kept

    out = zero_shot_b2n["run"]
    summary = zero_shot_b2n["output"]["summary"]
    base, novel = summary["aggregations"]["hpe"]["mean"], summary["novel"]["hpe"]["mean"]
    hm = summary["harmonic_mean"]["hpe"]
    assert hm["mean"] == pytest.approx(harmonic_mean(base, novel))
    assert hm["ci95"] > 0 and hm["n"] == len(Manifest.load(manifest).episodes())
    run = load_run(out)
    rows = run.table.to_pylist()
    for ep in episodes:
        novel_rows = [r for r in rows if r["episode"] == ep.index and r["split"] == "novel"]
        labels = [label for _, label in ep.novel_query]
        assert {r["kind"] for r in novel_rows} == {"config", "ensemble"}
        for row in novel_rows:
            assert row["n_way"] == len(ep.novel_classes) and row["n_query"] == len(labels)
            assert row["accuracy"] == pytest.approx(
                100 * np.mean(np.array(row["predictions"]) == labels)
            )


@pytest.mark.slow
def test_vision_only_adapters_cannot_score_novel_classes(tmp_path: Path, invoke) -> None:  # type: ignore[no-untyped-def]
    manifest = tmp_path / "b2n.parquet"
    invoke(
        [
            "manifest",
            "build",
            "--protocol",
            "fewtrans-base2novel",
            "--dataset",
            "digits",
            "--episodes",
            "2",
            "--out",
            str(manifest),
        ],
        pm=pm(),
    )
    result = invoke(
        [
            "evaluate",
            "--model",
            "demo-cnn.digits",
            "--adapter",
            "mean-centroid",
            "--manifest",
            str(manifest),
            "--out",
            str(tmp_path / "o"),
            "--quiet",
            "--device",
            "cpu",
        ],
        pm=pm(),
    )
    assert (
        result.exit_code == 1 and "predict_names" in result.output and "episode 0" in result.output
    )


@pytest.mark.slow
def test_verify_reruns_the_novel_split_of_base_to_novel_runs(tmp_path: Path, zero_shot_b2n) -> None:  # type: ignore[no-untyped-def]
    from fewtrans_board.core.errors import SubmissionError
    from fewtrans_board.leaderboard.bundle import BundleContents
    from fewtrans_board.leaderboard.meta import parse_meta
    from fewtrans_board.leaderboard.store import LeaderboardStore
    from fewtrans_board.leaderboard.verification import VerificationOptions, verify_contents
    from tests.adversarial.forgery import forge_rows, forge_run
    from tests.conftest import installed_distribution

    store = LeaderboardStore(zero_shot_b2n["store"])
    out = zero_shot_b2n["run"]
    run = load_run(out)
    assert run.has_novel
    meta = f"""\
[submission]
id = "zs--tiny"
method = "Zero-shot CLIP"
model = "tiny-clip.test"
adapter = "zero-shot-clip"
benchmark = "demo"
hpe_protocol = "{run.meta["hpe"]["name"]}"
authors = ["Test Author"]
hardware = "2-core CPU"
plugins = ["fewtrans-board==0.1.0", "fewtrans-tinymodels==0.1"]
"""
    # A forger who leaves the base rows honest and rewrites the novel predictions to the
    # labels after the run (re-fused, re-sealed: the rows are consistent).
    forged = forge_run(
        out,
        tmp_path / "forged",
        store.manifests_dir,
        lambda rows, manifest: forge_rows(rows, manifest, lambda e, labels, p: labels, "novel"),
    )
    forged_run = load_run(forged)
    assert forged_run.aggregations("novel")["hpe"].mean() == 100.0
    assert forged_run.aggregations("base")["hpe"].mean() == run.aggregations("base")["hpe"].mean()
    # The verification worker loads the model from an installed distribution.
    dist = tmp_path / "dist"
    with installed_distribution(dist, "fewtrans-tinymodels", "0.1", "tests.plugins.tiny_models"):
        # Verification proper: the run is handed over as loaded (it is not a demo-benchmark
        # submission, so validation would refuse it before any episode is re-run).
        # The probes (one episode of the honest run) are fresh requests of their own, as
        # costly as a re-run each. Every novel prediction of the forged run is changed, so
        # the re-run of any one episode, without probes, refuses it.
        contents = BundleContents(parse_meta(meta), None, [out])
        options = VerificationOptions(probe_episodes=1)
        report = verify_contents(contents, store, options, runs=[run])
        forged_contents = BundleContents(parse_meta(meta), None, [forged])
        with pytest.raises(SubmissionError) as refused:
            options = VerificationOptions(sample=1, probe_episodes=0)
            verify_contents(forged_contents, store, options, runs=[forged_run])
    # Control: every split re-run in the same environment, identical.
    assert report["passed"] and len(report["episodes"]) == ZERO_SHOT_EPISODES
    (dataset,) = report["datasets"]
    assert dataset["mode"] == "exact" and dataset["identical_episodes"] == ZERO_SHOT_EPISODES
    assert set(dataset["agreement"]["fusions"]) == {"base", "novel"}
    claimed_hm = dataset["harmonic_mean"]["claimed"]
    assert claimed_hm == pytest.approx(dataset["harmonic_mean"]["rerun"])
    # The novel split is re-run too: its forged predictions differ and its accuracy is
    # bounded, so the harmonic mean the pages rank by cannot be inflated.
    assert refused.value.code == "verification-failed"
    assert "novel:" in str(refused.value) and "predict differently" in str(refused.value)
    (forged_dataset,) = refused.value.report["datasets"]  # type: ignore[attr-defined]
    novel = forged_dataset["agreement"]["fusions"]["novel"]["vote"]
    assert novel["claimed"] == 100.0 and novel["rerun"] < 100.0
    assert forged_dataset["harmonic_mean"]["claimed"] > forged_dataset["harmonic_mean"]["rerun"]


ROOT = Path(__file__).resolve().parents[1]
MANIFESTS = ROOT / "leaderboard" / "manifests"
B2N_EPISODES = 4
"""Episodes of the fixture's base-to-novel manifest (each one a fresh worker process):
enough for per-episode spread (CIs above zero) and a one-episode verification sample."""


@pytest.mark.slow
def test_base_to_novel_tables_evaluate_base2novel_manifests() -> None:
    from fewtrans_board.episodes.frozen import FEWTRANS_TEST, FROZEN
    from fewtrans_board.leaderboard.sub_benchmarks import SUB_BENCHMARKS

    frozen = {m.filename: m for m in FROZEN}
    for name in ("fewtrans-base-to-novel", "fewtrans-multimodal", "demo-base-to-novel"):
        manifests = SUB_BENCHMARKS[name].manifests
        assert manifests and all(frozen[m].protocol == "fewtrans-base2novel" for m in manifests)
    # FewTrans's datasets are built locally; the digits miniature is committed.
    assert {frozen[m].dataset for m in SUB_BENCHMARKS["fewtrans-base-to-novel"].manifests} == set(
        FEWTRANS_TEST
    )
    assert SUB_BENCHMARKS["fewtrans-base-to-novel"].reporting == "base-to-novel"
    committed = MANIFESTS / "fewtrans-base2novel--digits.parquet"
    episodes = Manifest.load(committed).episodes()
    assert len(episodes) == 600 and all(ep.novel_query for ep in episodes)


@pytest.mark.slow
def test_base2novel_base_episodes_are_not_the_varied_ones() -> None:
    # The novel draws are interleaved in the same stream, so the base episodes differ from
    # fewtrans-varied's; the protocol description must not claim otherwise.
    varied = Manifest.load(MANIFESTS / "fewtrans-varied--digits.parquet").episodes()
    b2n = Manifest.load(MANIFESTS / "fewtrans-base2novel--digits.parquet").episodes()
    same = sum(
        (a.classes, a.support, a.query) == (b.classes, b.support, b.query)
        for a, b in zip(varied, b2n, strict=True)
    )
    assert same == 0
    description = get_protocol("fewtrans-base2novel").description
    assert "the fewtrans-varied base episodes" not in description
    assert "not the fewtrans-varied ones" in description


def pinned_pm():  # type: ignore[no-untyped-def]
    """Built-ins plus the tiny CLIP from the ``fewtrans-tinymodels`` test distribution, so
    that its pin validates and a verification worker can load it."""
    from fewtrans_board.registry.manager import PluginSource
    from tests.plugins import tiny_models

    manager = get_plugin_manager(entry_points=False)
    manager.register_plugin(
        tiny_models, PluginSource("tiny-clip", "fewtrans-tinymodels", "0.1", builtin=False)
    )
    return manager


def demo_script():  # type: ignore[no-untyped-def]
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location(
        "make_demo_leaderboard", ROOT / "scripts" / "make_demo_leaderboard.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve annotations through it
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def b2n_leaderboard(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """The demo script's base-to-novel entry (zero-shot tiny CLIP) in a fresh store, and its site."""
    import shutil

    from click.testing import CliRunner

    from fewtrans_board.cli import make_cli
    from tests.conftest import installed_distribution

    work = tmp_path_factory.mktemp("b2n")
    store = work / "leaderboard"
    shutil.copytree(MANIFESTS, store / "manifests")
    app = make_cli(pinned_pm())

    def cli(*args: str) -> None:
        result = CliRunner().invoke(app, list(args), catch_exceptions=False)
        assert result.exit_code == 0, result.output

    # This store freezes a short base-to-novel manifest (B2N_EPISODES) under the benchmark's
    # file name: every episode of a plugin model's run loads the model in a fresh process.
    b2n = store / "manifests" / "fewtrans-base2novel--digits.parquet"
    b2n.unlink()
    b2n.with_name(b2n.name + ".sha256").unlink(missing_ok=True)
    cli(
        *("manifest", "build", "--protocol", "fewtrans-base2novel", "--dataset", "digits"),
        *("--episodes", str(B2N_EPISODES), "--out", str(b2n)),
    )

    script = demo_script()
    (entry,) = script.base_to_novel_entries(
        "tiny-clip.test", ["zero-shot-clip"], ["fewtrans-tinymodels==0.1"]
    )
    with installed_distribution(
        work / "dist", "fewtrans-tinymodels", "0.1", "tests.plugins.tiny_models"
    ):
        script.build_entry(
            entry, work / "entry", cli, manifests=store / "manifests", leaderboard=store, verify=1
        )
    cli("site", "build", "--leaderboard", str(store), "--out", str(work / "_site"))
    return store, work / "_site", entry.ident


@pytest.mark.slow
def test_index_reports_base_novel_and_harmonic_mean_with_cis(b2n_leaderboard) -> None:  # type: ignore[no-untyped-def]
    from fewtrans_board.stats.intervals import mean_ci

    store, _, ident = b2n_leaderboard
    index = json.loads((store / "index.json").read_text())
    assert index["benchmarks"]["demo-base-to-novel"] == [ident]
    (entry,) = [e for e in index["submissions"] if e["id"] == ident]
    assert entry["status"] == "re-run"
    (summary,) = entry["runs"]
    run = load_run(store / "results" / ident / "fewtrans-base2novel--digits")
    base, novel = run.aggregations()["hpe"], run.aggregations("novel")["hpe"]
    assert len(base) == len(novel) == B2N_EPISODES
    for key, values in (("aggregations", base), ("novel", novel)):
        assert summary[key]["hpe"]["mean"] == pytest.approx(values.mean())
        assert summary[key]["hpe"]["ci95"] == pytest.approx(mean_ci(values).ci95)
    hm = summary["harmonic_mean"]["hpe"]
    b, n = base.mean(), novel.mean()
    assert (
        hm["mean"] == pytest.approx(2 * b * n / (b + n))
        and hm["ci95"] > 0
        and hm["n"] == B2N_EPISODES
    )


@pytest.mark.slow
def test_site_shows_base_novel_and_harmonic_mean(b2n_leaderboard) -> None:  # type: ignore[no-untyped-def]
    import re

    from fewtrans_board.stats.base_novel import harmonic_mean_ci
    from fewtrans_board.stats.intervals import mean_ci

    store, site, ident = b2n_leaderboard
    run = load_run(store / "results" / ident / "fewtrans-base2novel--digits")
    base, novel = run.aggregations()["hpe"], run.aggregations("novel")["hpe"]
    expected = [mean_ci(base), mean_ci(novel), harmonic_mean_ci(base, novel)]
    page = (site / "benchmark-demo-base-to-novel.html").read_text()
    table = page.split('id="base-novel-hpe"')[1].split("</table>")[0]
    cells = re.findall(
        r'<span class="mean">([\d.]+)</span>&nbsp;<span class="pm">± ([\d.]+)</span>', table
    )
    assert [(float(m), float(c)) for m, c in cells] == [
        (round(s.mean, 2), round(s.ci95, 2)) for s in expected
    ]
    assert "HM of averages" in table and f"{expected[2].mean:.2f} <span" in table
    method = (site / f"method-{ident}.html").read_text()
    assert "hpe: novel classes" in method and "harmonic mean of base and novel" in method
    dataset = (site / "dataset-digits.html").read_text()
    assert "novel" in dataset and "HM" in dataset
    index = (site / "index.html").read_text()
    assert f"method-{ident}.html" in index and f"HM {expected[2].mean:.2f}" in index
