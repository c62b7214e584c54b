"""fewtrans-board: a rigorous, plugin-based toolkit and leaderboard for few-shot transfer.

The package root re-exports the public API a plugin author needs. Nothing here imports
torch; heavy libraries are imported inside ``load()`` / ``fit()`` only.
"""

from __future__ import annotations

__version__ = "0.1.0"

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
from fewtrans_board.core import moved as _moved

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
]

_moved.install()  # release 0.1's import paths keep working, with a warning
