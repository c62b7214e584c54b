"""Round 5: nothing the submitter records chooses how verification checks it.

Each attack reached the store as "verified" before (issue 37): a spoofed numeric
environment that let forged configurations through, claimed seconds and probe-only
slowness that shrank the sample, a memorisation table keyed after the public probe, and
identical predictions refused on a small sample. Each has an honest control through the
same path.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fewtrans_board.episodes.manifest import Manifest
from fewtrans_board.hpe.aggregate import vote
from fewtrans_board.leaderboard.sub_benchmarks import SubBenchmark
from fewtrans_board.leaderboard.verification.rerun import EpisodeCheck
from fewtrans_board.leaderboard.verification.sampling import Seed, plan_sample
from fewtrans_board.leaderboard.verification.verdict import CostFacts, judge_dataset
from tests.adversarial.cheaters import ProbeSlow
from tests.adversarial.conftest import (
    FIXED,
    MANIFESTS,
    REDTEAM_FIXED,
    Board,
    edit_provenance,
    ok,
    redteam_benchmark,
    run_cli,
)
from tests.adversarial.forgery import edit_bundle, forge_rows

SAMPLE_MANIFEST = "redteam-sample.parquet"
SAMPLE_EPISODES = 21
"""21 episodes: a 5% forgery is two of them, and the 0.99 rule's minimum is 19, so two
episodes lie outside any sample that stops at the minimum."""
SAMPLE = SubBenchmark(
    name="redteam-sample",
    title="Red team, sample size",
    description="One 21-episode fixed-ways digits manifest.",
    manifests=(SAMPLE_MANIFEST,),
    held_out=("digits",),
)
SEED = "5eed" * 16
"""A seed given to verification (as a maintainer reproduces a report): the forger knows
the order it draws, as it would know any rule that depends on what it writes."""


def elsewhere(bundle: Path, out: Path) -> Path:
    """The bundle as if evaluated on another CPU (its recorded flags changed)."""

    def edit(meta: dict[str, Any]) -> None:
        if "environment" in meta and "cpu_flags" in meta["environment"]:
            meta["environment"]["cpu_flags"] = "another-cpu"

    return edit_provenance(bundle, out, edit)


@pytest.fixture(scope="module")
def honest_bundle(board: Board, honest: dict[str, str]) -> Path:
    return board.pack("lp--choices", "linear-probe", [honest["varied"], honest["fixed"]])


@pytest.fixture(scope="module")
def spoofed_honest(board: Board, honest_bundle: Path) -> Path:
    return elsewhere(honest_bundle, board.work / "spoofed-honest.zip")


def perfect_first_config_same_vote(
    episode: int, labels: np.ndarray, members: list[np.ndarray]
) -> list[np.ndarray]:
    """Configuration 0 made correct on every query where the vote of all stays the same."""
    n_way = int(max(labels.max(), max(m.max() for m in members))) + 1
    before = vote(np.stack(members), n_way)
    for q in range(len(labels)):
        trial = [m.copy() for m in members]
        trial[0][q] = labels[q]
        if vote(np.stack(trial), n_way)[q] == before[q]:
            members = trial
    return members


@pytest.mark.slow
def test_a_spoofed_environment_gains_nothing_on_any_configuration(
    board: Board, spoofed_honest: Path
) -> None:
    # Control: recorded on "another CPU", the honest bundle passes the statistical rule,
    # even on one episode per dataset: identical predictions pass at any sample size (a
    # t bound of one difference is infinite).
    code, report = board.verify_with(spoofed_honest, sample=1, probe_episodes=0)
    assert code == 0, report
    for dataset in report["datasets"]:
        assert dataset["mode"] == "statistical" and dataset["rerun_episodes"] == 1
        assert dataset["identical_episodes"] == 1 and dataset["difference_bound"] == 0.0
    # Configuration 0 (the oracle, once perfect) forged to the labels wherever the headline
    # vote stays exactly the same: the headline's claimed minus re-run is zero.
    forged = edit_bundle(
        spoofed_honest,
        board.work / "spoofed-oracle.zip",
        board.store / "manifests",
        lambda rows, manifest: forge_rows(
            rows, manifest, perfect_first_config_same_vote, whole_episode=True
        ),
    )
    code, valid = board.json(["submission", "validate", forged, "--leaderboard", board.store])
    assert code == 0, valid  # consistent data: only a re-run can refute it
    code, report = board.verify_reruns(forged)
    assert code == 1 and report["code"] == "verification-failed", report
    assert "base:config:0" in report["error"]
    for dataset in report["report"]["datasets"]:
        assert dataset["mode"] == "statistical"
        assert dataset["difference"] == 0.0  # the headline alone would have passed
        oracle = dataset["agreement"]["fusions"]["base"]["oracle"]
        assert oracle["claimed"] > oracle["rerun"] + 5


@pytest.fixture(scope="module")
def sample_board(board: Board) -> Any:
    """The board with a 21-episode manifest and the honest linear probe evaluated on it."""
    manifest = board.manifest(SAMPLE_MANIFEST)
    with redteam_benchmark(SAMPLE):
        ok(
            run_cli(
                board.pm,
                [
                    *("manifest", "build", "--protocol", "fewtrans-fixed", "--dataset", "digits"),
                    *("--ways", "5", "--shots", "1", "--episodes", str(SAMPLE_EPISODES)),
                    *("--out", manifest),
                ],
            )
        )
        centre = board.work / "centre.json"
        ok(board.evaluate("linear-probe", "lp-sample", manifest=SAMPLE_MANIFEST, centre=centre))
        yield board


def unsampled_episode(manifest: Path) -> int:
    """An episode the given seed's order puts after the 0.99 rule's minimum."""
    frozen = Manifest.load(manifest)
    rng = Seed(SEED, "given").stream(f"sample:{frozen.dataset}:{frozen.sha256}")
    order = plan_sample(SAMPLE_EPISODES, 0.0, rng).order
    assert plan_sample(SAMPLE_EPISODES, 0.0, np.random.default_rng(0)).minimum == 19
    return order[-1]


def forge_episode(target: int, seconds: float | None = None) -> Any:
    """Every prediction of one episode made correct; optionally every claimed second set."""

    def edit(rows: list[dict[str, Any]], manifest: Manifest) -> None:
        forge_rows(rows, manifest, lambda ep, labels, p: labels if ep == target else p)
        if seconds is not None:
            for row in rows:
                if row["kind"] == "config":
                    row["seconds"] = seconds

    return edit


@pytest.mark.slow
def test_claimed_seconds_do_not_shrink_the_sample(sample_board: Board) -> None:
    board = sample_board
    bundle = board.pack("lp-sample", "linear-probe", ["lp-sample"], benchmark=SAMPLE.name)
    # Control: the honest bundle, the same seed: every episode re-run, identical.
    code, report = board.verify_with(bundle, seed=SEED, probe_episodes=0)
    assert code == 0, report
    (dataset,) = report["datasets"]
    assert dataset["rerun_episodes"] == SAMPLE_EPISODES and not dataset["cut_by_budget"]
    # Claimed 100 s per configuration (a cheap method claiming to be slow) and one episode
    # forged outside the minimum the claim would have bought.
    target = unsampled_episode(board.manifest(SAMPLE_MANIFEST))
    forged = edit_bundle(
        bundle,
        board.work / "claims-slow.zip",
        board.store / "manifests",
        forge_episode(target, 100.0),
    )
    code, report = board.verify_with(forged, seed=SEED, probe_episodes=0)
    assert code == 1 and report["code"] == "verification-failed", report
    (dataset,) = report["report"]["datasets"]
    assert dataset["rerun_episodes"] == SAMPLE_EPISODES and dataset["claimed_estimate_s"] > 1800
    assert f"episodes {target} " in report["error"]


@pytest.mark.slow
def test_a_plugin_slow_only_when_probed_does_not_shrink_the_sample(sample_board: Board) -> None:
    board = sample_board
    with redteam_benchmark(SAMPLE):
        ok(board.evaluate("redteam-probe-slow", "slow-sample", manifest=SAMPLE_MANIFEST))
    bundle = board.pack("slow-sample", "redteam-probe-slow", ["slow-sample"], benchmark=SAMPLE.name)
    target = unsampled_episode(board.manifest(SAMPLE_MANIFEST))
    forged = edit_bundle(
        bundle, board.work / "probe-slow.zip", board.store / "manifests", forge_episode(target)
    )
    # Two probed episodes sleep 2.5 s each in their inductiveness probe: counted in, they
    # would have projected the 21 re-runs over the 5 s budget and stopped at 19. Left out,
    # the re-runs project about 1 s (0.05 s each, measured): within it up to 0.24 s each.
    budget_s = 2 * ProbeSlow.SLEEP_S
    code, report = board.verify_with(forged, seed=SEED, probe_episodes=2, budget_s=budget_s)
    assert code == 1 and report["code"] == "verification-failed", report
    (dataset,) = report["report"]["datasets"]
    assert dataset["rerun_episodes"] == SAMPLE_EPISODES and not dataset["cut_by_budget"]
    assert f"episodes {target} " in report["error"]
    assert "slower when it is probed" in report["error"]


def check(
    episode: int, claimed_s: float, rerun_s: float, probes: dict[str, float] | None = None
) -> EpisodeCheck:
    return EpisodeCheck(
        episode=episode,
        claimed=50.0,
        rerun=50.0,
        configs_equal=1,
        configs=1,
        hpe_equal=True,
        agreement=1.0,
        identical=True,
        accuracies={"base:config:0": [50.0, 50.0], "base:vote": [50.0, 50.0]},
        claimed_seconds=claimed_s,
        rerun_seconds=rerun_s,
        probe_seconds=probes or {},
    )


def test_a_plugin_slower_under_verification_than_it_claims_is_refused() -> None:
    def judge(checks: list[EpisodeCheck], cost: CostFacts) -> list[str]:
        verdict = judge_dataset("d", checks, exact=True, margin=0.5, transductive=False, cost=cost)
        return verdict.failures

    honest = [check(e, claimed_s=1.0, rerun_s=1.6) for e in range(10)]
    assert judge(honest, CostFacts(start_s=0.4)) == []
    slow = [check(e, claimed_s=0.01, rerun_s=8.0) for e in range(10)]
    (failure,) = judge(slow, CostFacts(start_s=0.4))
    assert "slower under verification than it claims" in failure
    # Claims recorded on another kind of device are reported, never held against a re-run.
    assert judge(slow, CostFacts(start_s=0.4, comparable=False)) == []
    probed = [check(e, 0.1, 0.3, {"inductive": 6.3, "perturbed": 0.3}) for e in range(4)]
    (failure,) = judge(probed, CostFacts(start_s=0.2))
    assert "inductive probe" in failure and "slower when it is probed" in failure


@pytest.mark.slow
def test_a_table_keyed_after_the_published_probe_is_still_flagged(
    board: Board, redteam_dist: Path
) -> None:
    from tests.adversarial.cheaters import answer_key

    # The public support sets of the committed 600-episode manifest, each image also as the
    # published probe (one pixel right and down, JPEG 90) would present it.
    table = answer_key(
        MANIFESTS / "fewtrans-varied--digits.parquet", 32, queries=False, replicate_probe=True
    )
    (redteam_dist / "fewtrans_redteam-0.1.dist-info" / "answer_key_replica.json").write_text(
        json.dumps(table)
    )
    # The fixed manifest alone (the probe acts in every dataset's worker alike), all 8 of its
    # episodes probed: the table's answers drop by 55-58 points under the probe, a 95% bound
    # near 50. (Four episodes per manifest left the bound to the draw: a plain centroid's
    # accuracy varies so much between episodes that it fell below 15 in 5 of 12 draws.)
    with redteam_benchmark(REDTEAM_FIXED):
        ok(board.evaluate("redteam-probe-replica", "replica-fixed", manifest=FIXED))
        bundle = board.pack(
            "replica--redteam-fixed",
            "redteam-probe-replica",
            ["replica-fixed"],
            benchmark=REDTEAM_FIXED.name,
        )
        # Its honest control, the linear probe through the same probes, is
        # tests/adversarial/test_verify.py::test_honest_submission_verifies_exactly.
        code, report = board.verify_with(bundle, probe_episodes=8, sample=8)
    assert code == 1 and report["code"] == "lookup-suspected", report
    (dataset,) = report["report"]["datasets"]
    assert dataset["identical_episodes"] == 8  # consistent: only the probe refutes it
    assert dataset["memorisation_probe"]["drop_bound"] > 15
