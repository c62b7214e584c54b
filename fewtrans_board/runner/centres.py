"""The configuration a run centres on: searched (or defaults and ``--config``) or a recipe."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fewtrans_board.api.adapter import Adapter, AdapterConfig
from fewtrans_board.api.recipe import Recipe
from fewtrans_board.core.errors import ConfigError, FewtransError
from fewtrans_board.hpe.protocols import HpeProtocol
from fewtrans_board.runner.spec import RunSpec, load_centre_file


@dataclass(frozen=True)
class Centre:
    """The configuration a run centres its grid on, and where it came from.

    Attributes:
        config: the centre configuration.
        record: the centre-search result it was read from (``--centre``), if any.
        recipe: the published recipe it is (``published`` runs), if any.
    """

    config: AdapterConfig
    record: dict[str, Any] | None = None
    recipe: Recipe | None = None


def decide_centre(
    spec: RunSpec, adapter_cls: type[Adapter], hpe: HpeProtocol, dataset: str
) -> Centre:
    """The centre ``spec`` asks for under ``hpe``: a recipe's values, or a (searched) centre.

    Args:
        spec: the run (``config``, ``centre_file``, ``recipe``).
        adapter_cls: the adapter class.
        hpe: the protocol (its ``centre_rule`` says which kind of centre it takes).
        dataset: the manifest's dataset (recipes may set per-dataset values).

    Raises:
        FewtransError: a recipe under a protocol that takes a centre, a centre or
            overrides under one that takes a recipe, or values that make no configuration.
    """
    if hpe.centre_rule == "recipe":
        config, recipe = recipe_centre(
            adapter_cls, spec.recipe, dataset, spec.config, spec.centre_file
        )
        return Centre(config, recipe=recipe)
    if spec.recipe is not None:
        raise FewtransError(f"--recipe runs under the published protocol, not {hpe.name!r}")
    record = load_centre_file(spec.centre_file) if spec.centre_file else None
    config = resolve_centre(spec.adapter, adapter_cls, spec.config, record, spec.centre_file)
    return Centre(config, record)


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
