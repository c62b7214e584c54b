"""Statistics against scipy and hand computations."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats as ss

from fewtrans_board.stats.base_novel import (
    harmonic_mean,
    harmonic_mean_average_ci,
    harmonic_mean_ci,
)
from fewtrans_board.stats.bootstrap import (
    _replicates,
    average_ci,
    averages_and_ranks,
    holm_paired,
    rank_intervals,
    resample_counts,
    tied_with_best,
)
from fewtrans_board.stats.intervals import mean_ci
from fewtrans_board.stats.tests import cohens_d_paired, holm, paired_ttest, wilcoxon_signed_rank


@pytest.mark.slow
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


@pytest.mark.slow
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
    # Documented convention: mean(a - b) / sd(a - b) with the sample sd (ddof = 1).
    a, b = np.array([3.0, 5.0, 7.0, 9.0]), np.array([1.0, 4.0, 4.0, 8.0])
    # differences 2, 1, 3, 1: mean 7/4 = 1.75; deviations 0.25, -0.75, 1.25, -0.75;
    # squares sum to 0.0625 + 0.5625 + 1.5625 + 0.5625 = 2.75; sd = sqrt(2.75 / 3) = 0.957427;
    # d = 1.75 / 0.957427 = 1.827815 (the population sd, sqrt(2.75 / 4), would give 2.110579)
    assert cohens_d_paired(a, b) == pytest.approx(1.827815, abs=1e-6)
    assert cohens_d_paired(b, a) == pytest.approx(-1.827815, abs=1e-6)


def test_bootstrap_is_reproducible_and_covers_the_estimate() -> None:
    rng = np.random.default_rng(2)
    data = {f"d{i}": rng.uniform(40, 90, 100) for i in range(4)}
    first, second = average_ci(data, seed=7), average_ci(data, seed=7)
    assert first == second
    assert first.low < first.estimate < first.high
    assert first.estimate == pytest.approx(np.mean([v.mean() for v in data.values()]))
    assert average_ci(data, seed=8) != first


def test_bootstrap_ci_width_matches_normal_theory() -> None:
    # Episodes are resampled within each dataset and datasets weigh equally, so the average
    # of K dataset means has variance sum_k s_k^2 / n_k / K^2. With large n the percentile
    # interval is the normal one: half-width z_0.975 * that sd (Monte Carlo error of
    # 10,000 resamples is about 1%).
    rng = np.random.default_rng(5)
    data = {
        "narrow": rng.normal(80, 3, 1500),
        "wide": rng.normal(50, 20, 800),
        "mid": rng.uniform(20, 90, 1200),
    }
    ours = average_ci(data, resamples=10_000, seed=3)
    sd = np.sqrt(sum(v.var(ddof=1) / len(v) for v in data.values())) / len(data)
    half = ss.norm.ppf(0.975) * sd
    assert (ours.high - ours.low) / 2 == pytest.approx(half, rel=0.05)
    assert (ours.low + ours.high) / 2 == pytest.approx(ours.estimate, abs=0.1 * half)
    # One dataset: the textbook 1.96 * sd / sqrt(n).
    one = average_ci({"wide": data["wide"]}, resamples=10_000, seed=3)
    textbook = 1.96 * data["wide"].std(ddof=1) / np.sqrt(800)
    assert (one.high - one.low) / 2 == pytest.approx(textbook, rel=0.05)


def test_averages_and_ranks_by_hand() -> None:
    # x: means 2 (a), 3 (b), 5 (c); y: means 15, 16, 5 -> averages 8.5, 9.5, 5.
    methods = {
        "a": {"x": np.array([1.0, 2.0, 3.0]), "y": np.array([10.0, 20.0])},
        "b": {"x": np.array([2.0, 3.0, 4.0]), "y": np.array([11.0, 21.0])},
        "c": {"x": np.full(3, 5.0), "y": np.full(2, 5.0)},
    }
    out = averages_and_ranks(methods, resamples=500, seed=4)
    assert {m: out[m][0].estimate for m in methods} == pytest.approx({"a": 8.5, "b": 9.5, "c": 5.0})
    # b is a + 1 on every episode and replicates share their indices: b beats a in every
    # replicate, so their rank intervals are single points.
    assert out["b"][1] == (1, 1, 1) and out["a"][1] == (2, 2, 2)
    # c is 5 whatever is drawn, and a, b never fall below 5.5 (the smallest x mean of a is 1,
    # the smallest y mean 10): its interval is the point 5 and it ranks last throughout.
    assert (out["c"][0].low, out["c"][0].high) == pytest.approx((5.0, 5.0))
    assert out["c"][1] == (3, 3, 3)
    # The documented identity with the separate functions (same draw).
    assert {m: out[m][1] for m in methods} == rank_intervals(methods, resamples=500, seed=4)
    # Equal up to rounding: the replicates are a matrix product, whose summation order may
    # depend on the other methods in it (never assert bit-identical floats across paths).
    alone, together = average_ci(methods["a"], resamples=500, seed=4), out["a"][0]
    assert (alone.resamples, alone.seed) == (together.resamples, together.seed)
    np.testing.assert_allclose(
        [together.estimate, together.low, together.high],
        [alone.estimate, alone.low, alone.high],
        rtol=1e-12,
    )


def test_rank_intervals_use_paired_resamples() -> None:
    # "twin" is "base" plus 0.3 to 0.5 on every episode, episodes spread by sd 15. Resampled
    # together (paired), twin wins every replicate. Resampled independently, the difference
    # of means would have sd ~ sqrt(2) * 15 / sqrt(400) = 1.06, so base would win about
    # P(Z > 0.4 / 1.06) = 35% of replicates and both intervals would span ranks 1-2.
    rng = np.random.default_rng(6)
    base = rng.normal(60, 15, 400)
    methods = {"base": {"x": base}, "twin": {"x": base + rng.uniform(0.3, 0.5, 400)}}
    ranks = rank_intervals(methods, resamples=1000, seed=0)
    assert ranks == {"twin": (1, 1, 1), "base": (2, 2, 2)}
    unpaired_sd = np.sqrt(2) * 15 / np.sqrt(400)
    assert ss.norm.sf(0.4 / unpaired_sd) > 0.3  # what independent resampling would give


def test_holm_paired_by_hand() -> None:
    reference = np.array([50.0, 60.0, 70.0, 80.0, 90.0, 55.0])
    differences = {
        "m1": [1, 2, 1, 2, 1, 2],  # mean 1.5, sd 0.547723: t = 6.7082, p = 0.0011144
        "m2": [3, -1, 2, 0, 1, -2],  # mean 0.5, sd 1.870829: t = 0.6547, p = 0.54160
        "m3": [-5, 5, -4, 4, -3, 4],  # mean 1/6, sd 4.622409: t = 0.0883, p = 0.93305
        "m4": [2, 1, 3, 1, 2, 2],  # mean 11/6, sd 0.752773: t = 5.9655, p = 0.0018942
    }
    pooled = {m: reference + np.array(d, dtype=float) for m, d in differences.items()}
    for m, d in differences.items():  # the comments' p: two-sided t with 5 df
        d = np.array(d, dtype=float)
        t = d.mean() / (d.std(ddof=1) / np.sqrt(6))
        assert paired_ttest(pooled[m], reference).pvalue == pytest.approx(2 * ss.t.sf(t, 5))
    # Holm, m = 4: sorted p times (m - rank + 1), running maximum, capped at 1:
    # m1 0.0011144 x 4 = 0.0044578; m4 0.0018942 x 3 = 0.0056827;
    # m2 0.54160 x 2 = 1.0832 -> 1; m3 0.93305 x 1 = 0.93305 -> running max 1.
    assert holm_paired(pooled, reference) == pytest.approx(
        {"m1": 0.0044578, "m2": 1.0, "m3": 1.0, "m4": 0.0056827}, rel=1e-4
    )


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


def test_replicates_equal_a_gather_of_the_same_draws() -> None:
    # Oracle: the definition, each method's values gathered at the drawn indices and
    # averaged, with the generator called exactly as the module documents.
    rng = np.random.default_rng(12)
    sizes = {"x": 37, "y": 50}
    methods = {
        f"m{i}": {d: rng.integers(0, 16, n) * 100 / 15 for d, n in sizes.items()} for i in range(6)
    }
    names, datasets, replicates = _replicates(methods, 300, 5)
    draw = np.random.default_rng(5)
    expected = np.zeros((len(names), 300))
    for d in datasets:
        index = draw.integers(0, sizes[d], size=(300, sizes[d]))
        for i, name in enumerate(names):
            expected[i] += methods[name][d][index].mean(axis=1)
    np.testing.assert_allclose(replicates, expected / len(datasets), rtol=1e-12)


def test_identical_methods_get_identical_replicates() -> None:
    # Clones at several places of a wide product (BLAS blocks and edges) stay exactly tied,
    # so a tie is a tie whatever the position.
    rng = np.random.default_rng(8)
    clone = {d: rng.uniform(0, 100, 600) for d in ("x", "y")}
    methods = {f"m{i:02d}": {d: rng.uniform(0, 100, 600) for d in clone} for i in range(41)}
    at = (0, 7, 19, 33, 40)
    for i in at:
        methods[f"m{i:02d}"] = {d: v.copy() for d, v in clone.items()}
    names, _, replicates = _replicates(methods, 400, 0)
    rows = [replicates[names.index(f"m{i:02d}")] for i in at]
    assert all(np.array_equal(r, rows[0]) for r in rows)
    counts = resample_counts(np.random.default_rng(1), 600, 400, 600)
    assert (counts.sum(axis=1) == 600).all()
    # The same draws, counted one resample at a time.
    draws = np.random.default_rng(1).integers(0, 600, size=(400, 600))
    assert np.array_equal(counts, np.stack([np.bincount(row, minlength=600) for row in draws]))


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
    # Normal theory (delta method): with g the gradient of HM at the averages and S the
    # covariance of (average base, average novel) = sum_k cov_k / n_k / K^2, the half-width
    # is z * sqrt(g' S g). Base and novel are resampled together, so S keeps the positive
    # base-novel covariance of the episodes; resampling them apart would drop it.
    g = np.array([2 * n**2, 2 * b**2]) / (b + n) ** 2
    s = sum(np.cov(base[d], novel[d]) / len(base[d]) for d in data) / len(data) ** 2
    paired = ss.norm.ppf(0.975) * np.sqrt(g @ s @ g)
    unpaired = ss.norm.ppf(0.975) * np.sqrt(g @ np.diag(np.diag(s)) @ g)
    assert paired > 1.1 * unpaired  # the pairing matters on these data (ratio 1.16)
    assert (ours.high - ours.low) / 2 == pytest.approx(paired, rel=0.07)
