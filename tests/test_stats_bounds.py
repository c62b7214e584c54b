"""One-sided bounds and forgery-catch probabilities against scipy and hand values."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from fewtrans_board.stats.bounds import (
    detection_probability,
    forged_episodes,
    lower_bound,
    sample_size_for,
    upper_bound,
)


def test_upper_and_lower_bounds_are_scipys_one_sided_t_intervals() -> None:
    d = np.array([0.5, -1.0, 2.0, 0.0, 1.5, 3.0, -0.5])
    low, high = stats.t.interval(0.90, len(d) - 1, loc=d.mean(), scale=stats.sem(d))
    # A two-sided 90% interval has one-sided 95% bounds at its ends.
    assert upper_bound(d, 0.95).bound == pytest.approx(high)
    assert lower_bound(d, 0.95).bound == pytest.approx(low)
    assert upper_bound(d).mean == pytest.approx(d.mean())


def test_bounds_of_identical_differences_are_the_difference() -> None:
    assert upper_bound([0.0] * 5).bound == 0.0
    assert lower_bound([2.0] * 5).bound == 2.0
    assert math.isinf(upper_bound([1.0]).bound)  # one pair bounds nothing
    with pytest.raises(ValueError):
        upper_bound([])


@pytest.mark.parametrize(
    ("episodes", "forged", "sampled"), [(600, 30, 84), (600, 1, 84), (50, 3, 39), (8, 1, 3)]
)
def test_detection_probability_is_one_minus_the_hypergeometric_chance_of_none(
    episodes: int, forged: int, sampled: int
) -> None:
    expected = 1.0 - stats.hypergeom(episodes, forged, sampled).pmf(0)
    assert detection_probability(episodes, forged, sampled) == pytest.approx(expected)


def test_the_sample_is_the_smallest_that_catches_five_percent_with_099() -> None:
    # By hand: 600 episodes, 30 forged; 84 re-runs miss all with 0.0096, 83 with 0.0101.
    assert forged_episodes(600, 0.05) == 30
    assert sample_size_for(600, 0.05, 0.99) == 84
    assert 1 - stats.hypergeom(600, 30, 83).pmf(0) < 0.99 <= 1 - stats.hypergeom(600, 30, 84).pmf(0)
    assert sample_size_for(8, 0.05, 0.99) == 8  # one forged episode in eight: re-run all
    assert detection_probability(10, 3, 8) == 1.0  # too few unforged episodes to avoid them all
