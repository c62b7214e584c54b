"""Class lists of the built-in datasets, as JSON data with their sources (see each file)."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any


@cache
def load_classlist(name: str) -> dict[str, Any]:
    """Return the parsed ``<name>.json`` class list shipped with fewtrans-board."""
    text = resources.files(__package__).joinpath(f"{name}.json").read_text(encoding="utf-8")
    data: dict[str, Any] = json.loads(text)
    return data
