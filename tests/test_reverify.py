"""``leaderboard reverify``: stored entries re-run under today's rules, records replaced atomically.

An entry made with a built-in adapter must stay verifiable when a later release adds a
defaulted option to that built-in (SECURITY.md, "Entries across releases"): the test
plugin ``fewtrans-later`` (written here, pinned by the entry, so verification's worker
loads it) gives mean-centroid one more option, as a new release would. With a default that
scores as before, ``reverify`` re-runs the entry (one episode: identical predictions pass
at any sample size) and stores its new record; with a default that changes what the
adapter computes (the red team), the re-run is refused, the old record stays and the
command exits 1.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from scipy import stats

from fewtrans_board.cli import make_cli
from fewtrans_board.registry.manager import get_plugin_manager
from tests.conftest import REPO, installed_distribution, shared_folder

ENTRY = "mc--later"
META = f"""[submission]
id = "{ENTRY}"
method = "Mean centroid"
model = "demo-cnn.digits"
adapter = "mean-centroid"
benchmark = "demo"
hpe_protocol = "fewtrans-paper"
authors = ["Test"]
hardware = "CPU"
plugins = ["fewtrans-board==0.1.0", "fewtrans-later==0.1"]
"""

LATER = '''"""A later fewtrans-board's mean-centroid: one more option (a test plugin)."""
import dataclasses

from fewtrans_board import hookimpl, hparam
from fewtrans_board.methods.adapters.prototypes import MeanCentroidAdapter


@dataclasses.dataclass(frozen=True)
class Config(MeanCentroidAdapter.Config):
    """Mean-centroid options, with the later release's logit scale."""

    scale: float = hparam({scale!r}, "Multiplies every logit; 1 scores as before.")


_fit = MeanCentroidAdapter.fit


def fit(self, backbone, support, class_names, config):
    predictor = _fit(self, backbone, support, class_names, config)
    predict = predictor.predict
    predictor.predict = lambda query: predict(query) * config.scale
    return predictor


MeanCentroidAdapter.Config = Config
MeanCentroidAdapter.fit = fit


@hookimpl
def register_adapters(register):
    """Registers nothing: the plugin changes the built-in, as a new release would."""
'''


def cli(*args: Any) -> Result:
    return CliRunner().invoke(
        make_cli(get_plugin_manager(entry_points=False)),
        [str(a) for a in args],
        catch_exceptions=False,
    )


def ok(result: Result) -> Result:
    assert result.exit_code == 0, result.output
    return result


@pytest.fixture(scope="module")
def later_store(
    tmp_path_factory: pytest.TempPathFactory, mean_centroid_runs: dict[str, Path]
) -> Path:
    """A store holding the shared mean-centroid run as an entry that pins ``fewtrans-later``,
    added without a re-run (``not verified``): the entry of an older release.

    Built once per test run (``shared_folder``; ``test_status_vocabulary`` reads it too):
    tests that change it work on a copy.
    """
    from fewtrans_board.leaderboard.sub_benchmarks import SUB_BENCHMARKS
    from fewtrans_board.results.load import load_run

    run = mean_centroid_runs["demo-cnn.digits"]

    def build(work: Path) -> None:
        manifests = REPO / "leaderboard" / "manifests"
        store = work / "leaderboard"
        (store / "manifests").mkdir(parents=True)
        for name in SUB_BENCHMARKS["demo"].manifests:  # only the demo's: every read loads them
            for path in (manifests / name, manifests / f"{name}.sha256"):
                shutil.copy(path, store / "manifests" / path.name)
        protocol = load_run(run).provenance.hpe.name
        (work / "meta.toml").write_text(META.replace("fewtrans-paper", protocol))
        bundle = work / "entry.zip"
        ok(cli("submission", "pack", run, "--meta", work / "meta.toml", "--out", bundle))
        ok(cli("leaderboard", "add", bundle, "--leaderboard", store, "--unsafe-no-verify"))

    return shared_folder(tmp_path_factory, "reverify-store", build) / "leaderboard"


def copied(store: Path, tmp_path: Path) -> Path:
    """A copy of ``store`` to change."""
    shutil.copytree(store, tmp_path / "leaderboard")
    return tmp_path / "leaderboard"


def later_release(root: Path, scale: float) -> Any:
    """Install ``fewtrans-later 0.1`` with a new mean-centroid option defaulting to ``scale``."""
    root.mkdir()
    (root / "fewtrans_later.py").write_text(LATER.format(scale=scale))
    return installed_distribution(root, "fewtrans-later", "0.1", "fewtrans_later")


def index_entry(store: Path) -> dict[str, Any]:
    entries = json.loads((store / "index.json").read_text())["submissions"]
    return next(e for e in entries if e["id"] == ENTRY)


def test_plan_prints_the_sample_and_estimate_and_runs_nothing(later_store: Path) -> None:
    before = (later_store / "submissions" / ENTRY / "status.json").read_bytes()
    plan = json.loads(
        ok(
            cli("leaderboard", "reverify", ENTRY, "--plan", "--leaderboard", later_store, "--json")
        ).output
    )
    [entry] = plan["entries"]
    [dataset] = entry["datasets"]
    assert entry["status"]["status"] == "not verified" and entry["error"] is None
    n = dataset["episodes"]
    forged = math.ceil(0.05 * n)
    # The fewest draws without replacement that include a forged episode with p >= 0.99.
    minimum = next(k for k in range(1, n + 1) if stats.hypergeom(n, forged, k).sf(0) >= 0.99)
    assert dataset["minimum"] == minimum
    assert dataset["rerun"] == n and dataset["estimate_s"] > 0  # cheap: every episode
    sampled = json.loads(
        ok(
            cli(
                "leaderboard",
                "reverify",
                ENTRY,
                "--plan",
                "--sample",
                "5",
                "--json",
                "--leaderboard",
                later_store,
            )
        ).output
    )["entries"][0]["datasets"][0]
    assert sampled["rerun"] == 5
    assert 0 < sampled["estimate_s"] < dataset["estimate_s"]  # fewer episodes, less time
    text = ok(cli("leaderboard", "reverify", "--all", "--plan", "--leaderboard", later_store))
    assert f"re-runs {n} of {n} episodes" in text.output
    assert (later_store / "submissions" / ENTRY / "status.json").read_bytes() == before


def test_a_failed_entry_is_reported_keeps_the_old_records_and_exits_1(
    later_store: Path, tmp_path: Path
) -> None:
    store = copied(later_store, tmp_path)
    before = {p: p.read_bytes() for p in (store / "submissions").rglob("*") if p.is_file()}
    index = (store / "index.json").read_bytes()
    result = cli("leaderboard", "reverify", "no-such-entry", "--leaderboard", store)
    assert result.exit_code == 1
    assert "[1/1] no-such-entry: FAILED [unknown-submission]" in result.output
    assert "0 of 1 entries re-run" in result.output
    after = {p: p.read_bytes() for p in (store / "submissions").rglob("*") if p.is_file()}
    assert after == before and (store / "index.json").read_bytes() == index


def test_reverify_needs_entries_or_all(later_store: Path) -> None:
    for args in ((), (ENTRY, "--all")):
        result = cli("leaderboard", "reverify", *args, "--plan", "--leaderboard", later_store)
        assert result.exit_code == 2 and "--all" in result.output


@pytest.mark.slow  # verification workers
@pytest.mark.usefixtures("sandbox_required")
def test_a_defaulted_new_option_re_verifies_and_a_behaviour_change_is_refused(
    later_store: Path, tmp_path: Path
) -> None:
    store = copied(later_store, tmp_path)
    status = store / "submissions" / ENTRY / "status.json"
    assert index_entry(store)["status"] == "not verified"
    args = ["leaderboard", "reverify", ENTRY, "--leaderboard", store, "--sample", "1"]
    args += ["--threads", "1"]
    with later_release(tmp_path / "same", 1.0):
        result = cli(*args)
    assert result.exit_code == 0, result.output
    assert f"[1/1] {ENTRY}: re-run " in result.output  # progress per entry
    record = json.loads(status.read_text())
    report = record["verification"]
    assert record["status"] == "verified" and report["passed"] is True
    [dataset] = report["datasets"]
    # One re-run episode, predictions identical: the bound is 0, not +inf.
    assert dataset["rerun_episodes"] == 1 and dataset["identical_episodes"] == 1
    assert dataset["mode"] == "exact" and dataset["difference_bound"] == 0.0
    shown = index_entry(store)
    assert shown["status"] == "re-run"
    assert shown["status_detail"]["rerun_episodes"] == 1
    assert shown["status_detail"]["date"] == report["date"][:10]

    # Red team: the later release's default changes the scores (logits negated).
    kept = status.read_bytes()
    with later_release(tmp_path / "changed", -1.0):
        refused = cli(*args, "--json")
    assert refused.exit_code == 1, refused.output
    [outcome] = json.loads(refused.output)["entries"]
    assert outcome["ok"] is False and outcome["error"]["code"] == "verification-failed"
    assert "predict differently" in outcome["error"]["error"]
    assert status.read_bytes() == kept  # the old record stays
    assert index_entry(store)["status"] == "re-run"
    assert not list(status.parent.glob(".status.json*"))  # no temporary file left


def test_identical_predictions_pass_on_one_episode_in_either_mode() -> None:
    """Issue 40: one re-run episode with identical predictions was refused as "+0.00 ...
    at most +inf" (a t bound from one pair); identical predictions bound the difference
    by 0 at any sample size. Red team: one episode that predicts differently cannot be
    bounded and is refused."""
    from fewtrans_board.leaderboard.verification.rerun import EpisodeCheck, quantity
    from fewtrans_board.leaderboard.verification.verdict import judge_dataset

    # The committed clip-adapter record's numbers: the same predictions, summed in
    # another order, differ in the last bits.
    claimed, rerun = 97.49440715883667, 97.4944071588367
    scores = {quantity("base", q): [claimed, rerun] for q in ("vote", "config:0")}
    same = EpisodeCheck(6, claimed, rerun, 1, 1, True, 1.0, identical=True, accuracies=scores)
    for exact in (True, False):
        verdict = judge_dataset("digits", [same], exact=exact, margin=0.5, transductive=False)
        assert verdict.passed, verdict.failures
        assert verdict.summary["difference_bound"] == 0.0
    forged = {q: [claimed, claimed - 30.0] for q in scores}
    other = EpisodeCheck(6, claimed, claimed - 30.0, 0, 1, False, 0.7, accuracies=forged)
    refused = judge_dataset("digits", [other], exact=False, margin=0.5, transductive=False)
    assert not refused.passed and "exceeds the re-run's" in refused.failures[0]


def test_a_weights_registry_gives_each_entry_the_checkpoint_its_runs_record(
    tmp_path: Path,
) -> None:
    """Two committed entries of one model name, ``demo-clip.digits``: the original CLIP and
    its unlearned copy (the runs record different ``weights_id``). A registry keyed by the
    model name would hand both the same file; keyed by the digest the runs record, the
    original finds its own checkpoint (control) and the unlearned entry, whose checkpoint
    the registry lacks, falls back to the model-named file and is refused before any
    re-run, naming the digest it needs (red team)."""
    import hashlib

    from fewtrans_board.leaderboard.pr import entry_weights

    store = REPO / "leaderboard"
    original, unlearned = "coop--demo-clip-digits--original", "coop--demo-clip-digits--unlearned"
    shipped = (
        REPO / "fewtrans_board" / "default_plugins" / "weights" / "demo-clip-digits.safetensors"
    )
    digest = hashlib.sha256(shipped.read_bytes()).hexdigest()
    recorded = {
        name: json.loads(
            (store / "results" / name / "clip-kshot--digits-5-9" / "run.json").read_text()
        )["identity"]["weights_id"]
        for name in (original, unlearned)
    }
    assert recorded[original] == f"sha256:{digest}" != recorded[unlearned]  # the oracle
    registry = tmp_path / "weights"
    registry.mkdir()
    shutil.copyfile(shipped, registry / f"{digest}.safetensors")
    other = bytearray(shipped.read_bytes())
    other[-1] ^= 0xFF  # same format, other weights, under the shared model name
    (registry / "demo-clip.digits.safetensors").write_bytes(bytes(other))

    assert entry_weights(store, original, registry) == registry / f"{digest}.safetensors"
    assert entry_weights(store, unlearned, registry) == registry / "demo-clip.digits.safetensors"
    args = ("leaderboard", "reverify", original, unlearned, "--plan", "--json")
    result = cli(*args, "--weights-dir", registry, "--leaderboard", store)
    assert result.exit_code == 1
    plans = {e["id"]: e for e in json.loads(result.output)["entries"]}
    assert plans[original]["error"] is None
    assert plans[original]["weights"] == str(registry / f"{digest}.safetensors")
    assert plans[unlearned]["error"]["code"] == "weights-mismatch"
    assert recorded[unlearned] in plans[unlearned]["error"]["error"]
