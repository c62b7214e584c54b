"""Statistics against scipy and hand computations."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats as ss

from fewtrans_board.stats import (
    average_ci,
    cohens_d_paired,
    harmonic_mean,
    harmonic_mean_average_ci,
    harmonic_mean_ci,
    holm,
    mean_ci,
    paired_ttest,
    rank_intervals,
    tied_with_best,
    wilcoxon_signed_rank,
)


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("n", [5, 8, 13, 14, 30, 50, 51, 600])
def test_paired_tests_agree_with_scipy(seed: int, n: int) -> None:
    rng = np.random.default_rng(seed * 1000 + n)
    a = rng.normal(60, 12, n)
    b = a + rng.normal(rng.uniform(-2, 2), 4, n)
    if seed % 3 == 1:  # episode accuracies are coarse: ties and zero differences
        a, b = np.round(a), np.round(b)
    ours, theirs = paired_ttest(a, b), ss.ttest_rel(a, b)
    assert ours.statistic == pytest.approx(theirs.statistic, rel=1e-10)
    assert ours.pvalue == pytest.approx(theirs.pvalue, rel=1e-9, abs=1e-300)
    w, sw = wilcoxon_signed_rank(a, b), ss.wilcoxon(a, b)
    assert w.statistic == pytest.approx(sw.statistic)
    assert w.pvalue == pytest.approx(sw.pvalue, rel=1e-7)


def test_small_tied_wilcoxon_is_exact_not_normal() -> None:
    # Five identical differences: the smallest two-sided p at n = 5 is 2/32, not the
    # normal approximation's 0.025.
    ours = wilcoxon_signed_rank(np.ones(5), np.zeros(5))
    assert ours.method == "permutation" and ours.pvalue == pytest.approx(0.0625)
    assert ours.pvalue == pytest.approx(ss.wilcoxon(np.ones(5), np.zeros(5)).pvalue)


@pytest.mark.parametrize("seed", range(40))
def test_small_samples_with_ties_or_zeros_match_scipys_default(seed: int) -> None:
    # Episode accuracies on few queries: coarse values, many ties and zero differences.
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 16))
    a = rng.integers(0, 6, n) * 20.0
    b = rng.integers(0, 6, n) * 20.0
    if not (a - b).any():
        b[0] += 20.0
    ours, theirs = wilcoxon_signed_rank(a, b), ss.wilcoxon(a, b)
    assert ours.statistic == pytest.approx(theirs.statistic)
    assert ours.pvalue == pytest.approx(theirs.pvalue, rel=1e-9)


def test_exact_wilcoxon_is_used_for_small_samples_without_ties() -> None:
    a = np.array([1.3, 2.9, 4.1, 5.7, 6.2, 8.8, 9.4])
    b = np.array([1.0, 3.5, 3.0, 4.2, 6.9, 6.1, 7.0])
    ours, theirs = wilcoxon_signed_rank(a, b), ss.wilcoxon(a, b)
    assert ours.method == "exact" and ours.pvalue == pytest.approx(theirs.pvalue)


def test_holm_matches_a_hand_computation() -> None:
    p = [0.01, 0.04, 0.03, 0.005]
    # sorted: 0.005 (x4 = 0.02), 0.01 (x3 = 0.03), 0.03 (x2 = 0.06), 0.04 (x1 = 0.04 -> max 0.06)
    assert holm(p) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.6]) == pytest.approx([1.0, 1.0])
    assert holm([]) == []


def test_ci_formula_matches_fewtrans_and_bscd() -> None:
    rng = np.random.default_rng(1)
    values = rng.uniform(20, 100, 600)
    fewtrans = mean_ci(values)
    assert fewtrans.ci95 == pytest.approx(1.96 * np.std(values, ddof=1) / np.sqrt(600))
    bscd = mean_ci(values, ddof=0)
    assert bscd.ci95 == pytest.approx(1.96 * np.std(values) / np.sqrt(600)) and bscd.ddof == 0
    assert fewtrans.mean == pytest.approx(values.mean())


def test_cohens_d_paired() -> None:
    a, b = np.array([3.0, 5.0, 7.0, 9.0]), np.array([1.0, 4.0, 4.0, 8.0])
    d = a - b  # 2, 1, 3, 1
    assert cohens_d_paired(a, b) == pytest.approx(d.mean() / d.std(ddof=1))


def test_bootstrap_is_reproducible_and_covers_the_estimate() -> None:
    rng = np.random.default_rng(2)
    data = {f"d{i}": rng.uniform(40, 90, 100) for i in range(4)}
    first, second = average_ci(data, seed=7), average_ci(data, seed=7)
    assert first == second
    assert first.low < first.estimate < first.high
    assert average_ci(data, seed=8) != first


def test_rank_intervals_and_ties() -> None:
    rng = np.random.default_rng(3)
    base = {d: rng.uniform(40, 90, 300) for d in ("x", "y")}
    methods = {
        "strong": {d: v + 10 for d, v in base.items()},
        "twin": {d: v + 10 + rng.normal(0, 0.5, 300) for d, v in base.items()},
        "weak": {d: v for d, v in base.items()},
    }
    ranks = rank_intervals(methods, resamples=500, seed=0)
    assert ranks["weak"] == (3, 3, 3)
    assert {ranks["strong"][0], ranks["twin"][0]} == {1, 2}
    assert ranks["strong"][1] == 1 and ranks["strong"][2] == 2  # the top two may swap
    tied = tied_with_best(methods)
    assert tied["strong"] and tied["twin"] and not tied["weak"]
    assert rank_intervals(methods, resamples=500, seed=0) == ranks


def paired_base_novel(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Correlated per-episode base and novel accuracies on few queries (coarse values)."""
    rng = np.random.default_rng(seed)
    ease = rng.normal(0, 1, n)
    base = np.clip(np.round((70 + 12 * ease + rng.normal(0, 8, n)) / 5) * 5, 0, 100)
    novel = np.clip(np.round((45 + 10 * ease + rng.normal(0, 12, n)) / 5) * 5, 0, 100)
    return base, novel


def test_harmonic_mean_ci_matches_a_bootstrap_of_the_paired_episodes() -> None:
    base, novel = paired_base_novel(600, 3)
    ours = harmonic_mean_ci(base, novel)
    assert ours.mean == pytest.approx(harmonic_mean(base.mean(), novel.mean()))
    assert ours.mean == pytest.approx(2 * base.mean() * novel.mean() / (base.mean() + novel.mean()))
    # Oracle: a large bootstrap over episodes (base and novel resampled together).
    rng = np.random.default_rng(0)
    index = rng.integers(0, 600, size=(20_000, 600))
    b, n = base[index].mean(axis=1), novel[index].mean(axis=1)
    replicates = 2 * b * n / (b + n)
    assert ours.ci95 == pytest.approx(1.96 * replicates.std(), rel=0.05)
    # Easy episodes are easy for both splits: ignoring the pairing (independent resamples)
    # would understate the interval.
    unpaired = rng.integers(0, 600, size=(20_000, 600))
    n2 = novel[unpaired].mean(axis=1)
    assert ours.ci95 > 1.1 * 1.96 * (2 * b * n2 / (b + n2)).std()


def test_harmonic_mean_ci_with_constant_novel_reduces_to_the_base_ci() -> None:
    base, _ = paired_base_novel(200, 4)
    novel = np.full(200, 40.0)
    ours = harmonic_mean_ci(base, novel, ddof=0)
    slope = 2 * 40.0**2 / (base.mean() + 40.0) ** 2  # d HM / d base
    assert ours.ci95 == pytest.approx(slope * mean_ci(base, ddof=0).ci95)
    assert ours.ddof == 0 and ours.n == 200


def test_harmonic_mean_average_is_the_hm_of_the_averages() -> None:
    data = {f"d{i}": paired_base_novel(100, 10 + i) for i in range(3)}
    base = {d: v[0] for d, v in data.items()}
    novel = {d: v[1] for d, v in data.items()}
    ours = harmonic_mean_average_ci(base, novel, resamples=4000, seed=1)
    b = np.mean([v.mean() for v in base.values()])
    n = np.mean([v.mean() for v in novel.values()])
    assert ours.estimate == pytest.approx(2 * b * n / (b + n))
    assert ours.low < ours.estimate < ours.high
    assert ours == harmonic_mean_average_ci(base, novel, resamples=4000, seed=1)
