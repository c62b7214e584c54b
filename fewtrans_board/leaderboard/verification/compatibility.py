"""When an entry's recorded adapter schema still describes the installed adapter.

An entry records the schema of the adapter that produced it. A later release may add an
option to a built-in adapter; the entry's configurations do not name it, so a re-run builds
them with its default. Such a schema is *compatible*: every recorded field is still there
with the same type, default and HPE role, every recorded published recipe is still there
unchanged, the adapter's flags (transductive, frozen backbone, training-free, needs text)
are unchanged, and only defaulted fields and new recipes were added. Whether the
default reproduces the old behaviour is not assumed: verification re-runs the entry and
compares its predictions, so a default that changed what the adapter computes is refused
there. A removed or changed field, or a changed flag, is a mismatch.
"""

from __future__ import annotations

from typing import Any

FIELD_KEYS = ("type", "default", "hpe")
"""What must stay the same of a recorded field (its help text may be reworded)."""


def schema_difference(recorded: dict[str, Any], installed: dict[str, Any]) -> str | None:
    """Why ``installed`` cannot re-run results made under ``recorded``; ``None`` if it can."""
    flags = {k: v for k, v in recorded.items() if k not in ("fields", "recipes")}
    now = {k: v for k, v in installed.items() if k not in ("fields", "recipes")}
    if flags != now:
        changed = sorted(k for k in set(flags) | set(now) if flags.get(k) != now.get(k))
        return f"the adapter's {', '.join(changed)} changed"
    recipes = installed.get("recipes", [])
    for recipe in recorded.get("recipes", []):
        if recipe not in recipes:
            return f"the published recipe {recipe.get('name')!r} changed or was removed"
    fields = {f["name"]: f for f in installed.get("fields", [])}
    for field in recorded.get("fields", []):
        current = fields.get(field["name"])
        if current is None:
            return f"option {field['name']!r} was removed"
        for key in FIELD_KEYS:
            if current.get(key) != field.get(key):
                return (
                    f"option {field['name']!r} changed its {key} from {field.get(key)!r} "
                    f"to {current.get(key)!r}"
                )
    return None
