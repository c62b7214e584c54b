"""fewtrans-board: a rigorous, plugin-based toolkit and leaderboard for few-shot transfer.

The package root re-exports the public API a plugin author needs. Nothing here imports
torch; heavy libraries are imported inside ``load()`` / ``fit()`` only.
"""

from __future__ import annotations

__version__ = "0.1.0"

from fewtrans_board.adapters.base import (
    Adapter,
    AdapterConfig,
    Predictor,
    hparam,
)
from fewtrans_board.adapters.episode_data import ImageSet, SupportSet
from fewtrans_board.adapters.lockstep import PlannedAdapter, TrainingPlan
from fewtrans_board.datasets.spec import ClassSplit, DatasetSpec
from fewtrans_board.hookspecs import hookimpl
from fewtrans_board.models.backbone import Backbone, Preprocessing, TextEncoder
from fewtrans_board.models.spec import ModelSpec

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
    "SupportSet",
    "TextEncoder",
    "TrainingPlan",
    "__version__",
    "hookimpl",
    "hparam",
]
