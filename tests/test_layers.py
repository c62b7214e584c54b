"""The package is a one-way house: no module imports from a layer above its own.

The order holds between the top-level folders of ``fewtrans_board`` and, where a folder has
an inner order, between its sub-packages and modules too (``SUBLAYERS``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import fewtrans_board

PACKAGE = Path(fewtrans_board.__file__).parent

LAYERS: list[set[str]] = [
    {"core", "figures"},
    {"api"},
    {"datasets", "models"},
    {"blocks"},
    {"registry"},
    {"methods"},
    {"episodes", "hpe", "stats"},
    {"results"},
    {"testing", "toolkit"},
    {"runner"},
    {"unlearning", "metatrain", "analysis"},
    {"leaderboard"},
    {"website"},
    {"jobs", "reproduce"},
    {"cli"},
    {"default_plugins", "__init__", "__main__"},
]
"""Top-level folders (and the few loose modules) of ``fewtrans_board``, lowest layer first.

A unit may import from its own layer and the ones below: the contract (``api``) knows no
implementation, building blocks (``blocks``) know no method, methods know no runner, the
contract checks (``testing``) judge with the statistics of ``stats``, the runner uses
results and HPE, never the other way round, and the CLI only wires commands.
"""

SUBLAYERS: dict[str, list[set[str]]] = {
    "core": [
        {"errors", "version", "__init__", "progress", "digest_cache"},
        {"canonical", "atomic", "threads", "plugin_calls"},
        {"sandbox"},
    ],
    "api": [
        {"ranges", "recipe", "backbone", "fit_options", "__init__"},
        {"episode_data", "model_spec", "dataset_spec", "config"},
        {"adapter"},
        {"hookspecs"},
    ],
    "blocks": [
        {"training", "vit_parts", "pooling", "__init__"},
        {"lockstep", "vit_hooks", "deep_prompts", "clip_common"},
        {"finetune", "bottleneck", "unfuse", "prompter", "clip_training", "batched_heads"},
        {"layers"},
    ],
    "methods": [{"__init__"}, {"adapters", "meta", "trained"}],
}
"""Inner order of the folders that have one (their sub-packages and modules), lowest first."""

PEERS = {"methods"}
"""Folders whose units of one inner layer must not import each other at all: a method
family reuses building blocks, never another family's code."""

TORCH_FREE = {"api", "core"}
"""Folders whose modules import no heavy library when imported (inside functions is fine)."""

HEAVY = {"torch", "torchvision", "timm", "open_clip", "peft", "numpy", "scipy", "sklearn"}

LEVEL = {name: level for level, names in enumerate(LAYERS) for name in names}
SUBLEVEL = {
    package: {name: level for level, names in enumerate(layers) for name in names}
    for package, layers in SUBLAYERS.items()
}


def unit_of(path: Path, depth: int = 0) -> str:
    """The unit a file belongs to ``depth`` folders down (0: the top-level folder)."""
    parts = path.relative_to(PACKAGE).parts
    return parts[depth] if len(parts) > depth + 1 else Path(parts[depth]).stem


ROOT = ("__init__",)
"""What :func:`imported_modules` records for an import of the package root itself."""

ROOT_IMPORTERS = {"__init__", "__main__", "cli"}
"""The only units that may import the package root (``import fewtrans_board``, or a name it
re-exports: ``from fewtrans_board import __version__``). The root re-exports the public API
from every layer, so any other unit importing it imports from above its own layer."""


def is_submodule(name: str) -> bool:
    """Whether ``fewtrans_board.<name>`` is a module or a package of its own."""
    return (PACKAGE / name).is_dir() or (PACKAGE / f"{name}.py").is_file()


def imported_modules(tree: ast.AST) -> set[tuple[str, ...]]:
    """Module paths inside ``fewtrans_board`` a module imports, lazily imported ones too.

    An import of the package root (``import fewtrans_board``, ``from fewtrans_board import
    X`` for a name X that is not a submodule) is recorded as :data:`ROOT`.
    """
    modules = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
            if node.module == "fewtrans_board":
                names = [
                    f"fewtrans_board.{alias.name}" if is_submodule(alias.name) else "fewtrans_board"
                    for alias in node.names
                ]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        for name in names:
            parts = tuple(name.split("."))
            if parts == ("fewtrans_board",):
                modules.add(ROOT)
            elif parts[0] == "fewtrans_board":
                modules.add(parts[1:])
    return modules


def imported_units(tree: ast.AST) -> set[str]:
    """Top-level units of ``fewtrans_board`` a module imports."""
    return {parts[0] for parts in imported_modules(tree)}


def eager_imports(tree: ast.Module) -> set[str]:
    """Top-level names of the libraries a module imports when it is imported.

    Imports inside functions and under ``if TYPE_CHECKING:`` run later or never.
    """
    names: set[str] = set()
    pending: list[ast.stmt] = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
        elif isinstance(node, ast.If) and "TYPE_CHECKING" not in ast.unparse(node.test):
            pending.extend(node.body + node.orelse)
        elif isinstance(node, ast.Try):
            pending.extend(node.body)
    return names


def package_files() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_every_unit_has_a_layer() -> None:
    units = {unit_of(path) for path in package_files()}
    unplaced = sorted(u for u in units if u not in LEVEL)
    assert not unplaced, f"place {unplaced} in LAYERS of tests/test_layers.py"
    inner = {
        (package, unit_of(path, 1))
        for path in package_files()
        if (package := unit_of(path)) in SUBLAYERS
    }
    unplaced_inner = sorted(f"{p}/{u}" for p, u in inner if u not in SUBLEVEL[p])
    assert not unplaced_inner, f"place {unplaced_inner} in SUBLAYERS of tests/test_layers.py"


def upward_imports(path: Path, tree: ast.AST) -> list[str]:
    """Imports of one file that break the top-level or the inner order."""
    problems = []
    unit = unit_of(path)
    for target in imported_modules(tree):
        if target == ROOT:
            if unit not in ROOT_IMPORTERS:
                problems.append(
                    f"{path.relative_to(PACKAGE.parent)} ({unit}) imports the package root"
                )
            continue
        if target[0] in LEVEL and LEVEL[target[0]] > LEVEL[unit]:
            problems.append(f"{path.relative_to(PACKAGE.parent)} ({unit}) imports {target[0]}")
        if target[0] != unit or unit not in SUBLEVEL or len(target) < 2:
            continue
        inner, other = unit_of(path, 1), target[1]
        levels = SUBLEVEL[unit]
        if inner not in levels or other not in levels or inner == other:
            continue
        if levels[other] > levels[inner]:
            problems.append(f"{path.relative_to(PACKAGE.parent)} ({unit}/{inner}) imports {other}")
        elif unit in PEERS and levels[other] == levels[inner]:
            problems.append(
                f"{path.relative_to(PACKAGE.parent)} ({unit}/{inner}) imports its peer {other}"
            )
    return problems


@pytest.mark.slow
def test_no_import_points_up() -> None:
    upward = []
    for path in package_files():
        upward += upward_imports(path, ast.parse(path.read_text(encoding="utf-8")))
    assert not upward, "imports from a higher layer:\n" + "\n".join(upward)


def test_the_contract_and_the_core_import_no_heavy_library() -> None:
    heavy = []
    for path in package_files():
        if unit_of(path) in TORCH_FREE:
            tree = ast.parse(path.read_text(encoding="utf-8"))
            heavy += [f"{path.relative_to(PACKAGE)}: {n}" for n in eager_imports(tree) & HEAVY]
    assert not heavy, "import these inside functions:\n" + "\n".join(heavy)


@pytest.mark.parametrize(
    ("path", "source", "problem"),
    [
        (
            "runner/run.py",  # a lower layer reaching up, lazily
            "def f():\n    from fewtrans_board.cli.app import App\n",
            "(runner) imports cli",
        ),
        (
            "blocks/lockstep/trainer.py",  # the building blocks reaching into a method
            "from fewtrans_board.methods.adapters.heads import LinearProbe\n",
            "(blocks) imports methods",
        ),
        (
            "blocks/training.py",  # inside a folder: a low block importing a higher one
            "from fewtrans_board.blocks.lockstep.adam import StackedAdam\n",
            "(blocks/training) imports lockstep",
        ),
        (
            "methods/meta/adapters.py",  # one method family importing another
            "from fewtrans_board.methods.adapters.heads import LinearProbe\n",
            "(methods/meta) imports its peer adapters",
        ),
        (
            "stats/tests.py",  # a name the package root re-exports
            "from fewtrans_board import __version__\n",
            "(stats) imports the package root",
        ),
        (
            "core/errors.py",  # the root itself, lazily
            "def f():\n    import fewtrans_board\n",
            "(core) imports the package root",
        ),
        (
            "default_plugins/adapters.py",  # even from the top layer, but for __init__ / cli
            "import fewtrans_board as fb\n",
            "(default_plugins) imports the package root",
        ),
    ],
)
def test_the_check_catches_an_upward_import(path: str, source: str, problem: str) -> None:
    assert [p for p in upward_imports(PACKAGE / path, ast.parse(source)) if problem in p]


def test_the_check_allows_a_downward_import() -> None:
    source = "from fewtrans_board.blocks.training import run_adam\n"
    assert upward_imports(PACKAGE / "methods/adapters/heads.py", ast.parse(source)) == []
    # A submodule named through the root is that submodule, not the root.
    source = "from fewtrans_board import toolkit\n"
    assert upward_imports(PACKAGE / "jobs/docs.py", ast.parse(source)) == []
    source = "import fewtrans_board\nfrom fewtrans_board import __version__\n"
    assert upward_imports(PACKAGE / "cli/app.py", ast.parse(source)) == []


def test_the_heavy_import_check_sees_eager_imports_only() -> None:
    tree = ast.parse(
        "import json\nimport torch.nn\nif TYPE_CHECKING:\n    import numpy\n"
        "try:\n    import timm\nexcept ImportError:\n    pass\n"
        "def f():\n    import scipy\n"
    )
    assert eager_imports(tree) & HEAVY == {"torch", "timm"}
