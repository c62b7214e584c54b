"""CLI: listings, JSON output, errors with exit codes, and a light --help."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from fewtrans_board.cli import main
from fewtrans_board.core.version import __version__
from fewtrans_board.registry.manager import get_plugin_manager
from tests.conftest import CentroidAdapter, adapter_plugin


def test_version(invoke) -> None:  # type: ignore[no-untyped-def]
    result = invoke(["--version"])
    assert result.exit_code == 0 and __version__ in result.output


def test_every_command_has_help(invoke) -> None:  # type: ignore[no-untyped-def]
    import click

    from fewtrans_board.cli import make_cli

    cli = make_cli(get_plugin_manager())

    def walk(group: click.Group, prefix: list[str]) -> list[list[str]]:
        paths = []
        for name, command in group.commands.items():
            paths.append([*prefix, name])
            if isinstance(command, click.Group):
                paths.extend(walk(command, [*prefix, name]))
        return paths

    for path in walk(cli, []):
        result = invoke([*path, "--help"])
        assert result.exit_code == 0, path
        assert "Usage:" in result.output


def test_plugins_json_lists_builtins(invoke) -> None:  # type: ignore[no-untyped-def]
    result = invoke(["plugins", "--json"], pm=get_plugin_manager(entry_points=False))
    rows = json.loads(result.output)
    assert {r["name"] for r in rows} >= {"fewtrans_board.default_plugins.commands"}
    assert all(r["builtin"] and r["distribution"] == "fewtrans-board" for r in rows)


def test_adapters_listing_json_and_options(invoke) -> None:  # type: ignore[no-untyped-def]
    pm = get_plugin_manager(
        entry_points=False, extra_plugins={"mine": adapter_plugin(CentroidAdapter)}
    )
    rows = json.loads(invoke(["adapters", "--json"], pm=pm).output)
    mine = next(r for r in rows if r["name"] == "test-centroid")
    assert mine["plugin"] == "mine" and mine["options"][0]["name"] == "scale"
    text = invoke(["adapters", "test-*", "--options"], pm=pm).output
    assert "    scale (float, default 1.0): Logit scale." in text


def test_unknown_adapter_prints_suggestion(invoke) -> None:  # type: ignore[no-untyped-def]
    pm = get_plugin_manager(
        entry_points=False, extra_plugins={"mine": adapter_plugin(CentroidAdapter)}
    )
    result = invoke(["adapters", "test-centriod"], pm=pm)
    assert result.exit_code == 1
    assert "Did you mean 'test-centroid'" in result.output


def test_wildcard_without_matches_is_empty_not_error(invoke) -> None:  # type: ignore[no-untyped-def]
    result = invoke(["adapters", "nothing-*", "--json"], pm=get_plugin_manager(entry_points=False))
    assert result.exit_code == 0 and json.loads(result.output) == []


def test_duplicate_names_exit_nonzero_naming_both(invoke) -> None:  # type: ignore[no-untyped-def]
    pm = get_plugin_manager(
        entry_points=False,
        extra_plugins={
            "alpha": adapter_plugin(CentroidAdapter),
            "beta": adapter_plugin(CentroidAdapter),
        },
    )
    result = invoke(["adapters"], pm=pm)
    assert result.exit_code == 1
    assert "'alpha'" in result.output and "'beta'" in result.output


def test_main_reports_plugin_errors(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.test_plugins import fake_entry_points

    fake_entry_points(monkeypatch, typo="tests.plugins.misspelled_hook")
    with pytest.raises(SystemExit) as info:
        main(["plugins"])
    assert info.value.code == 1
    assert "Did you mean 'register_models'" in capsys.readouterr().err


@pytest.mark.slow
def test_help_does_not_import_torch() -> None:
    code = (
        "import sys\n"
        "from fewtrans_board.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "heavy = {'torch', 'timm', 'open_clip', 'peft', 'pyarrow'} & set(sys.modules)\n"
        "print('HEAVY=' + ','.join(sorted(heavy)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "Usage: fewtrans-board" in out.stdout
    assert "HEAVY=\n" in out.stdout, out.stdout


@pytest.mark.slow
def test_listings_do_not_import_torch() -> None:
    code = (
        "import sys\n"
        "from fewtrans_board.cli import main\n"
        "for args in (['adapters', '--options'], ['models'], ['datasets'], ['plugins']):\n"
        "    try:\n        main(args)\n    except SystemExit as e:\n        assert not e.code, e\n"
        "print('HEAVY=' + ','.join(sorted({'torch', 'timm', 'open_clip'} & set(sys.modules))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "HEAVY=\n" in out.stdout, out.stdout
