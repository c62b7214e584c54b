"""The collapsed-predictions mark of an entry's rows (see :mod:`fewtrans_board.results.collapse`).

Each run's summary carries its collapse check; an entry is marked on its rows when, over
all of its runs, more than half of the counted episodes collapsed to one predicted class.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from fewtrans_board.results.collapse import COLLAPSE_SHARE, Collapse

__all__ = ["collapse_of_summaries", "collapse_title", "entry_collapse"]


def collapse_of_summaries(summaries: Iterable[Mapping[str, Any]]) -> Collapse:
    """The runs' collapse checks pooled: episodes and collapsed episodes summed.

    Summaries without a ``collapse`` record (written before the check existed) add nothing.
    """
    episodes, collapsed, classes = 0, 0, dict[int, int]()
    threshold, aggregation = COLLAPSE_SHARE, ""
    for summary in summaries:
        record = summary.get("collapse")
        if not isinstance(record, Mapping):
            continue
        episodes += int(record.get("episodes", 0))
        collapsed += int(record.get("collapsed", 0))
        threshold = float(record.get("threshold", threshold))
        aggregation = str(record.get("aggregation", aggregation))
        for key, count in dict(record.get("classes", {})).items():
            classes[int(key)] = classes.get(int(key), 0) + int(count)
    return Collapse(episodes, collapsed, classes, threshold, aggregation)


def entry_collapse(method: Any) -> Collapse:
    """The pooled collapse check of a site entry (a ``MethodView``: its runs' summaries)."""
    return collapse_of_summaries(run.summary for run in method.runs.values())


def collapse_title(check: Collapse) -> str:
    """The hover text of a mark: what was counted and why it matters."""
    return (
        f"On {check.collapsed} of {check.episodes} episodes at least "
        f"{check.threshold:.0%} of the query predictions of the headline fusion "
        f"({check.aggregation or 'headline'}) fall on one class: the accuracy is that "
        "class's share of the queries (e.g. a tie broken by argmax), not discrimination."
    )
