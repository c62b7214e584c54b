"""Statistics derived from per-episode rows (never typed in by hand). scipy is the test oracle."""

from fewtrans_board.stats.base_novel import (
    harmonic_mean,
    harmonic_mean_average_ci,
    harmonic_mean_ci,
)
from fewtrans_board.stats.bootstrap import (
    BootstrapCI,
    average_ci,
    averages_and_ranks,
    cross_dataset_mean,
    holm_paired,
    pool,
    rank_intervals,
    tied_with_best,
)
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
    "averages_and_ranks",
    "cohens_d_paired",
    "cross_dataset_mean",
    "harmonic_mean",
    "harmonic_mean_average_ci",
    "harmonic_mean_ci",
    "holm",
    "holm_paired",
    "mean_ci",
    "paired_ttest",
    "pool",
    "rank_intervals",
    "tied_with_best",
    "wilcoxon_signed_rank",
]
