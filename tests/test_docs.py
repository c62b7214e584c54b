"""The README method table and the adapter listing stay in step with the registry."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from fewtrans_board.jobs.docs import begin_marker, main, render_method_table, update_sections
from fewtrans_board.registry.lookup import Registry
from fewtrans_board.registry.manager import PluginManager

ROOT = Path(__file__).resolve().parents[1]

ISSUE_METHODS = {
    # vision PEFT
    "lora", "bitfit", "ssf", "adapter", "adaptformer", "vpt", "tsa",
    # CLIP prompt learners and tuning methods
    "coop", "cocoop", "kgcoop", "prograd", "vpt-clip", "ivlp", "maple", "clip-adapter",
    "taskres", "clip-lora", "finetune-clip-visual", "finetune-clip-text", "finetune-clip-both",
}  # fmt: skip


def test_readme_method_table_is_current() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    updated, found = update_sections(text)
    assert found == ["METHOD TABLE", "SUB-BENCHMARK TABLE"]
    assert updated == text, (
        "README.md is out of date: run python -m fewtrans_board.jobs.docs README.md"
    )


def test_method_table_has_a_row_per_builtin_adapter(registry: Registry) -> None:
    rows = [line for line in render_method_table().splitlines() if line.startswith("| `")]
    names = {row.split("`")[1] for row in rows}
    assert names == {entry.name for entry in registry.adapters}
    assert names >= ISSUE_METHODS
    lora = next(row for row in rows if row.startswith("| `lora`"))
    cells = [c.strip() for c in lora.strip("|").split(" | ")]
    assert cells[1] == "vision PEFT" and "LoRA" in cells[2] and "q and v" in cells[3]
    assert "`lr_backbone=" in cells[4] and cells[5].startswith("<https://")


def test_adapters_json_lists_every_method_with_its_paper(invoke, pm: PluginManager) -> None:  # type: ignore[no-untyped-def]
    result = invoke(["adapters", "--json"], pm=pm)
    assert result.exit_code == 0, result.output
    listed = {row["name"]: row for row in json.loads(result.output)}
    assert set(listed) >= ISSUE_METHODS
    for name, row in listed.items():
        assert row["paper"] and row["trains"] and row["code"], f"{name} lacks paper/trains/code"
        assert any(option["hpe"] for option in row["options"]) or name in {
            "mean-centroid",
            "zero-shot-clip",
            # meta-learners whose test-time rule has no hyperparameter (MAML has lr/steps)
            "protonet",
            "matchingnet",
            "matchingnet-nofce",
            "relationnet",
            "relationnet-mlp",
            "metaopt",
            "metaopt-ridge",
        }, f"{name} declares no HPE axis"


def test_docs_check_reports_a_stale_file_and_the_rewrite_fixes_it(tmp_path: Path) -> None:
    stale = tmp_path / "README.md"
    stale.write_text(f"intro\n{begin_marker('METHOD TABLE')}\nold\n<!-- END METHOD TABLE -->\n")
    result = CliRunner().invoke(main, [str(stale), "--check"])
    assert result.exit_code == 1 and "out of date" in result.output
    assert "old" in stale.read_text()  # --check never writes
    assert CliRunner().invoke(main, [str(stale)]).exit_code == 0
    assert "| `coop` |" in stale.read_text() and stale.read_text().startswith("intro\n")
    assert CliRunner().invoke(main, [str(stale), "--check"]).exit_code == 0


def test_docs_refuses_a_file_without_markers(tmp_path: Path) -> None:
    plain = tmp_path / "notes.md"
    plain.write_text("nothing generated here\n")
    result = CliRunner().invoke(main, [str(plain)])
    assert result.exit_code != 0 and "no generated section" in result.output
    assert plain.read_text() == "nothing generated here\n"


def test_contributing_toolkit_table_follows_the_one_table_in_code(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from fewtrans_board import toolkit

    text = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    updated, found = update_sections(text)
    assert "TOOLKIT TABLE" in found and updated == text, "run make docs"
    # Promoting a name in the code's table moves it to the stable column of the docs.
    entry = toolkit.NAMES["TextPrompter"]
    monkeypatch.setitem(toolkit.NAMES, "TextPrompter", entry._replace(stability="stable"))
    row = next(line for line in update_sections(text)[0].splitlines() if "TextPrompter" in line)
    assert "`TextPrompter`" in row.split("|")[2]
    assert "`TextPrompter`" in text.split("CLIP text tower |", 1)[1].split("\n")[0].split("|")[1]
