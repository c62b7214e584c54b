"""``plugins``, ``datasets``, ``models`` and ``adapters`` listing commands."""

from __future__ import annotations

from typing import Any

import click

from fewtrans_board.cli.app import App, pass_app
from fewtrans_board.cli.groups import DefaultGroup, echo_json, echo_table
from fewtrans_board.registry.lookup import Catalog, Registered


def _matching(catalog: Catalog[Any], pattern: str) -> list[Registered[Any]]:
    """List entries matching ``pattern``; a plain name that matches nothing is an error."""
    entries = catalog.list(pattern)
    if not entries and not any(ch in pattern for ch in "*?["):
        catalog.get(pattern)  # raises UnknownNameError with suggestions
    return entries


def _provenance(entry: Registered[Any]) -> str:
    if entry.distribution:
        return f"{entry.distribution} {entry.version}"
    return f"{entry.plugin} (unpackaged)"


@click.command("plugins")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@pass_app
def plugins_command(app: App, as_json: bool) -> None:
    """List loaded plugins with their distribution, version and hooks."""
    rows: list[dict[str, Any]] = []
    for name, plugin in sorted(app.pm.list_name_plugin(), key=lambda np: np[0]):
        source = app.pm.source_of(name)
        hooks = sorted(c.name for c in app.pm.get_hookcallers(plugin) or [])
        rows.append(
            {
                "name": name,
                "distribution": source.distribution,
                "version": source.version,
                "builtin": source.builtin,
                "hooks": hooks,
            }
        )
    if as_json:
        echo_json(rows)
        return
    echo_table(
        ["plugin", "distribution", "version", "hooks"],
        [
            [r["name"], r["distribution"] or "-", r["version"] or "-", ", ".join(r["hooks"])]
            for r in rows
        ],
    )


@click.group("datasets", cls=DefaultGroup)
def datasets_group() -> None:
    """List datasets (default) or scan a local copy ('datasets scan').

    Listing options (a name pattern, --json) belong to the default subcommand: see
    'datasets list --help'.
    """


@datasets_group.command("list")
@click.argument("pattern", default="*")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@pass_app
def datasets_list(app: App, pattern: str, as_json: bool) -> None:
    """List registered datasets whose name matches PATTERN."""
    entries = _matching(app.registry.datasets, pattern)
    if as_json:
        echo_json([{**e.obj.summary(), **e.provenance()} for e in entries])
        return
    echo_table(
        ["dataset", "classes", "base/novel", "domain", "benchmarks", "from"],
        [
            [
                e.name,
                e.obj.num_classes,
                f"{len(e.obj.split.base)}/{len(e.obj.split.novel)}",
                e.obj.domain,
                ",".join(e.obj.benchmarks),
                _provenance(e),
            ]
            for e in entries
        ],
    )


@click.group("models", cls=DefaultGroup)
def models_group() -> None:
    """List registered models (pretrained backbones).

    Listing options (a name pattern, --json) belong to the default subcommand: see
    'models list --help'.
    """


@models_group.command("list")
@click.argument("pattern", default="*")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@pass_app
def models_list(app: App, pattern: str, as_json: bool) -> None:
    """List registered models whose name matches PATTERN."""
    entries = _matching(app.registry.models, pattern)
    if as_json:
        echo_json([{**e.obj.summary(), **e.provenance()} for e in entries])
        return
    echo_table(
        ["model", "family", "modalities", "source", "from"],
        [
            [e.name, e.obj.family, "+".join(e.obj.modalities), e.obj.source, _provenance(e)]
            for e in entries
        ],
    )


@click.group("adapters", cls=DefaultGroup)
def adapters_group() -> None:
    """List registered adapters (transfer algorithms).

    Listing options (a name pattern, --options for hyperparameters and their ranges,
    --json) belong to the default subcommand: see 'adapters list --help'.
    """


@adapters_group.command("list")
@click.argument("pattern", default="*")
@click.option(
    "--options",
    "show_options",
    is_flag=True,
    help="Show each hyperparameter (set with --config NAME=VALUE): type, default, valid "
    "range, HPE role; and the adapter's published recipes.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@pass_app
def adapters_list(app: App, pattern: str, show_options: bool, as_json: bool) -> None:
    """List registered adapters whose name matches PATTERN."""
    entries = _matching(app.registry.adapters, pattern)
    if as_json:
        echo_json(
            [
                {
                    **e.obj.summary(),
                    **e.provenance(),
                    "options": e.obj.options(),
                    "recipes": [r.describe() for r in e.obj.own_recipes()],
                }
                for e in entries
            ]
        )
        return
    if not show_options:
        echo_table(
            ["adapter", "description", "from"],
            [[e.name, e.obj.description, _provenance(e)] for e in entries],
        )
        return
    for e in entries:
        click.echo(f"{e.name}: {e.obj.description} [{_provenance(e)}]")
        if e.obj.paper:
            click.echo(f"  paper: {e.obj.paper}")
        fields = e.obj.Config.fields_info()
        if fields:
            # Hyperparameters are not flags: each is set as '--config NAME=VALUE'.
            click.echo("  options (set each with --config NAME=VALUE):")
        else:
            click.echo("  (no options)")
        for f in fields:
            role = f" [HPE {f.hpe}]" if f.hpe else ""
            valid = f", {f.valid.text()}" if f.range else ""
            click.echo(f"    {f.name} ({f.type}, default {f.default!r}{valid}){role}: {f.help}")
        for recipe in e.obj.own_recipes():
            _echo_recipe(e.obj, recipe)


def _echo_recipe(adapter: Any, recipe: Any) -> None:
    """A published recipe: optimiser, schedule, values, source and notes (evaluate --recipe)."""
    from fewtrans_board.blocks.training import optimiser_of, schedule_of

    config = adapter.Config.from_dict({**adapter.Config().to_dict(), **recipe.values})
    training = ""
    if hasattr(config, "optimizer"):
        training = f": {optimiser_of(config).describe()}, {schedule_of(config).describe()}"
    click.echo(f"  recipe {recipe.name} (version {recipe.version}){training}")
    click.echo(f"    values: {', '.join(f'{k}={v!r}' for k, v in recipe.values.items())}")
    if recipe.per_dataset:
        keys = sorted({k for values in recipe.per_dataset.values() for k in values})
        click.echo(f"    per dataset: {', '.join(keys)} on {len(recipe.per_dataset)} datasets")
    click.echo(f"    source: {recipe.source}")
    if recipe.notes:
        click.echo(f"    notes: {recipe.notes}")
