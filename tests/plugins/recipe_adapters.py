"""A test plugin: the tiny CLIP and a CLIP-Adapter that declares a published recipe.

The recipe trains with SGD and momentum (unlike FewTrans's Adam) and sets one value per
dataset, so a ``published`` run shows both reaching the configuration it evaluates.
"""

from __future__ import annotations

from collections.abc import Callable

from fewtrans_board import Adapter, Recipe, hookimpl
from fewtrans_board.methods.adapters.clip_tuning.clip_adapter import ClipAdapterAdapter
from tests.plugins.tiny_models import register_models as register_models

RECIPE = Recipe(
    name="test-recipe",
    source="tests/plugins/recipe_adapters.py (a test recipe)",
    values={"optimizer": "sgd", "momentum": 0.9, "lr": 0.01, "epochs": 2, "batch_size": 16},
    per_dataset={"digits": {"batch_size": 8}},
)


class RecipeClipAdapter(ClipAdapterAdapter):
    """CLIP-Adapter with a published recipe (test helper)."""

    name = "recipe-clip-adapter"
    recipes = (RECIPE,)


@hookimpl
def register_adapters(register: Callable[[type[Adapter]], None]) -> None:
    """Register the adapter with a recipe."""
    register(RecipeClipAdapter)
