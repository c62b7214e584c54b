"""Statistics derived from per-episode rows (never typed in by hand)."""

from fewtrans_board.stats.intervals import MeanCI, mean_ci

__all__ = ["MeanCI", "mean_ci"]
