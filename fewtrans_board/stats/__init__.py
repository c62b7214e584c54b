"""Statistics derived from per-episode rows (never typed in by hand). scipy is the test oracle."""

from fewtrans_board.stats.bootstrap import BootstrapCI, average_ci, rank_intervals, tied_with_best
from fewtrans_board.stats.intervals import MeanCI, mean_ci
from fewtrans_board.stats.tests import (
    PairedTest,
    cohens_d_paired,
    holm,
    paired_ttest,
    wilcoxon_signed_rank,
)

__all__ = [
    "BootstrapCI",
    "MeanCI",
    "PairedTest",
    "average_ci",
    "cohens_d_paired",
    "holm",
    "mean_ci",
    "paired_ttest",
    "rank_intervals",
    "tied_with_best",
    "wilcoxon_signed_rank",
]
