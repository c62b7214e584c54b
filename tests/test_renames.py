"""Former CLI spellings keep working for one release: hidden, with a warning naming the new one."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from fewtrans_board.cli import make_cli
from fewtrans_board.registry.manager import get_plugin_manager


@pytest.fixture(scope="module")
def cli():  # type: ignore[no-untyped-def]
    return make_cli(get_plugin_manager(entry_points=False))


def run(cli, args: list[str]):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(cli, args, catch_exceptions=False)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (["sub-benchmarks", "--json"], ["benchmarks", "--json"]),
        (["hpe", "grid", "--adapter", "linear-probe", "--hpe", "fewtrans-reference", "--json"],
         ["hpe", "grid", "--adapter", "linear-probe", "--protocol", "fewtrans-reference", "--json"]),
    ],
)  # fmt: skip
def test_former_spellings_give_the_same_result_and_a_warning(cli, new, old) -> None:  # type: ignore[no-untyped-def]
    current, former = run(cli, old), run(cli, new)
    assert current.exit_code == former.exit_code == 0, former.output
    assert json.loads(current.stdout) == json.loads(former.stdout)
    assert "Warning:" not in current.stderr
    assert "goes away in the next release" in former.stderr and "is now" in former.stderr


def test_the_hpe_option_and_its_former_spelling_must_agree(cli) -> None:  # type: ignore[no-untyped-def]
    args = ["hpe", "grid", "--adapter", "linear-probe", "--hpe", "single"]
    assert run(cli, [*args, "--protocol", "single"]).exit_code == 0
    clash = run(cli, [*args, "--protocol", "fewtrans-paper"])
    assert clash.exit_code == 2 and "disagree" in clash.output


def test_former_names_are_hidden_from_help_but_still_run(cli) -> None:  # type: ignore[no-untyped-def]
    listed = [
        line.split()[0] for line in run(cli, ["--help"]).output.splitlines() if line[:2] == "  "
    ]
    assert "preflight" in listed and "sub-benchmarks" in listed
    assert "validate" not in listed and "benchmarks" not in listed
    assert "--protocol" not in run(cli, ["evaluate", "--help"]).output
    assert "scan" in run(cli, ["datasets", "--help"]).output
    scanned = run(cli, ["datasets", "check", "digits", "--no-verify-images", "--json"])
    assert scanned.exit_code == 0 and "'check' is now 'scan'" in scanned.stderr
    preflight = run(cli, ["validate", "--help"])
    assert preflight.exit_code == 0 and "Check a model + adapter" in preflight.output
