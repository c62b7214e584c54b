"""Which recorded adapter schemas the installed adapter may re-run (entries across releases)."""

from __future__ import annotations

import copy
from typing import Any

from fewtrans_board.leaderboard.verification.compatibility import schema_difference


def _schema() -> dict[str, Any]:
    from fewtrans_board.registry.lookup import Registry
    from fewtrans_board.registry.manager import get_plugin_manager

    registry = Registry.from_plugin_manager(get_plugin_manager(entry_points=False))
    schema: dict[str, Any] = registry.adapters.get("mean-centroid").obj.schema()
    return schema


def test_the_same_schema_and_added_defaulted_options_or_recipes_are_compatible() -> None:
    recorded = _schema()
    assert schema_difference(recorded, copy.deepcopy(recorded)) is None
    newer = copy.deepcopy(recorded)
    newer["fields"].append({"name": "new_option", "type": "bool", "default": False, "hpe": None})
    newer["recipes"] = [*newer.get("recipes", []), {"name": "later", "values": {}}]
    assert schema_difference(recorded, newer) is None


def test_removed_or_changed_options_recipes_and_flags_are_mismatches() -> None:
    recorded = _schema()
    assert recorded["fields"], "mean-centroid has options to change"
    first = recorded["fields"][0]["name"]
    removed = copy.deepcopy(recorded)
    removed["fields"] = removed["fields"][1:]
    assert schema_difference(recorded, removed) == f"option {first!r} was removed"
    for key, value in (("default", "changed"), ("type", "str"), ("hpe", "lr")):
        changed = copy.deepcopy(recorded)
        changed["fields"][0][key] = value
        assert f"changed its {key}" in str(schema_difference(recorded, changed))
    flag = copy.deepcopy(recorded)
    flag["transductive"] = not recorded.get("transductive", False)
    assert "transductive" in str(schema_difference(recorded, flag))
    if recorded.get("recipes"):
        recipe = copy.deepcopy(recorded)
        recipe["recipes"][0]["values"] = {"lr": 0.05}
        assert "recipe" in str(schema_difference(recorded, recipe))
