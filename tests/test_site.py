"""The static site: rendered from fixture results, escaped, numbers equal to the stats module,
paper tables transcribed faithfully, and opened in headless Chromium without errors or
requests leaving localhost."""

from __future__ import annotations

import dataclasses
import html
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fewtrans_board.leaderboard import sub_benchmarks as benchmarks_module
from fewtrans_board.registry.manager import get_plugin_manager
from fewtrans_board.results.load import find_runs, load_run
from fewtrans_board.stats.bootstrap import average_ci
from fewtrans_board.stats.intervals import mean_ci
from tests.conftest import CHROMIUM, serving, shared_folder

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts"


def seeds_folder() -> Path | None:
    """The papers' full texts: $FEWTRANS_SEEDS, the checkout's ../shared/seeds, or its origin's.

    A clean clone of a local checkout (how CI runs) finds them beside the origin.
    """
    candidates = [os.environ.get("FEWTRANS_SEEDS", ""), str(ROOT.parent / "shared" / "seeds")]
    origin = subprocess.run(
        ["git", "-C", str(ROOT), "config", "--get", "remote.origin.url"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    if origin and "://" not in origin:
        candidates.append(str(Path(origin).parent / "shared" / "seeds"))
    return next((Path(c) for c in candidates if c and Path(c).is_dir()), None)


def seed_lines(name: str) -> list[str]:
    """Lines of one paper's full text; the test is skipped, visibly, where the papers are absent."""
    folder = seeds_folder()
    if folder is None or not (folder / name).is_file():
        pytest.skip(f"the papers' texts are not here (set FEWTRANS_SEEDS to the folder of {name})")
    return (folder / name).read_text().splitlines()


EVIL = 'Mean centroid <script>alert("pwned")</script> & "quotes"'
META = """[submission]
id = "{id}"
method = {method}
model = "{model}"
adapter = "mean-centroid"
benchmark = "demo"
hpe_protocol = "fewtrans-paper"
authors = ["Test"]
hardware = "CPU"
plugins = ["fewtrans-board==0.1.0"]
"""


@pytest.fixture(scope="module")
def site(
    tmp_path_factory: pytest.TempPathFactory, mean_centroid_runs: dict[str, Path]
) -> tuple[Path, Path]:
    """A store with the two shared mean-centroid runs, packed, added (verified) and built.

    Built once per test run (``shared_folder``): the tests only read it.
    """
    from click.testing import CliRunner

    from fewtrans_board.cli import make_cli

    def build(work: Path) -> None:
        store = work / "leaderboard"
        shutil.copytree(ROOT / "leaderboard" / "manifests", store / "manifests")
        shutil.copytree(ROOT / "leaderboard" / "reported", store / "reported")
        cli = make_cli(get_plugin_manager(entry_points=False))

        def run(*args: str) -> None:
            result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
            assert result.exit_code == 0, result.output

        for ident, model, method in (
            ("mc-pretrained", "demo-cnn.digits", json.dumps(EVIL)),
            ("mc-random", "demo-cnn.random", '"Mean centroid, random"'),
        ):
            (work / f"{ident}.toml").write_text(META.format(id=ident, method=method, model=model))
            run(
                "submission",
                "pack",
                str(mean_centroid_runs[model]),
                "--meta",
                str(work / f"{ident}.toml"),
                "--out",
                str(work / f"{ident}.zip"),
            )
            run(
                "leaderboard",
                "add",
                str(work / f"{ident}.zip"),
                "--leaderboard",
                str(store),
                "--sample",
                "3",
                "--threads",
                "1",
            )
        # The demo benchmark's reference is fine-tuning; use the random-init entry so flags show.
        patched = dict(benchmarks_module.SUB_BENCHMARKS)
        patched["demo"] = dataclasses.replace(patched["demo"], reference_adapter="mean-centroid")
        original = benchmarks_module.SUB_BENCHMARKS.copy()
        benchmarks_module.SUB_BENCHMARKS.clear()
        benchmarks_module.SUB_BENCHMARKS.update(patched)
        try:
            run("site", "build", "--leaderboard", str(store), "--out", str(work / "_site"))
        finally:
            benchmarks_module.SUB_BENCHMARKS.clear()
            benchmarks_module.SUB_BENCHMARKS.update(original)

    work = shared_folder(tmp_path_factory, "site", build)
    return work / "leaderboard", work / "_site"


@pytest.mark.slow
def test_pages_exist(site: tuple[Path, Path]) -> None:
    _, out = site
    names = {p.name for p in out.glob("*.html")}
    assert {
        "index.html",
        "benchmark-demo.html",
        "method-mc-pretrained.html",
        "method-mc-random.html",
        "dataset-digits.html",
        "protocol.html",
        "submit.html",
    } <= names
    assert {"benchmark-fewtrans-models.html", "benchmark-bscd.html"} <= names  # reported-only pages
    assert (out / "static" / "style.css").is_file()


@pytest.mark.slow
def test_hostile_method_name_is_escaped(site: tuple[Path, Path]) -> None:
    _, out = site
    for page in (
        "index.html",
        "benchmark-demo.html",
        "method-mc-pretrained.html",
        "dataset-digits.html",
    ):
        text = (out / page).read_text()
        assert "<script>alert" not in text, page
    text = (out / "method-mc-pretrained.html").read_text()
    assert "&lt;script&gt;alert(&#34;pwned&#34;)&lt;/script&gt; &amp; &#34;quotes&#34;" in text


def _cells(page: str) -> dict[tuple[str, str], tuple[float, float]]:
    """``(method id, dataset) -> (mean, ci)`` from the first (headline) table of a page."""
    first_table = page.split("</table>")[0]
    pattern = re.compile(
        r'<a class="num" href="method-([^"]+)\.html#([^"]+)"[^>]*><span class="mean">([\d.]+)</span>&nbsp;<span class="pm">± ([\d.]+)</span>'
    )
    return {(m, d): (float(a), float(b)) for m, d, a, b in pattern.findall(first_table)}


def test_numbers_equal_the_statistics_module(site: tuple[Path, Path]) -> None:
    store, out = site
    page = (out / "benchmark-demo.html").read_text()
    cells = _cells(page)
    assert set(cells) == {("mc-pretrained", "digits"), ("mc-random", "digits")}
    for ident in ("mc-pretrained", "mc-random"):
        run = load_run(find_runs([store / "results" / ident])[0])
        hpe = run.aggregations()["hpe"]
        stats = mean_ci(hpe)
        assert cells[(ident, "digits")] == (round(stats.mean, 2), round(stats.ci95, 2))
        average = average_ci({"digits": hpe}, resamples=2000, seed=0)
        assert (
            f'{average.estimate:.2f}</a> <span class="pm">[{average.low:.2f}, {average.high:.2f}]'
            in page
        )
    # The reference is the first entry using the reference adapter (mc-pretrained here);
    # the random-init backbone is flagged significantly worse, with p and Cohen's d.
    assert re.search(
        r'<span class="flag worse"[^>]*>▼ -\d+\.\d+</span> <span class="pm">p=[\d.e-]+, d=-\d', page
    )
    assert ">reference</td>" in page
    assert "≈ best" in page and "rank interval" in page


def test_method_page_has_provenance_and_plots(site: tuple[Path, Path]) -> None:
    store, out = site
    page = (out / "method-mc-pretrained.html").read_text()
    run = load_run(find_runs([store / "results" / "mc-pretrained"])[0])
    assert run.meta["manifest"]["sha256"] in page and "fewtrans-board 0.1.0" in page
    assert "<svg" in page and "Per-episode HPE accuracy" in page
    assert 'id="provenance"' in page and 'id="digits"' in page


# Verbatim lines of the papers' tables (from ../shared/seeds), quoted so the test needs no
# files outside the repository: the oracle for the transcription in leaderboard/reported/.
FEWTRANS_LINES = {
    "LoRA": "LoRA\t73.8$\\pm$1.5\t80.7$\\pm$1.0\t88.7$\\pm$0.7\t96.1$\\pm$0.4\t93.3$\\pm$0.6\t87.7$\\pm$0.9\t78.0$\\pm$1.1\t59.4$\\pm$1.4\t83.3$\\pm$0.9\t71.0$\\pm$1.3\t81.2$\\pm$1.0",
    "DINOv2-base": "DINOv2-base\tLVD-142M\t79.8$\\pm$1.3\t82.6$\\pm$0.9\t93.0$\\pm$0.5\t99.9$\\pm$0.0\t93.9$\\pm$0.5\t87.7$\\pm$0.9\t79.6$\\pm$1.0\t74.9$\\pm$1.1\t91.8$\\pm$0.6\t70.3$\\pm$1.3\t85.3$\\pm$0.9",
    "TSA": "TSA\t74.3$\\pm$1.5\t80.0$\\pm$1.0\t89.5$\\pm$0.7\t96.9$\\pm$0.4\t93.5$\\pm$0.6\t87.5$\\pm$0.9\t78.3$\\pm$1.0\t64.5$\\pm$1.3\t86.2$\\pm$0.8\t72.2$\\pm$1.2\t82.3$\\pm$1.0",
}
BSCD_PROTONET_LINES = [
    "ProtoNet\t24.05% $\\pm$ 1.01%\t28.21% $\\pm$ 1.15%\t29.32% $\\pm$ 1.12%\t39.57% $\\pm$ 0.57%\t49.50% $\\pm$ 0.55%\t51.99% $\\pm$ 0.52%",
    "ProtoNet\t73.29% $\\pm$ 0.71%\t82.27% $\\pm$ 0.57%\t80.48% $\\pm$ 0.57%\t79.72% $\\pm$ 0.67%\t88.15% $\\pm$ 0.51%\t90.81% $\\pm$ 0.43%",
]
BSCD_MEAN_CENTROID_LINES = [
    "Mean-centroid\t26.31% $\\pm$ 0.42%\t30.41% $\\pm$ 0.46%\t34.68% $\\pm$ 0.46%\t47.16% $\\pm$ 0.54%\t56.40% $\\pm$ 0.53%\t61.57% $\\pm$ 0.66%",
    "Mean-centroid\t82.21% $\\pm$ 0.49%\t87.62% $\\pm$ 0.34%\t88.24% $\\pm$ 0.29%\t87.61% $\\pm$ 0.47%\t93.87% $\\pm$ 0.68%\t94.77% $\\pm$ 0.34%",
]


def numbers_of(line: str) -> list[float]:
    """Means and CIs of a table line, in order."""
    return [float(x) for x in re.findall(r"(?<![\w.])(\d+\.\d+)(?=\s*%?\s*(?:\$\\pm|\t|$))", line)]


@pytest.mark.parametrize(
    ("file", "label"),
    [
        ("fewtrans-table-5.json", "LoRA"),
        ("fewtrans-table-4.json", "DINOv2-base"),
        ("fewtrans-table-5.json", "TSA"),
    ],
)
def test_transcribed_fewtrans_cells_match_the_paper(file: str, label: str) -> None:
    data = json.loads((ROOT / "leaderboard" / "reported" / file).read_text())
    row = next(r for r in data["rows"] if r["method"] == label)
    values = [
        x for key in data["columns"] for x in (row["cells"][key]["mean"], row["cells"][key]["ci95"])
    ]
    assert values == numbers_of(FEWTRANS_LINES[label])


@pytest.mark.slow
def test_the_quoted_table_lines_are_the_papers() -> None:
    fewtrans = seed_lines("fewtrans-hpe-benchmark.txt")
    bscd = seed_lines("bscd-fsl-cross-domain.txt")
    assert [line for line in FEWTRANS_LINES.values() if line not in fewtrans] == []
    assert [
        line for line in BSCD_PROTONET_LINES + BSCD_MEAN_CENTROID_LINES if line not in bscd
    ] == []
    # The oracle can fail: a changed digit is not a line of the paper.
    assert FEWTRANS_LINES["LoRA"].replace("1", "7", 1) not in fewtrans


def test_transcribed_bscd_cells_match_the_paper() -> None:
    data = json.loads((ROOT / "leaderboard" / "reported" / "bscd-table-1.json").read_text())
    row = next(r for r in data["rows"] if r["method"] == "ProtoNet")
    cells = [
        x for key in data["columns"] for x in (row["cells"][key]["mean"], row["cells"][key]["ci95"])
    ]
    assert cells == [x for line in BSCD_PROTONET_LINES for x in numbers_of(line)]
    table3 = json.loads((ROOT / "leaderboard" / "reported" / "bscd-table-3.json").read_text())
    row3 = next(r for r in table3["rows"] if r["method"] == "Mean-centroid")
    cells3 = [
        x
        for key in table3["columns"]
        for x in (row3["cells"][key]["mean"], row3["cells"][key]["ci95"])
    ]
    assert cells3 == [x for line in BSCD_MEAN_CENTROID_LINES for x in numbers_of(line)]


INDUCTIVE_QUOTE_NUMBERS = {
    # method: (partially transductive, inductive), read from the paper's Sec. 5.2 by hand
    "CoOp": (71.4, 15.3),
    "PromptSRC": (74.7, 20.1),
    "CLIP-LoRA": (74.9, 19.2),
    "SEPRES": (75.4, 56.0),
}


def test_transcribed_inductive_clip_numbers_are_the_papers_sentence() -> None:
    reported = ROOT / "leaderboard" / "reported"
    tables = [
        json.loads((reported / f"inductive-clip-sec5.2-{setting}.json").read_text())
        for setting in ("partially-transductive", "inductive")
    ]
    assert [t["benchmark"] for t in tables] == ["clip-partially-transductive", "clip-inductive"]
    for index, table in enumerate(tables):
        cells = {r["method"]: r["cells"]["average"]["mean"] for r in table["rows"]}
        assert cells == {m: pair[index] for m, pair in INDUCTIVE_QUOTE_NUMBERS.items()}
    assert tables[1]["quote"] == tables[0]["quote"]
    for original, inductive in INDUCTIVE_QUOTE_NUMBERS.values():
        assert f"{original}%" in tables[0]["quote"] and f"{inductive:g}%" in tables[0]["quote"]


@pytest.mark.slow
def test_the_inductive_clip_quote_is_the_papers_sentence() -> None:
    quote = json.loads(
        (ROOT / "leaderboard" / "reported" / "inductive-clip-sec5.2-inductive.json").read_text()
    )["quote"]
    text = " ".join(seed_lines("inductive-clip-unlearning.txt"))
    assert quote in text  # the sentence the numbers were read from is the paper's
    # The oracle can fail: a changed digit is not the paper's sentence.
    assert quote.replace("71.4", "71.9") not in text


def test_the_settings_page_draws_the_papers_reported_pairs(site: tuple[Path, Path]) -> None:
    _, out = site
    page = html.unescape((out / "clip-settings-clip-inductive.html").read_text())
    table = page[page.index('id="clip-settings-reported"') :]
    rows = re.findall(r"<tr><td>([^<]+)</td>(.*?)</tr>", table[: table.index("</table>")])
    cells = {m: re.findall(r">([+-]?\d+\.\d)<", rest) for m, rest in rows}
    assert cells == {
        m: [f"{a:.1f}", f"{b:.1f}", f"{a - b:+.1f}"]
        for m, (a, b) in INDUCTIVE_QUOTE_NUMBERS.items()
    }
    assert [m for m, _ in rows] == ["CoOp", "CLIP-LoRA", "PromptSRC", "SEPRES"]  # by gap
    figure = table[table.index("<figure>") : table.index("</figure>")]
    assert figure.count("<circle") == len(INDUCTIVE_QUOTE_NUMBERS)


def test_reported_tables_are_badged_and_kept_out_of_tests(site: tuple[Path, Path]) -> None:
    _, out = site
    page = (out / "benchmark-fewtrans-adapters.html").read_text()
    assert (
        "reported in paper" in page
        and "Table V" in page
        and "never used in significance tests" in page
    )
    assert "vs reference" not in page  # no measured entries, so no significance columns


def test_submit_page_matches_the_cli(site: tuple[Path, Path], invoke) -> None:  # type: ignore[no-untyped-def]
    _, out = site
    text = html.unescape((out / "submit.html").read_text())
    commands = re.findall(r"fewtrans-board((?: [a-z][a-z-]*)+)", text)
    assert len(commands) >= 7
    for words in commands:
        assert invoke([*words.split()[:2], "--help"]).exit_code == 0, words


def _count_calls(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> Counter[str]:
    """Count calls of ``module.name`` by run folder, in every module that imported it."""
    original = getattr(module, name)
    counts: Counter[str] = Counter()

    def counting(first: Any, *args: Any, **kwargs: Any) -> Any:
        counts[str(getattr(first, "path", first))] += 1
        return original(first, *args, **kwargs)

    for loaded in list(sys.modules.values()):
        if getattr(loaded, "__name__", "").startswith("fewtrans_board") and (
            getattr(loaded, name, None) is original
        ):
            monkeypatch.setattr(loaded, name, counting)
    return counts


@pytest.mark.slow
def test_a_site_build_loads_and_summarises_each_run_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import fewtrans_board.analysis.sensitivity  # noqa: F401  (imported before counting)
    import fewtrans_board.results.load as results_load
    import fewtrans_board.results.summary as results_summary
    from fewtrans_board.website.build import build_site

    store = ROOT / "leaderboard"  # six runs of one benchmark: the sensitivity page is built
    runs = {str(p) for p in find_runs([store / "results"])}
    loads = _count_calls(monkeypatch, results_load, "load_run")
    summaries = _count_calls(monkeypatch, results_summary, "summarize")
    build_site(store, tmp_path / "site")
    assert "Hyperparameter sensitivity" in (tmp_path / "site" / "analyses-demo.html").read_text()
    assert len(runs) >= 3
    assert loads == dict.fromkeys(runs, 1)
    assert summaries == dict.fromkeys(runs, 1)


@pytest.mark.slow
def test_the_index_and_the_site_share_one_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import fewtrans_board.results.load as results_load
    from fewtrans_board.leaderboard.entries import load_entries
    from fewtrans_board.leaderboard.index import build_index
    from fewtrans_board.leaderboard.store import LeaderboardStore
    from fewtrans_board.website.data import build_site_data

    store = LeaderboardStore(ROOT / "leaderboard")
    expected = build_index(store)
    loads = _count_calls(monkeypatch, results_load, "load_run")
    entries = list(load_entries(store))
    assert build_index(store, entries) == expected
    data = build_site_data(store, entries=entries)
    assert {m.id for m in data.methods} == {e["id"] for e in expected["submissions"]}
    assert set(loads.values()) == {1}
    assert len(loads) == sum(len(e["runs"]) for e in expected["submissions"])


def test_columns_convert_like_python_lists() -> None:
    import numpy as np
    import pyarrow as pa

    from fewtrans_board.results.load import column_array

    run = load_run(find_runs([ROOT / "leaderboard" / "results"])[0])
    words = pa.dictionary(pa.int32(), pa.string())
    columns = [
        run.table.column(f.name) for f in run.table.schema if not pa.types.is_list(f.type)
    ] + [
        pa.chunked_array(  # chunks with different dictionaries
            [pa.array(["hpe", "vote", "hpe"], words), pa.array(["é", "oracle"], words)]
        ),
        pa.chunked_array([pa.array([0.5, 1e-3], pa.float32()), pa.array([2.0], pa.float32())]),
        pa.chunked_array([pa.array([1, None], pa.int32())]),  # nulls: the general path
        pa.chunked_array([], type=pa.int16()),
    ]
    for column in columns:
        expected = np.asarray(column.to_pylist())
        actual = column_array(column)
        assert actual.dtype == expected.dtype, column.type
        assert actual.tolist() == expected.tolist(), column.type


def test_strict_undefined(tmp_path: Path) -> None:
    from jinja2 import UndefinedError

    from fewtrans_board.website.build import environment

    (tmp_path / "t.html").write_text("{{ missing.value }}")
    with pytest.raises(UndefinedError):
        environment(tmp_path).get_template("t.html").render()


@pytest.mark.slow
def test_wheel_ships_the_templates(tmp_path: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
    )
    wheel = next(tmp_path.glob("fewtrans_board-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    for name in ("index.html", "benchmark.html", "method.html", "base.html"):
        assert f"fewtrans_board/site_files/templates/{name}" in names
    assert "fewtrans_board/site_files/static/style.css" in names
    assert not any(n.startswith("site/") for n in names)  # never shadows the stdlib 'site'


@pytest.fixture
def server(site: tuple[Path, Path]) -> Iterator[str]:
    with serving(site[1]) as url:
        yield url


@pytest.mark.slow
@pytest.mark.skipif(
    not CHROMIUM.exists(), reason="Debian chromium not installed (.ci/run installs it)"
)
def test_pages_in_headless_chromium(server: str) -> None:
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    errors: list[str] = []
    outside: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=str(CHROMIUM),
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ],
        )
        page = browser.new_page(viewport={"width": 1300, "height": 900})
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on(
            "request", lambda r: outside.append(r.url) if not r.url.startswith(server) else None
        )
        for name in ("index.html", "benchmark-demo.html", "method-mc-pretrained.html"):
            response = page.goto(f"{server}/{name}")
            assert response is not None and response.ok, name
            page.screenshot(path=str(ARTIFACTS / name.replace(".html", ".png")), full_page=True)
        assert page.locator("#provenance").is_visible()
        page.goto(f"{server}/benchmark-demo.html")
        header = page.locator("table.results thead th").nth(0)
        header.click()  # progressive-enhancement sorting runs without errors
        browser.close()
    assert errors == [] and outside == []
    assert (ARTIFACTS / "index.png").stat().st_size > 5000


def test_real_sub_benchmarks_name_their_paper_leader_on_the_index(committed_site: Path) -> None:
    """Each real sub-benchmark without entries names the best reported row, badged, unranked."""
    import re

    reported = Path(__file__).resolve().parents[1] / "leaderboard" / "reported"
    best: dict[str, tuple[float, str]] = {}
    for path in reported.glob("*.json"):
        table = json.loads(path.read_text(encoding="utf-8"))
        for row in table["rows"]:
            means = {k: c["mean"] for k, c in row["cells"].items() if "mean" in c}
            if means:
                score = means["average"] if "average" in means else sum(means.values()) / len(means)
                if score > best.get(table["benchmark"], (-1.0, ""))[0]:
                    best[table["benchmark"]] = (score, row["method"])
    index = (committed_site / "index.html").read_text(encoding="utf-8")
    rows = re.findall(
        r'<tr[^>]*>\s*<td[^>]*><a href="benchmark-([a-z0-9-]+)\.html[^"]*">(.*?)</tr>', index, re.S
    )
    shown = {name: body for name, body in rows}
    assert best.keys() <= shown.keys()
    for benchmark, (score, method) in best.items():
        assert f">{method}</a>" in shown[benchmark] and "reported in paper" in shown[benchmark]
        assert f"{score:.2f}" in shown[benchmark] and "no measured entry yet" in shown[benchmark]


def test_reported_tables_show_the_papers_headers_and_no_latex(committed_site: Path) -> None:
    """Table VIII's caption and keys, and BSCD's column slugs, read as the papers print them."""
    from fewtrans_board.website.text import column_label, plain_tex

    assert plain_tex(r"Cohen’s $d$ ($N=600$ tasks), $9\times 10^{-7}$") == (
        "Cohen’s d (N=600 tasks), 9 × 10^-7"
    )
    assert column_label("bscd-cropdisease/50shot") == "CropDisease 50-shot"
    assert column_label("full_ft_mean") == "Full-FT (%)" and column_label("dtd") == "dtd"
    adapters = (committed_site / "benchmark-fewtrans-adapters.html").read_text(encoding="utf-8")
    assert "$d$" not in adapters and "<th>full_ft_mean</th>" not in adapters
    assert "<th>Cohen's d</th>" in adapters or "<th>Cohen&#39;s d</th>" in adapters
    assert ">Overall</td>" in adapters  # Table VIII's last row as printed, not 'average'
    bscd = (committed_site / "benchmark-bscd.html").read_text(encoding="utf-8")
    assert "<th>ChestX 5-shot</th>" in bscd and "<th>bscd-chestx/5shot</th>" not in bscd


def test_exact_ties_share_a_rank_in_per_shot_and_base_to_novel_tables(
    committed_site: Path,
) -> None:
    """Competition ranks: equal scores share the first rank and say so; none is broken by name."""
    import re

    from fewtrans_board.website.reporting import shared_ranks

    assert shared_ranks([70.0, 65.0, 65.0, 60.0]) == [(1, False), (2, True), (2, True), (4, False)]
    assert shared_ranks([1.0, 1.0]) == [(1, True), (1, True)] and shared_ranks([]) == []
    page = (committed_site / "benchmark-demo-clip-inductive.html").read_text(encoding="utf-8")
    ranks = re.findall(r'<td class="num" data-sort="(\d+)">\d+( <span class="tie")?', page)
    assert ranks, "the per-shot table has ranks"
    tied = [int(r) for r, mark in ranks if mark]
    assert tied, "CoOp and CLIP-Adapter both score 20.36 on the unlearned demo CLIP"
    assert all(tied.count(r) >= 2 for r in tied), "a tie is shared by two rows at least"


def test_one_configuration_protocols_show_one_table_with_a_note(committed_site: Path) -> None:
    """Under 'published' the vote, oracle and mean-single tables would equal the headline."""
    page = (committed_site / "benchmark-demo-clip-inductive.html").read_text(encoding="utf-8")
    assert 'id="per-shot-hpe' in page and 'id="per-shot-oracle' not in page
    assert "would repeat this one" in page
    demo = (committed_site / "benchmark-demo.html").read_text(encoding="utf-8")
    assert 'id="table-oracle' in demo and "would repeat this one" not in demo
