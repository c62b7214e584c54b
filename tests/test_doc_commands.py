"""Every ``fewtrans-board ...`` command the docs show names a command that exists today.

The commands are collected from code in README.md, CONTRIBUTING.md, the manifests README,
the site's templates (``<pre>`` and ``<code>``), every command's ``--help`` text, the text
``submission template`` and ``sub-benchmarks`` print, and the quoted commands in the
package's messages. Their command words must resolve in the click tree to a command that
is not a hidden former name (``validate``, ``benchmarks``, ``datasets check`` still run,
warning, for one release) and ``fewtrans-board WORDS --help`` must exit 0. A listing group
(``datasets``, ``models``, ``adapters``) takes a name pattern where no subcommand is named:
such a bare word must match a registered name, so ``datasets check`` cannot pass as a
pattern either.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from fewtrans_board.cli import make_cli
from fewtrans_board.cli.groups import DefaultGroup
from fewtrans_board.registry.manager import get_plugin_manager

ROOT = Path(__file__).resolve().parents[1]
DOCS = [
    ROOT / "README.md",
    ROOT / "CONTRIBUTING.md",
    ROOT / "leaderboard" / "manifests" / "README.md",
]
TEMPLATES = sorted((ROOT / "site" / "templates").glob("*.html"))
WORD = re.compile(r"[a-z][a-z0-9-]*")
GLOBAL_OPTIONS = {"--debug"}


@cache
def cli() -> click.Group:
    return make_cli(get_plugin_manager())


def invoke(args: list[str]) -> tuple[int, str]:
    result = CliRunner().invoke(cli(), args, catch_exceptions=False)
    return result.exit_code, result.output


def command_words(snippet: str) -> Iterator[list[str]]:
    """The command words after each ``fewtrans-board`` in a piece of code."""
    for match in re.finditer(r"(?<![\w./-])fewtrans-board(?![\w-])([^\n]*)", snippet):
        tokens = match.group(1).split()
        while tokens and tokens[0] in GLOBAL_OPTIONS:
            tokens.pop(0)
        words = []
        for token in tokens:
            if not WORD.fullmatch(token):
                break
            words.append(token)
        yield words


def markdown_code(text: str) -> Iterator[str]:
    fences = re.compile(r"^```[^\n]*\n(.*?)^```", re.M | re.S)
    yield from (m.group(1) for m in fences.finditer(text))
    yield from re.findall(r"`([^`\n]+)`", fences.sub("", text))


def html_code(text: str) -> Iterator[str]:
    for _, body in re.findall(r"<(pre|code)>(.*?)</\1>", text, re.S):
        yield html.unescape(body)


def quoted(text: str) -> Iterator[str]:
    """Commands quoted in prose and messages: ``'fewtrans-board hpe search'``."""
    yield from re.findall(r"'(fewtrans-board[^'\n]*)'", text)


def help_texts(group: click.Group) -> Iterator[tuple[str, str]]:
    def walk(command: click.Command, path: str) -> Iterator[tuple[str, str]]:
        if command.hidden:
            return
        yield path, command.help or ""
        for param in command.params:
            yield f"{path} {param.name}", getattr(param, "help", None) or ""
        if isinstance(command, click.Group):
            for name, sub in command.commands.items():
                yield from walk(sub, f"{path} {name}")

    yield from walk(group, "fewtrans-board")


@cache
def shown_commands() -> dict[tuple[str, ...], set[str]]:
    """``{command words: where they are shown}``."""
    found: dict[tuple[str, ...], set[str]] = {}

    def add(snippets: Iterator[str], where: str) -> None:
        for snippet in snippets:
            for words in command_words(snippet):
                found.setdefault(tuple(words), set()).add(where)

    for doc in DOCS:
        add(markdown_code(doc.read_text(encoding="utf-8")), doc.relative_to(ROOT).as_posix())
    for template in TEMPLATES:
        add(html_code(template.read_text(encoding="utf-8")), f"site/templates/{template.name}")
    for where, text in help_texts(cli()):
        add(quoted(text), f"'{where} --help'")
    for args in (["submission", "template"], ["sub-benchmarks"]):
        add(iter([invoke(args)[1]]), f"the output of 'fewtrans-board {' '.join(args)}'")
    for source in sorted((ROOT / "fewtrans_board").rglob("*.py")):
        add(quoted(source.read_text(encoding="utf-8")), source.relative_to(ROOT).as_posix())
    return found


def problem(words: tuple[str, ...]) -> str | None:
    """Why ``fewtrans-board WORDS`` is not a command of today's CLI (``None``: it is)."""
    command: click.Command = cli()
    path: list[str] = []
    for word in words:
        if not isinstance(command, click.Group):
            break  # arguments of a command
        sub = command.commands.get(word)
        if sub is None:
            if isinstance(command, DefaultGroup):  # a name pattern of the listing
                code, output = invoke([*path, command.default_command, word, "--json"])
                if code != 0 or output.strip() in ("", "[]"):
                    return f"'{' '.join([*path, word])}': no subcommand or registered name {word!r}"
                break
            return f"'{' '.join([*path, word])}' is not a command"
        if sub.hidden:
            return f"'{' '.join([*path, word])}' is a former name (hidden, warns when used)"
        path.append(word)
        command = sub
    code, output = invoke([*path, "--help"])
    return None if code == 0 else f"'fewtrans-board {' '.join(path)} --help' exits {code}"


def test_the_collection_finds_the_documented_workflow() -> None:
    """The extraction itself: the commands of each source are found (not an empty pass)."""
    shown = shown_commands()
    for words in (
        ("preflight",),
        ("hpe", "search"),
        ("evaluate",),
        ("results", "summary"),
        ("submission", "pack"),
        ("manifest", "build"),
        ("sub-benchmarks",),
    ):
        assert words in shown, words
    sources = set().union(*shown.values())
    assert {"README.md", "CONTRIBUTING.md", "leaderboard/manifests/README.md"} <= sources
    assert "site/templates/submit.html" in sources
    assert any(s.endswith("--help'") for s in sources)


def test_the_check_names_outdated_commands() -> None:
    """A former name, a pattern that names nothing and a missing command are each caught."""
    assert "former name" in (problem(("validate",)) or "")
    assert "former name" in (problem(("benchmarks",)) or "")
    assert "former name" in (problem(("datasets", "check")) or "")
    assert "no subcommand or registered name" in (problem(("datasets", "chek")) or "")
    assert "is not a command" in (problem(("results", "show")) or "")
    assert problem(("datasets", "scan")) is None
    assert problem(("models", "demo-cnn.digits")) is None  # a name the listing matches
    assert problem(("adapters", "list")) is None


@pytest.mark.parametrize("words", sorted(shown_commands()), ids=lambda w: " ".join(w) or "-")
def test_every_shown_command_parses(words: tuple[str, ...]) -> None:
    where = sorted(shown_commands()[words])
    assert problem(words) is None, f"{problem(words)}; shown in {', '.join(where)}"
