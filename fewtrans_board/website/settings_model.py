"""View types of the CLIP-settings pages (built by ``clip_settings``).

One method under the original and the inductive setting, and the comparison of the two
sub-benchmarks.
"""

from __future__ import annotations

from dataclasses import dataclass

from markupsafe import Markup

from fewtrans_board.results.per_shot import PerShot
from fewtrans_board.website.model import BenchmarkView, MethodView


@dataclass(frozen=True)
class Setting:
    """One method in one setting: its average over shots and the shared datasets."""

    method: MethodView
    average: PerShot


@dataclass(frozen=True)
class MethodPair:
    """One method under both settings (headline aggregation, average over shots).

    ``key`` is ``clip_settings.method_key``: ``name`` (adapter on base model) and the HPE
    protocol; ranks are among the pairs of that protocol.
    """

    key: str
    name: str
    protocol: str
    original: Setting
    inductive: Setting
    rank_original: int
    rank_inductive: int

    @property
    def gap(self) -> float:
        """Original minus inductive average accuracy (points)."""
        return self.original.average.average - self.inductive.average.average


@dataclass(frozen=True)
class ReportedPair:
    """One method's averages under both settings as a paper reports them."""

    method: str
    original: float
    inductive: float
    source: str

    @property
    def gap(self) -> float:
        """Original minus inductive average accuracy (points)."""
        return self.original - self.inductive


@dataclass(frozen=True)
class SettingsComparison:
    """Both settings' views, the datasets they share and the methods present in both."""

    original: BenchmarkView
    inductive: BenchmarkView
    datasets: list[str]
    pairs: list[MethodPair]
    flips: list[tuple[str, str]]
    scatter: Markup
    reported: list[ReportedPair]
    reported_scatter: Markup
