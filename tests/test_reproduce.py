"""``reproduce``: targets as data, the plan, the cell comparison, and a report end to end."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from fewtrans_board.core.errors import FewtransError
from fewtrans_board.reproduce.compare import CellComparison, average_cell, count_within
from fewtrans_board.reproduce.plan import PlanOptions, fill, parse_manifest_name, swapped
from fewtrans_board.reproduce.planner import plan_target
from fewtrans_board.reproduce.target import all_targets, get_target

README = Path(__file__).resolve().parents[1] / "README.md"
REPORTED = Path(__file__).resolve().parents[1] / "leaderboard" / "reported"


def _registry():  # type: ignore[no-untyped-def]
    from fewtrans_board.registry.lookup import Registry
    from fewtrans_board.registry.manager import get_plugin_manager

    return Registry.from_plugin_manager(get_plugin_manager(entry_points=False))


def test_every_row_of_the_readme_map_names_a_target_that_exists() -> None:
    section = README.read_text(encoding="utf-8").split("## Reproducing the three papers")[1]
    table = section.split("\n## ")[0]
    rows = [line for line in table.splitlines() if line.startswith("| ") and "---" not in line]
    names = {t.name for t in all_targets()}
    commands = [line for line in rows[1:] if "reproduce " in line]
    assert len(commands) == len(rows) - 1, "every map row says its one reproduce command"
    mentioned = {word.strip("`") for line in commands for word in line.split() if ":" in word}
    assert {n for n in names if f"`fewtrans-board reproduce {n}`" in table} == names
    assert (
        not {m for m in mentioned if m.startswith(("fewtrans:", "bscd:", "inductive-clip:"))}
        - names
    )


def test_every_row_names_a_known_model_adapter_and_recipe() -> None:
    registry = _registry()
    for target in all_targets():
        for row in target.rows:
            adapter = registry.adapters.get(target.row_adapter(row)).obj
            model = target.row_model(row).replace("{dataset}", "clip-caltech101")
            members = (
                [m.partition("=")[0] for m in model.removeprefix("library:").split("+")]
                if model.startswith("library:")
                else [model.partition("+")[0]]
            )
            for member in members:
                registry.model(member)
            recipe = row.recipe or target.recipe
            if target.row_hpe(row) == "published":
                names = [r.name for r in adapter.recipes]
                assert (recipe or names[0]) in names, (target.name, adapter.name, recipe, names)


@pytest.mark.parametrize(
    "table",
    [
        "fewtrans-table-4",
        "fewtrans-table-5",
        "fewtrans-table-6",
        "bscd-table-1",
        "bscd-table-2",
        "bscd-table-3",
        "bscd-table-4",
    ],
)
def test_every_reported_row_is_reproduced_by_a_row(table: str) -> None:
    target = next(t for t in all_targets() if t.reported == table)
    reported = json.loads((REPORTED / f"{table}.json").read_text(encoding="utf-8"))
    assert {r["method"] for r in reported["rows"]} <= {row.reported for row in target.rows}


def test_a_cell_comparison_follows_the_two_sample_formulas() -> None:
    cell = CellComparison("Linear", "dtd", 80.0, 1.0, 78.0, 1.5, episodes=600)
    se = math.sqrt((1.0 / 1.959964) ** 2 + (1.5 / 1.959964) ** 2)
    assert cell.se == pytest.approx(se, rel=1e-5)
    assert cell.z == pytest.approx(2.0 / se, rel=1e-5)
    assert cell.p == pytest.approx(math.erfc(abs(2.0 / se) / math.sqrt(2)), rel=1e-5)
    assert cell.overlap is True  # 2.0 <= 1.0 + 1.5
    assert cell.within is False  # 2.0 > 1.96 * 0.92
    near = CellComparison("Linear", "dtd", 78.5, 1.0, 78.0, 1.5)
    assert near.within is True and near.overlap is True
    far = CellComparison("Linear", "dtd", 70.0, 1.0, 78.0, 1.5)
    assert far.overlap is False and far.within is False
    no_ci = CellComparison("Linear", "dtd", 78.0, None, 78.0, 1.5)
    assert no_ci.z is None and no_ci.within is None
    assert count_within([cell, near, far, no_ci]) == (1, 3)


def test_the_measured_average_pools_independent_cis() -> None:
    cells = [
        CellComparison("r", d, m, h, None, None, 600)
        for d, m, h in [("a", 70, 1.0), ("b", 80, 2.0)]
    ]
    average = average_cell("r", "average", cells)
    assert average is not None and average.measured == pytest.approx(75.0)
    assert average.measured_ci == pytest.approx(math.sqrt(1 + 4) / 2)
    assert (
        average_cell("r", "average", [*cells, CellComparison("r", "c", None, None, 1, 1)]) is None
    )


def test_placeholders_fill_expand_and_say_what_is_missing() -> None:
    values = {"out": "/w/o", "root:cub": "/d/cub", "runs": ["/r/1", "/r/2"]}
    assert fill(["--root", "{root:cub}", "{runs}", "x={out}"], values) == [
        "--root",
        "/d/cub",
        "/r/1",
        "/r/2",
        "x=/w/o",
    ]
    with pytest.raises(FewtransError, match=r"\{root:dtd\}.*--root DATASET=PATH"):
        fill(["{root:dtd}"], values)
    with pytest.raises(FewtransError, match=r"--file NAME=PATH"):
        fill(["{file:ckpt}"], values)


def test_models_swap_in_names_suffixes_and_library_members() -> None:
    swaps = {"clip-vit-b16.openai": "smoke-clip.random", "timm:resnet10t": "smoke-resnet.random"}
    assert (
        swapped("clip-vit-b16.openai+unlearn:clip-cub@tkl3", swaps)
        == "smoke-clip.random+unlearn:clip-cub@tkl3"
    )
    assert swapped("library:timm:resnet10t={file:a}+demo-cnn.digits", swaps) == (
        "library:smoke-resnet.random+demo-cnn.digits"
    )
    assert swapped("demo-cnn.digits", swaps) == "demo-cnn.digits"
    five = "library:" + "+".join(f"timm:resnet10t={{file:m{i}}}" for i in range(5))
    assert swapped(five, swaps) == "library:smoke-resnet.random+smoke-resnet.random"


def test_manifest_names_parse_like_the_frozen_ones() -> None:
    parsed = parse_manifest_name("fewtrans-fixed-5w1s--eurosat.parquet", "t")
    assert (parsed.protocol, parsed.dataset, parsed.overrides) == (
        "fewtrans-fixed",
        "eurosat",
        {"ways": 5, "shots": 1},
    )
    assert parsed.filename == "fewtrans-fixed-5w1s--eurosat.parquet"
    with pytest.raises(FewtransError):
        parse_manifest_name("no-such-protocol--eurosat.parquet", "t")


def test_the_plan_lists_missing_roots_and_estimates_from_the_cost_table(tmp_path: Path) -> None:
    target = get_target("fewtrans:table-5")
    plan = plan_target(target, PlanOptions(work=tmp_path))
    assert len(plan.runs) == 9 * 10
    assert "needs --root cub=PATH" in plan.missing and "needs --root dtd=PATH" in plan.missing
    by_adapter = {s.label.split(" on ")[0]: s.estimate.seconds for s in plan.runs if s.estimate}
    assert by_adapter["Finetune"] > 10 * by_adapter["Linear"]
    h100 = plan_target(target, PlanOptions(work=tmp_path, estimate_device="nvidia-h100"))
    assert h100.seconds == pytest.approx(1.2 * plan.seconds)
    assert all("nvidia-h100" in s.estimate.source for s in h100.steps if s.estimate)


def test_only_the_preparations_of_the_chosen_rows_are_planned(tmp_path: Path) -> None:
    def prepared(name: str, rows: tuple[str, ...]) -> list[str]:
        """The preparations planned, by name (a per-dataset one once)."""
        options = PlanOptions(work=tmp_path, rows=rows)
        steps = plan_target(get_target(name), options).steps
        return sorted({s.label.split()[0] for s in steps if s.kind == "prepare"})

    # Rows naming {prepare:NAME} in their weights (meta-trained checkpoints).
    assert len(prepared("bscd:table-1", ())) == 8
    assert prepared("bscd:table-1", ("MAML",)) == ["maml"]
    # Rows whose unlearned model names the severity (serves = "@tklN").
    assert len(prepared("inductive-clip:fig-4a", ())) == 4
    chosen = prepared("inductive-clip:fig-4a", ("CoOp at 3% loss", "SEPRES at 90% loss"))
    assert chosen == ["unlearn-tkl3", "unlearn-tkl90"]
    # A preparation no row names serves them all.
    first = get_target("inductive-clip:fig-2").rows[0].reported
    assert prepared("inductive-clip:fig-2", (first,)) == prepared("inductive-clip:fig-2", ())


def test_running_without_roots_refuses_before_anything_runs(invoke, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    result = invoke(["reproduce", "fewtrans:table-5", "--work", str(tmp_path / "w")])
    assert result.exit_code != 0
    assert "needs --root" in result.output and "--plan" in result.output
    assert not (tmp_path / "w" / "runs").exists()


def test_list_shows_every_target(invoke) -> None:  # type: ignore[no-untyped-def]
    result = invoke(["reproduce", "--list", "--json"])
    assert result.exit_code == 0, result.output
    assert {t["name"] for t in json.loads(result.output)} == {t.name for t in all_targets()}


@pytest.mark.slow
def test_table_5_with_two_episodes_reports_measured_vs_reported_and_the_site_shows_it(
    invoke, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """The issue's example: ``reproduce fewtrans:table-5 --limit 2`` on synthetic layouts.

    The real path for one row: the manifest built from a DTD-layout copy, a held-out centre
    search on a CUB-layout copy, the paper's HPE grid, then the report (JSON, Markdown, a
    page) with z and CI checks on every cell, a resume that runs nothing, and the site
    page beside the paper's Table V once the report is in the store.
    """
    import shutil

    from fewtrans_board.datasets.synthetic import write_synthetic_copy
    from fewtrans_board.website.build import build_site

    registry = _registry()
    roots = {}
    for name, per_class in (("eurosat", 20), ("cub", 16)):
        write_synthetic_copy(registry.datasets.get(name).obj, tmp_path / name, per_class=per_class)
        roots[name] = tmp_path / name
    work = tmp_path / "work"
    args = [
        "reproduce",
        "fewtrans:table-5",
        "--limit",
        "2",
        "--row",
        "Linear",
        "--dataset",
        "eurosat",
        "--swap-model",
        "clip-vit-b16.openai=smoke-vit.random",
        "--work",
        str(work),
        "--leaderboard",
        str(REPORTED.parent),
        *[a for d, p in roots.items() for a in ("--root", f"{d}={p}")],
    ]
    result = invoke(args)
    assert result.exit_code == 0, result.output
    report = json.loads((work / "report.json").read_text(encoding="utf-8"))
    assert (work / "centres").is_dir(), "the held-out centre search ran"
    (cell,) = [c for c in report["cells"] if c["column"] == "eurosat"]
    assert cell["reported"] == 81.5 and cell["reported_ci"] == 1.0  # Table V, Linear, EuroSAT
    assert cell["measured_ci"] is not None and cell["episodes"] == 2
    assert cell["z"] == pytest.approx(cell["difference"] / cell["se"])
    assert report["within_combined_ci"]["n"] == 1
    markdown = (work / "report.md").read_text(encoding="utf-8")
    assert "Smoke run, not a reproduction" in markdown and "| Linear | eurosat |" in markdown

    again = invoke(args)
    assert again.exit_code == 0 and "[1/" not in again.output, "a resume runs nothing"

    store = tmp_path / "store"
    shutil.copytree(REPORTED.parent, store)
    (store / "reproductions").mkdir()
    shutil.copy(work / "report.json", store / "reproductions" / "fewtrans-table-5.json")
    site = tmp_path / "site"
    build_site(store, site)
    page = (site / "benchmark-fewtrans-adapters.html").read_text(encoding="utf-8")
    assert 'href="reproduction-fewtrans-table-5.html"' in page and "smoke run" in page
    shown = (site / "reproduction-fewtrans-table-5.html").read_text(encoding="utf-8")
    assert f"{cell['measured']:.2f}" in shown and "81.50" in shown
