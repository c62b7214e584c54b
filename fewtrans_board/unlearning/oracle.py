"""The oracle check as a verdict: does an unlearned model transfer like one that never saw?

Is an unlearned model's few-shot accuracy that of a model that never saw the classes?

For one method, the per-episode accuracies on the unlearned model and on the model trained
without the forget classes (the oracle, "scratch") are paired over the same episodes. The
verdict reads the 95% CI of the mean paired difference (unlearned - scratch, normal
approximation as everywhere in the project, :func:`~fewtrans_board.stats.mean_ci`) against
a margin ``m`` (points):

- the CI lies inside ``[-m, m]``: **unlearned ≈ never seen** (equivalence by CI inclusion);
- otherwise, the CI wholly above 0: **unlearned above never seen**, knowledge of the classes
  remains for this method;
- the CI wholly below 0: **unlearned below never seen**, unlearning removed more than the
  classes;
- otherwise (the CI crosses 0 and a margin): **inconclusive** at these episodes.

The paired t-test and Wilcoxon signed-rank p-values (``stats.tests``) are reported next to
it; they test "no difference", which the verdict does not need (equivalence is not the
absence of a significant difference).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fewtrans_board.stats.intervals import mean_ci
from fewtrans_board.stats.tests import paired_ttest, wilcoxon_signed_rank

ORACLE_MARGIN = 5.0
"""Equivalence margin (accuracy points): differences within it count as "never seen"."""

VERDICTS = ("equivalent", "above", "below", "inconclusive")


@dataclass(frozen=True)
class OracleVerdict:
    """Unlearned vs trained-without accuracy of one method, paired over episodes.

    Attributes:
        n: paired episodes.
        unlearned: mean accuracy on the unlearned model (%).
        scratch: mean accuracy on the model trained without the classes (%).
        difference: mean of unlearned - scratch (points).
        ci95: half-width of its 95% CI.
        t_p: two-sided paired t-test p-value.
        wilcoxon_p: two-sided Wilcoxon signed-rank p-value.
        margin: the equivalence margin (points).
        verdict: one of :data:`VERDICTS`.
    """

    n: int
    unlearned: float
    scratch: float
    difference: float
    ci95: float
    t_p: float
    wilcoxon_p: float
    margin: float
    verdict: str

    @property
    def low(self) -> float:
        """Lower end of the CI."""
        return self.difference - self.ci95

    @property
    def high(self) -> float:
        """Upper end of the CI."""
        return self.difference + self.ci95

    @property
    def line(self) -> str:
        """The verdict in one line."""
        ci = f"{self.difference:+.1f} [{self.low:+.1f}, {self.high:+.1f}]"
        if self.verdict == "equivalent":
            return f"unlearned ≈ never seen: difference {ci} within ±{self.margin:g} points"
        if self.verdict == "above":
            return f"unlearned above never seen by {ci} points: knowledge of the classes remains"
        if self.verdict == "below":
            return f"unlearned below never seen by {ci} points: unlearning removed more"
        return f"inconclusive: difference {ci} crosses 0 and the ±{self.margin:g} margin"

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form (with the CI ends and the line)."""
        return {**self.__dict__, "low": self.low, "high": self.high, "line": self.line}


def classify(low: float, high: float, margin: float) -> str:
    """The verdict of a difference whose 95% CI is ``[low, high]``."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return "inconclusive"
    if -margin <= low and high <= margin:
        return "equivalent"
    if low > 0:
        return "above"
    if high < 0:
        return "below"
    return "inconclusive"


def oracle_verdict(
    unlearned: Sequence[float] | np.ndarray,
    scratch: Sequence[float] | np.ndarray,
    margin: float = ORACLE_MARGIN,
) -> OracleVerdict:
    """Compare per-episode accuracies on the unlearned and the trained-without model.

    Raises:
        ValueError: samples of different lengths (they must be paired by episode).
    """
    a, b = np.asarray(unlearned, dtype=float), np.asarray(scratch, dtype=float)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"paired samples must be 1-d and equally long, got {a.shape}, {b.shape}")
    diff = mean_ci(a - b)
    return OracleVerdict(
        n=len(a),
        unlearned=float(a.mean()) if len(a) else float("nan"),
        scratch=float(b.mean()) if len(b) else float("nan"),
        difference=diff.mean,
        ci95=diff.ci95,
        t_p=paired_ttest(a, b).pvalue,
        wilcoxon_p=wilcoxon_signed_rank(a, b).pvalue,
        margin=margin,
        verdict=classify(diff.mean - diff.ci95, diff.mean + diff.ci95, margin),
    )
