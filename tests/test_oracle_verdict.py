"""The oracle check as a verdict (hand-made paired samples against the stats functions), and
the inductive miniature: every method learns from its support set, verdicts per method."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fewtrans_board.registry.lookup import Registry
from fewtrans_board.stats.intervals import mean_ci
from fewtrans_board.stats.tests import paired_ttest, wilcoxon_signed_rank
from fewtrans_board.unlearning.oracle import ORACLE_MARGIN, classify, oracle_verdict

SCRATCH = np.array([50.0, 55.0, 60.0, 52.0, 58.0, 61.0, 49.0, 57.0])
NOISE = np.array([0.5, -0.4, 0.3, -0.2, 0.1, -0.5, 0.4, -0.2])


def test_difference_inside_the_margin_is_never_seen() -> None:
    unlearned = SCRATCH + 1.0 + NOISE
    verdict = oracle_verdict(unlearned, SCRATCH, margin=5.0)
    diff = mean_ci(unlearned - SCRATCH)
    assert verdict.difference == pytest.approx(diff.mean) and verdict.ci95 == pytest.approx(
        diff.ci95
    )
    assert verdict.low >= -5.0 and verdict.high <= 5.0
    assert verdict.verdict == "equivalent" and verdict.line.startswith("unlearned ≈ never seen")
    assert verdict.t_p == paired_ttest(unlearned, SCRATCH).pvalue
    assert verdict.wilcoxon_p == wilcoxon_signed_rank(unlearned, SCRATCH).pvalue
    assert verdict.n == 8 and verdict.unlearned == pytest.approx(unlearned.mean())
    # significant (p < 0.05) yet equivalent: the verdict reads the CI, not the test
    assert verdict.t_p < 0.05


@pytest.mark.parametrize(
    ("shift", "expected", "words"),
    [
        (20.0, "above", "knowledge of the classes remains"),
        (-20.0, "below", "removed more"),
    ],
)
def test_difference_outside_the_margin_says_which_way(
    shift: float, expected: str, words: str
) -> None:
    verdict = oracle_verdict(SCRATCH + shift + NOISE, SCRATCH)
    assert verdict.margin == ORACLE_MARGIN
    assert verdict.verdict == expected and words in verdict.line
    assert verdict.to_dict()["line"] == verdict.line and verdict.to_dict()["low"] == verdict.low


def test_wide_or_straddling_intervals_are_inconclusive() -> None:
    noisy = SCRATCH + np.array([12.0, -10.0, 9.0, -11.0, 8.0, -9.0, 13.0, -10.0])
    verdict = oracle_verdict(noisy, SCRATCH)
    assert verdict.low < -ORACLE_MARGIN or verdict.high > ORACLE_MARGIN
    assert verdict.low < 0 < verdict.high and verdict.verdict == "inconclusive"
    # a CI just over the margin but wholly above 0 is "above"; one exactly on it "equivalent"
    assert classify(0.5, 5.5, 5.0) == "above" and classify(-5.0, 5.0, 5.0) == "equivalent"
    assert classify(float("nan"), float("nan"), 5.0) == "inconclusive"
    same = oracle_verdict(SCRATCH, SCRATCH)
    assert same.verdict == "equivalent" and same.ci95 == 0.0
    with pytest.raises(ValueError, match="paired"):
        oracle_verdict(SCRATCH[:3], SCRATCH)


def test_non_learning_flags_a_method_equal_to_zero_shot() -> None:
    """The learning check on hand-made results: zero-shot on every episode is flagged."""
    from fewtrans_board.jobs.inductive_demo import InductiveDemoResult, non_learning

    zero = {"original": 97.5, "unlearned": 20.4, "scratch": 13.2}
    result = InductiveDemoResult(
        Path("."),
        {},
        {"digits-5-9": {r: {"mean": v} for r, v in zero.items()}},
        per_episode={
            "taskres": {r: np.full(3, v) for r, v in zero.items()},
            "coop": {"unlearned": np.full(3, 20.4), "original": np.array([97.5, 96.0, 97.5])},
        },
        identical_prompts={"original": False, "unlearned": True, "scratch": False},
    )
    assert sorted(non_learning(result)) == [
        ("coop", "unlearned", True),  # shared prompts cannot separate identical class prompts
        ("taskres", "original", False),
        ("taskres", "scratch", False),
        ("taskres", "unlearned", False),
    ]


# --- the miniature -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def registry() -> Registry:
    from fewtrans_board.registry.manager import get_plugin_manager

    return Registry.from_plugin_manager(get_plugin_manager())


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory, registry: Registry) -> Any:
    """The miniature with all three methods on the first three episodes (K = 1, seeds 1-3)."""
    from fewtrans_board.jobs.inductive_demo import run_inductive_demo

    out = tmp_path_factory.mktemp("inductive-all")
    return run_inductive_demo(registry, out, episodes=3, progress=False)


@pytest.mark.slow
def test_every_method_learns_from_its_support_set(demo: Any) -> None:
    """No trained method returns zero-shot accuracy on every episode, on any model.

    The one exception is structural and measured: CoOp on the unlearned model, whose class
    prompts all encode to one text feature (SSD removed what told the names apart).
    """
    from fewtrans_board.jobs.inductive_demo import non_learning

    flagged = non_learning(demo)
    assert all(expected for _, _, expected in flagged), flagged
    assert demo.identical_prompts == {"original": False, "unlearned": True, "scratch": False}
    selected = demo.selected["taskres"]
    assert set(selected) == {"original", "unlearned", "scratch"}
    for chosen in selected.values():
        assert chosen["recipe"] == "inductive-clip" and chosen["config"]["epochs"] == 100
        assert set(chosen["held_out"]) == {"0.002", "0.02", "0.2"}
    # TaskRes on the model trained without 5-9 moves well beyond its zero-shot 13%
    zero = demo.zero_shot["digits-5-9"]["scratch"]["mean"]
    assert demo.per_episode["taskres"]["scratch"].mean() > zero + 10.0


@pytest.mark.slow
def test_verdict_per_method_in_the_result_and_on_the_site(demo: Any) -> None:
    rows = {r["adapter"]: r for r in demo.oracle_rows()}
    assert set(rows) == {"linear-probe", "coop", "taskres"}
    for adapter, row in rows.items():
        per_role = demo.per_episode[adapter]
        assert row["unlearned"] == pytest.approx(per_role["unlearned"].mean())
        assert row["scratch"] == pytest.approx(per_role["scratch"].mean())
        assert row["verdict"] in ("equivalent", "above", "below", "inconclusive")
    # SSD removes the text alignment, not the image features: vision-side methods keep 5-9
    assert rows["linear-probe"]["verdict"] == "above"
    html = (demo.out / "site" / "oracle-check.html").read_text()
    assert "linear-probe" in html and "knowledge of the classes remains" in html
    assert "oracle-check.html" in demo.site_index.read_text()
