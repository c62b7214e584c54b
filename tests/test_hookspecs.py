"""Meta-tests: every hook is typed, documented, in CONTRIBUTING.md, and has a test."""

from __future__ import annotations

import ast
import functools
import inspect
from pathlib import Path

import pytest

from fewtrans_board.api import hookspecs
from fewtrans_board.jobs.docs import render_hook_reference, replace_section
from fewtrans_board.registry.manager import hook_names

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", hook_names())
def test_hook_is_typed_and_documented(name: str) -> None:
    function = getattr(hookspecs, name)
    signature = inspect.signature(function)
    doc = inspect.getdoc(function) or ""
    assert doc, f"{name} has no docstring"
    assert "Args:" in doc and "Example:" in doc
    for param in signature.parameters.values():
        assert param.annotation is not inspect.Parameter.empty, f"{name}({param.name}) untyped"
        assert f"{param.name}:" in doc, f"{name} does not document {param.name}"


@functools.cache
def functions_in_tests() -> frozenset[str]:
    """Every function defined in the test modules (parsed once for all the hooks)."""
    defined: set[str] = set()
    for path in (ROOT / "tests").glob("test_*.py"):
        tree = ast.parse(path.read_text())
        defined |= {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    return frozenset(defined)


@pytest.mark.parametrize("name", hook_names())
def test_hook_has_a_test(name: str) -> None:
    assert f"test_hook_{name}" in functions_in_tests(), f"write a test named test_hook_{name}"


def test_contributing_hook_reference_is_current() -> None:
    text = (ROOT / "CONTRIBUTING.md").read_text()
    assert replace_section(text, render_hook_reference()) == text, (
        "CONTRIBUTING.md is out of date: run python -m fewtrans_board.jobs.docs CONTRIBUTING.md"
    )
    for name in hook_names():
        assert f"### `{name}(" in text
