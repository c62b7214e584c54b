"""fewtrans-board: a rigorous, plugin-based toolkit and leaderboard for few-shot transfer.

The package root re-exports the public API a plugin author needs. Nothing here imports
torch; heavy libraries are imported inside ``load()`` / ``fit()`` only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fewtrans_board.api.adapter import (
    Adapter,
    AdapterConfig,
    Predictor,
    hparam,
)
from fewtrans_board.api.backbone import Backbone, Preprocessing, TextEncoder
from fewtrans_board.api.dataset_spec import ClassSplit, DatasetSpec
from fewtrans_board.api.episode_data import ImageSet, SupportSet
from fewtrans_board.api.hookspecs import hookimpl
from fewtrans_board.api.model_spec import ModelSpec
from fewtrans_board.api.recipe import Recipe
from fewtrans_board.blocks.lockstep import PlannedAdapter, TrainingPlan
from fewtrans_board.core.version import __version__

if TYPE_CHECKING:
    from pathlib import Path

    import pyarrow as pa

__all__ = [
    "Adapter",
    "AdapterConfig",
    "Backbone",
    "ClassSplit",
    "DatasetSpec",
    "ImageSet",
    "ModelSpec",
    "PlannedAdapter",
    "Predictor",
    "Preprocessing",
    "Recipe",
    "SupportSet",
    "TextEncoder",
    "TrainingPlan",
    "__version__",
    "hookimpl",
    "hparam",
    "load_leaderboard",
]


def load_leaderboard(source: str | Path) -> pa.Table:
    """The whole leaderboard as a pyarrow Table: a row per entry x dataset x aggregation.

    The table ``site build`` writes as ``leaderboard.parquet`` and ``leaderboard.csv``,
    with provenance columns (entry id, benchmark, HPE protocol, status, method, model,
    adapter, manifest file and sha256, episodes, mean, ci95, ddof, n, plugin pins, run id,
    the fewtrans-board version that wrote it); the columns are
    ``fewtrans_board.leaderboard.table.COLUMNS``. With pandas installed,
    ``load_leaderboard(...).to_pandas()`` gives a DataFrame (pandas is not a dependency).

    Example::

        import pyarrow.compute as pc

        import fewtrans_board

        table = fewtrans_board.load_leaderboard("https://example.org/leaderboard.parquet")
        hpe = table.filter(pc.field("aggregation") == "hpe")

    Args:
        source: a leaderboard store folder (computed from its per-episode rows, without
            building the site), a built site's folder, the ``leaderboard.parquet`` or
            ``leaderboard.csv`` file, a ``file://`` URL of any of these, or an
            ``http(s)://`` URL of the Parquet file (of the CSV when it ends in ``.csv``;
            of a site when it ends in ``/``).

    Raises:
        LeaderboardTableError: the source is none of these, or unreadable.
        SubmissionError: a store entry is unreadable (named).
    """
    from fewtrans_board.leaderboard.table import load_leaderboard as load  # imports pyarrow

    return load(source)
