"""Reported statistics that do not add up get a computed note (FewTrans Table VIII, Fig. 6).

Oracles: scipy's own tests on data built to have the printed statistics (``ttest_1samp`` on
differences with a chosen Cohen's d, ``spearmanr`` on ranks with a chosen rho), and the
paper's numbers as printed.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from fewtrans_board.website.consistency import (
    correlation_check,
    fitting_n,
    half_unit,
    paired_t_p,
    paired_table_checks,
    reported_correlations,
    spearman_p,
    table_checks,
)

REPO = Path(__file__).resolve().parents[1]
TABLE_VIII = REPO / "leaderboard" / "reported" / "fewtrans-table-8.json"


def _differences(d: float, n: int) -> np.ndarray:
    """``n`` paired differences whose mean / sample std is exactly ``d``."""
    z = np.random.default_rng(n).standard_normal(n)
    z = (z - z.mean()) / z.std(ddof=1)
    return z + d


def _ranks_with(sum_d2: int, n: int) -> np.ndarray:
    """A permutation of 1..n whose squared rank differences with 1..n sum to ``sum_d2``."""
    base = np.arange(1, n + 1)
    # From the reversed order (rho = -1) on: near -1 comes within the first few hundred.
    for perm in itertools.islice(itertools.permutations(range(n, 0, -1)), 5040):
        if int(((np.array(perm) - base) ** 2).sum()) == sum_d2:
            return np.array(perm)
    raise AssertionError(f"no permutation of {n} has sum d^2 = {sum_d2}")


@pytest.mark.parametrize(("d", "n"), [(-0.10, 600), (0.23, 50), (-0.55, 12)])
def test_paired_t_p_is_scipys_paired_test(d: float, n: int) -> None:
    diffs = _differences(d, n)
    assert paired_t_p(d, n) == pytest.approx(stats.ttest_1samp(diffs, 0.0).pvalue, rel=1e-9)


def test_spearman_p_is_scipys_and_the_figure_fits_eight_points_not_ten() -> None:
    # rho = 1 - 6 sum(d^2) / (n (n^2 - 1)): 8 points with sum d^2 = 158 give -0.88095.
    y = _ranks_with(158, 8)
    rho, p = stats.spearmanr(np.arange(1, 9), y)
    assert rho == pytest.approx(-0.881, abs=5e-4) and p == pytest.approx(0.0039, abs=5e-5)
    assert spearman_p(rho, 8) == pytest.approx(p, rel=1e-9)
    # Ten points cannot give -0.881 (sum d^2 is even): both neighbours give p < 0.001.
    for sum_d2 in (310, 312):
        rho10, p10 = stats.spearmanr(np.arange(1, 11), _ranks_with(sum_d2, 10))
        assert abs(rho10 + 0.881) < 0.011 and p10 < 0.001
        assert spearman_p(rho10, 10) == pytest.approx(p10, rel=1e-9)


def test_half_unit_reads_the_printed_precision() -> None:
    assert half_unit("-0.10") == pytest.approx(0.005)
    assert half_unit("0.4859") == pytest.approx(5e-5)
    assert half_unit("9e-7") == pytest.approx(5e-8)


def test_fitting_n_inverts_the_p_of_n() -> None:
    n = fitting_n(lambda m: paired_t_p(0.3, m), paired_t_p(0.3, 87.0))
    assert n == pytest.approx(87.0, rel=1e-6)
    assert fitting_n(lambda m: paired_t_p(0.3, m), 0.0) is None


def test_table_viii_as_printed_fits_about_fifty_tasks_and_511_overall() -> None:
    checks = {c.label: c for c in table_checks(TABLE_VIII)}
    assert len(checks) == 11 and checks["Aircraft"].n == 600 and checks["Overall"].n == 6000
    # Aircraft: d = -0.10 on 600 pairs is t = 2.45, p = 0.015 (scipy), not 0.4859.
    aircraft = checks["Aircraft"]
    expected = stats.ttest_1samp(_differences(-0.10, 600), 0.0).pvalue
    assert not aircraft.consistent and aircraft.implied_p == pytest.approx(expected, rel=1e-9)
    # Where the printed d and p agree: ~50 tasks per dataset, ~511 overall (issue 41).
    datasets = [c.fit for label, c in checks.items() if label != "Overall"]
    assert all(f is not None for f in datasets)
    assert 40 <= float(np.median([f for f in datasets if f is not None])) <= 60
    overall = checks["Overall"]
    assert not overall.consistent and overall.fit == pytest.approx(511, abs=5)
    # At the fitted N, scipy's paired test on such differences gives the printed p.
    fitted = round(overall.fit or 0)
    assert stats.ttest_1samp(_differences(-0.22, fitted), 0.0).pvalue == pytest.approx(
        9e-7, rel=0.1
    )
    assert all(not c.consistent for c in checks.values())


def test_a_consistent_table_gets_no_note() -> None:
    # The control: p and d computed by scipy from N = 600 differences, printed rounded.
    data = json.loads(TABLE_VIII.read_text(encoding="utf-8"), parse_float=str)
    for row in data["rows"]:
        n = 6000 if row["method"] == "average" else 600
        d = float(row["cells"]["d"]["value"])
        p = stats.ttest_1samp(_differences(d, n), 0.0).pvalue
        row["cells"]["p"]["value"] = f"{p:.2e}"
    assert all(c.consistent for c in paired_table_checks(data))


def test_the_zipf_figure_is_flagged_with_its_fitting_n() -> None:
    (figure,) = reported_correlations()
    check = correlation_check(figure, 10)
    assert not check.consistent and check.fit == pytest.approx(8, abs=0.5)
    assert correlation_check(figure, 8).consistent


def test_the_site_shows_the_notes(committed_site: Path) -> None:
    adapters = (committed_site / "benchmark-fewtrans-adapters.html").read_text(encoding="utf-8")
    note = adapters[adapters.index('id="consistency-fewtrans-table-8"') :]
    assert "11 of 11 rows" in note and "≈ 511" in note
    assert '<td class="num">-0.10</td>' in note  # the effect as printed, two decimals
    multimodal = (committed_site / "benchmark-fewtrans-multimodal.html").read_text(encoding="utf-8")
    assert "over n = 10 points gives p = 0.00076, not the printed 0.0039" in multimodal
    assert "agree at n ≈ 8" in multimodal
