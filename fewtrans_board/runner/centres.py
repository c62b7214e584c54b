"""The configuration a run centres on: searched (or defaults and ``--config``) or a recipe."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fewtrans_board.api.adapter import Adapter, AdapterConfig
from fewtrans_board.api.recipe import Recipe
from fewtrans_board.core.errors import ConfigError, FewtransError


def resolve_centre(
    adapter: str,
    adapter_cls: type[Adapter],
    overrides: Mapping[str, Any],
    centre_record: Mapping[str, Any] | None = None,
    centre_file: str | Path | None = None,
) -> AdapterConfig:
    """The HPE centre of an adapter: its defaults, then a searched centre, then overrides.

    Args:
        adapter: the adapter's registry name.
        adapter_cls: the adapter class.
        overrides: ``key -> value`` centre overrides (``--config``), applied last.
        centre_record: a centre-search result (``hpe search`` output), if any.
        centre_file: where ``centre_record`` was read from (named in errors).

    Raises:
        FewtransError: the centre record was searched for another adapter, or the values
            do not make a valid configuration.
    """
    base: dict[str, Any] = {}
    if centre_record is not None:
        if centre_record["adapter"] != adapter:
            raise FewtransError(
                f"centre file {centre_file} was searched for adapter "
                f"{centre_record['adapter']!r}, not {adapter!r}"
            )
        base.update(centre_record["centre"])
    base.update(overrides)
    try:
        return adapter_cls.Config.from_dict({**adapter_cls.Config().to_dict(), **base})
    except ConfigError as exc:
        raise FewtransError(f"adapter {adapter!r}: {exc}") from exc


def recipe_centre(
    adapter_cls: type[Adapter],
    recipe: str | None,
    dataset: str,
    overrides: Mapping[str, Any],
    centre_file: str | Path | None,
) -> tuple[AdapterConfig, Recipe]:
    """The configuration a ``published`` run evaluates: a recipe's values on ``dataset``.

    Args:
        adapter_cls: the adapter class.
        recipe: the recipe's name (``None``: the adapter's only recipe).
        dataset: the manifest's dataset (recipes may set per-dataset values).
        overrides: ``--config`` values, refused: a published recipe is run as published.
        centre_file: a centre-search file, refused likewise.

    Raises:
        FewtransError: the adapter has no such recipe, or a centre was given.
    """
    if overrides or centre_file:
        raise FewtransError(
            f"the published protocol runs adapter {adapter_cls.name!r}'s recipe as published; "
            "drop --config and --centre (or run another HPE protocol)"
        )
    try:
        chosen = adapter_cls.recipe(recipe)
        values = {**adapter_cls.Config().to_dict(), **chosen.values_for(dataset)}
        return adapter_cls.Config.from_dict(values), chosen
    except ConfigError as exc:
        raise FewtransError(str(exc)) from exc
