"""Collapsed predictions: a run whose predictions fall on one class on most episodes is marked.

The red team: the unlearned demo CLIP's CoOp (every class prompt encoded alike, argmax picks
class 0 for every query) and a normal run whose stored predictions are all rewritten to 0.
The controls: the same normal run as stored, and balanced predictions.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from fewtrans_board.results.collapse import (
    COLLAPSE_SHARE,
    collapse_of,
    run_collapse,
    top_share,
)
from fewtrans_board.results.load import RunResults, load_run
from fewtrans_board.results.summary import summarize

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "leaderboard" / "results"
COOP_UNLEARNED = RESULTS / "coop--demo-clip-digits--unlearned" / "clip-kshot--digits-5-9"
MEAN_CENTROID = RESULTS / "mean-centroid--demo-cnn" / "fewtrans-varied--digits"


def _all_class_zero(run: RunResults) -> RunResults:
    """The run with every stored prediction (members and ensembles) replaced by class 0."""
    column = run.table.column("predictions")
    zeros = pa.array([[0] * len(p) for p in column.to_pylist()], type=column.type)
    index = run.table.schema.get_field_index("predictions")
    return dataclasses.replace(run, table=run.table.set_column(index, "predictions", zeros))


def test_top_share_is_the_most_predicted_class_and_its_share() -> None:
    assert top_share([0, 0, 0, 1]) == (0, 0.75)
    assert top_share([3, 2, 2, 3, 3]) == (3, 0.6)
    assert top_share([1, 2]) == (1, 0.5)  # a tie goes to the lower index
    assert top_share([]) == (-1, 0.0)


def test_the_threshold_is_inclusive_and_one_way_episodes_are_not_counted() -> None:
    nineteen_of_twenty = [0] * 19 + [1]  # 95%: collapsed
    eighteen_of_twenty = [0] * 18 + [1, 2]  # 90%: not
    check = collapse_of([(5, nineteen_of_twenty), (5, eighteen_of_twenty), (1, [0] * 20)])
    assert COLLAPSE_SHARE == 0.95
    assert (check.episodes, check.collapsed, check.classes) == (2, 1, {0: 1})
    assert not check.marked  # half is not most
    assert check.line == ""


def test_class_zero_everywhere_is_marked_and_balanced_predictions_are_not() -> None:
    rng = np.random.default_rng(0)
    zero = collapse_of([(5, np.zeros(30, dtype=int))] * 15)
    assert zero.marked and (zero.collapsed, zero.episodes) == (15, 15)
    assert zero.line == "collapsed on 15/15 episodes (class 0 on 15)"
    balanced = collapse_of([(5, rng.permutation(np.repeat(np.arange(5), 6)))] * 15)
    assert not balanced.marked and balanced.collapsed == 0


def test_a_run_rewritten_to_predict_class_zero_is_marked_and_the_stored_one_is_not() -> None:
    run = load_run(MEAN_CENTROID)
    honest = run_collapse(run)
    assert honest.aggregation == "vote"  # the entry's headline fusion (fewtrans-reference)
    assert honest.episodes == len(run.aggregations()["hpe"]) and not honest.marked
    forged = run_collapse(_all_class_zero(run))
    assert forged.marked and forged.collapsed == forged.episodes == honest.episodes
    assert forged.classes == {0: forged.episodes}


def test_the_unlearned_coop_entry_collapses_on_every_episode() -> None:
    run = load_run(COOP_UNLEARNED)
    check = run_collapse(run)
    assert (check.collapsed, check.episodes, check.classes) == (15, 15, {0: 15})
    # Independent of the check: every stored headline prediction is class 0.
    summary = summarize(run)
    assert summary["collapse"]["marked"] and summary["collapse"]["line"].startswith(
        "collapsed on 15/15 episodes"
    )


def test_results_summary_prints_the_collapse(invoke) -> None:  # type: ignore[no-untyped-def]
    result = invoke(["results", "summary", str(COOP_UNLEARNED), str(MEAN_CENTROID)])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if "collapsed on" in line]
    assert len(lines) == 1 and "coop on digits-5-9: collapsed on 15/15 episodes" in lines[0]


@pytest.mark.parametrize(
    ("page", "marked"),
    [
        ("benchmark-demo-clip-inductive.html", True),
        ("method-coop--demo-clip-digits--unlearned.html", True),
        ("benchmark-demo.html", False),
        ("method-mean-centroid--demo-cnn.html", False),
    ],
)
def test_the_site_marks_collapsed_entries_only(
    committed_site: Path, page: str, marked: bool
) -> None:
    html = (committed_site / page).read_text(encoding="utf-8")
    assert ('class="flag collapsed"' in html) is marked
    if marked:
        assert "collapsed on 15/15 episodes" in html
