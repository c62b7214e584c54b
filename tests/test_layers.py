"""The package is a one-way house: no module imports from a layer above its own."""

from __future__ import annotations

import ast
from pathlib import Path

import fewtrans_board

PACKAGE = Path(fewtrans_board.__file__).parent

LAYERS: list[set[str]] = [
    {"errors", "canonical", "atomic", "plugin_calls", "threads", "sandbox"},
    {"datasets"},
    {"models"},
    {"adapters"},
    {"hookspecs", "plugins", "registry", "testing", "toolkit"},
    {"episodes", "hpe", "stats"},
    {"results"},
    {"runner"},
    {"unlearning", "meta", "analysis"},
    {"preflight", "leaderboard"},
    {"website"},
    {"demo", "inductive_demo", "docs"},
    {"cli"},
    {"default_plugins", "__init__", "__main__"},
]
"""Top-level modules and subpackages of ``fewtrans_board``, lowest layer first.

A module may import from its own layer and the ones below; the runner uses results and
HPE, never the other way round, and the CLI only wires commands to the layers below.
"""

LEVEL = {name: level for level, names in enumerate(LAYERS) for name in names}


def unit_of(path: Path) -> str:
    """The top-level module or subpackage a file belongs to."""
    relative = path.relative_to(PACKAGE)
    return relative.parts[0] if len(relative.parts) > 1 else relative.stem


def imported_units(tree: ast.AST) -> set[str]:
    """Top-level units of ``fewtrans_board`` a module imports, lazily imported ones too."""
    units = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
            if node.module == "fewtrans_board":
                names = [f"fewtrans_board.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "fewtrans_board" and len(parts) > 1:
                units.add(parts[1])
    return units


def test_every_unit_has_a_layer() -> None:
    units = {unit_of(path) for path in PACKAGE.rglob("*.py")}
    unplaced = sorted(u for u in units if u not in LEVEL)
    assert not unplaced, f"place {unplaced} in LAYERS of tests/test_layers.py"


def test_no_import_points_up() -> None:
    upward = []
    for path in sorted(PACKAGE.rglob("*.py")):
        unit = unit_of(path)
        for target in imported_units(ast.parse(path.read_text(encoding="utf-8"))):
            if target in LEVEL and LEVEL[target] > LEVEL[unit]:
                upward.append(f"{path.relative_to(PACKAGE.parent)} ({unit}) imports {target}")
    assert not upward, "imports from a higher layer:\n" + "\n".join(upward)


def test_the_check_catches_an_upward_import() -> None:
    tree = ast.parse("def f():\n    from fewtrans_board.runner.context import RunContext\n")
    assert "runner" in imported_units(tree)
    assert LEVEL["runner"] > LEVEL["results"]
