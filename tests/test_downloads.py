"""Downloads, the Python API and badges: the whole leaderboard table against numbers computed
here from the stored shard rows, every table's CSV and JSON against its HTML cells,
``load_leaderboard`` from every kind of source, and badges that stay well-formed SVG with a
hostile method name."""

from __future__ import annotations

import csv
import io
import json
import math
import re
import shutil
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import fewtrans_board
from fewtrans_board.leaderboard.meta import SubmissionMeta
from fewtrans_board.leaderboard.status import VerificationStatus, entry_status
from fewtrans_board.leaderboard.sub_benchmarks import SUB_BENCHMARKS
from fewtrans_board.leaderboard.table import AGGREGATIONS, LeaderboardTableError, csv_cell
from fewtrans_board.website import badges as badges_module
from fewtrans_board.website.data import COLUMN_SETS
from fewtrans_board.website.downloads import download_json, json_value, write_download
from fewtrans_board.website.model import Download, MethodView
from tests.conftest import shared_folder

ROOT = Path(__file__).resolve().parents[1]
HOSTILE_ENTRY = "simpleshot--demo-cnn"  # ranked first on the demo benchmark
EVIL = '=1+2 Mean centroid <script>alert("pwned")</script> & "quotes" \'apos\' ]]> <![CDATA['
SVG = "{http://www.w3.org/2000/svg}"


def stored_status(store: Path, ident: str) -> VerificationStatus:
    """The status every surface must show for a stored entry, from its ``status.json``."""
    record = json.loads((store / "submissions" / ident / "status.json").read_text())
    return entry_status(record["status"], record.get("verification"))


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The committed store, one entry's method renamed to a hostile one, and its site."""
    from fewtrans_board.website.build import build_site

    def build(work: Path) -> None:
        store = work / "leaderboard"
        shutil.copytree(ROOT / "leaderboard", store)
        toml = store / "submissions" / HOSTILE_ENTRY / "submission.toml"
        text = toml.read_text()
        text, count = re.subn(
            r'(?m)^method = ".*"$', lambda _: f"method = {json.dumps(EVIL)}", text
        )
        assert count == 1
        toml.write_text(text)
        build_site(store, work / "_site")

    work = shared_folder(tmp_path_factory, "downloads-site", build)
    return work / "leaderboard", work / "_site"


# --- the whole leaderboard against the stored rows -------------------------------------


def shard_rows(run: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Every row of a run's shards (no predictions or logits) and the first shard's metadata."""
    files = sorted((run / "shards").glob("*.parquet"))
    # The footer's key-value metadata: a split shard keeps its provenance only there.
    meta = json.loads(pq.ParquetFile(files[0]).metadata.metadata[b"fewtrans_board.results"])
    columns = ["episode", "split", "kind", "aggregation", "config", "accuracy"]
    rows = [r for f in files for r in pq.read_table(f, columns=columns).to_pylist()]
    return rows, meta


def per_episode(
    rows: list[dict[str, Any]], meta: dict[str, Any], aggregation: str, split: str
) -> np.ndarray:
    """Per-episode accuracy of an aggregation, by episode, computed from the raw rows."""
    rows = [r for r in rows if r["split"] == split]
    if aggregation == "oracle":  # the configuration with the best mean over episodes
        configs: dict[str, dict[int, float]] = {}
        for r in rows:
            if r["kind"] == "config":
                configs.setdefault(r["config"], {})[r["episode"]] = r["accuracy"]
        best = max(configs, key=lambda c: np.mean(list(configs[c].values())))
        return np.array([a for _, a in sorted(configs[best].items())])
    name = meta["hpe"]["aggregation"] if aggregation == "hpe" else aggregation
    chosen = {
        r["episode"]: r["accuracy"]
        for r in rows
        if r["kind"] == "ensemble" and r["aggregation"] == name
    }
    return np.array([a for _, a in sorted(chosen.items())])


def mean_and_ci(values: np.ndarray, ddof: int) -> tuple[float, float]:
    """mean, 1.96 * s / sqrt(n) with the benchmark's ddof (the project's mean_ci, written out)."""
    n = len(values)
    s = math.sqrt(sum((v - values.mean()) ** 2 for v in values) / (n - ddof))
    return float(values.mean()), 1.96 * s / math.sqrt(n)


def test_the_leaderboard_table_has_the_numbers_of_the_stored_rows(built: tuple[Path, Path]) -> None:
    store, _ = built
    table = fewtrans_board.load_leaderboard(store)
    assert AGGREGATIONS == COLUMN_SETS
    rows = table.to_pylist()
    entries = sorted(p.name for p in (store / "submissions").iterdir())
    runs = {(e, r.name) for e in entries for r in (store / "results" / e).iterdir()}
    assert len(rows) == len(runs) * len(AGGREGATIONS)
    assert {r["entry_id"] for r in rows} == set(entries)
    pins = {
        e: tomllib.loads((store / "submissions" / e / "submission.toml").read_text())["submission"][
            "plugins"
        ]
        for e in entries
    }
    checked = 0
    for run_entry, run_name in sorted(runs):
        raw, meta = shard_rows(store / "results" / run_entry / run_name)
        mine = [
            r for r in rows if r["entry_id"] == run_entry and r["manifest"] == run_name + ".parquet"
        ]
        assert [r["aggregation"] for r in mine] == list(AGGREGATIONS)
        for row in mine:
            ddof = SUB_BENCHMARKS[row["benchmark"]].statistic_ddof
            values = per_episode(raw, meta, row["aggregation"], "base")
            mean, ci95 = mean_and_ci(values, ddof)
            assert row["mean"] == pytest.approx(mean, rel=1e-12)
            assert row["ci95"] == pytest.approx(ci95, rel=1e-9)
            assert (row["n"], row["episodes"], row["ddof"]) == (len(values), len(values), ddof)
            assert row["manifest_sha256"] == meta["manifest"]["sha256"]
            assert row["run_id"] == meta["run_id"]
            assert row["hpe_protocol"] == meta["hpe"]["name"]
            assert row["status"] == stored_status(store, run_entry).kind
            assert row["plugins"] == ";".join(sorted(pins[run_entry]))
            assert row["fewtrans_board_version"] == fewtrans_board.__version__
            if any(r["split"] == "novel" for r in raw):
                novel_mean, novel_ci = mean_and_ci(
                    per_episode(raw, meta, row["aggregation"], "novel"), ddof
                )
                assert row["novel_mean"] == pytest.approx(novel_mean, rel=1e-12)
                assert row["novel_ci95"] == pytest.approx(novel_ci, rel=1e-9)
                assert row["hm_mean"] is not None
            else:
                assert row["novel_mean"] is None and row["hm_mean"] is None
            checked += 1
    assert checked == len(rows)
    hostile = [r for r in rows if r["entry_id"] == HOSTILE_ENTRY]
    assert {r["method"] for r in hostile} == {EVIL}


def test_per_shot_rows_carry_the_sites_headline(built: tuple[Path, Path]) -> None:
    store, out = built
    table = fewtrans_board.load_leaderboard(store)
    shots = [r for r in table.to_pylist() if r["benchmark"] == "demo-clip-inductive"]
    assert shots and all(r["shot_average"] is not None for r in shots)
    listed = read_csv(out / "benchmark-demo-clip-inductive--per-shot-digits-5-9.csv")
    for row in listed:
        mine = next(
            r for r in shots if r["entry_id"] == row["entry_id"] and r["aggregation"] == "hpe"
        )
        assert float(row["average"]) == mine["shot_average"]
        assert float(row["average_std"]) == mine["shot_average_std"]


def test_load_leaderboard_reads_every_source_alike(built: tuple[Path, Path]) -> None:
    store, out = built
    from_store = fewtrans_board.load_leaderboard(store)
    sources: list[str | Path] = [
        str(store),
        out,
        str(out),
        out / "leaderboard.parquet",
        out / "leaderboard.csv",
        (out / "leaderboard.parquet").as_uri(),
        (out / "leaderboard.csv").as_uri(),
        out.as_uri(),
    ]
    for source in sources:
        table = fewtrans_board.load_leaderboard(source)
        assert isinstance(table, pa.Table)
        assert table.schema.equals(from_store.schema), source
        assert table.equals(from_store), source
    # The hostile method begins with '=': guarded in the CSV file, restored when read.
    text = (out / "leaderboard.csv").read_text(encoding="utf-8")
    assert csv_cell(EVIL) == "'" + EVIL and "'=1+2 Mean centroid" in text
    for bad in (out / "index.html", store / "missing", "ftp://example.org/leaderboard.parquet"):
        with pytest.raises(LeaderboardTableError):
            fewtrans_board.load_leaderboard(bad)


@pytest.mark.slow
def test_importing_the_package_stays_light() -> None:
    import subprocess
    import sys

    code = "import sys, fewtrans_board; print(sorted({'pyarrow', 'torch', 'numpy'} & set(sys.modules)))"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"
    assert "load_leaderboard" in fewtrans_board.__all__


# --- every table's CSV and JSON equal its HTML -----------------------------------------


def read_csv(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(path.read_text(encoding="utf-8"))))


def csv_header(path: Path) -> list[str]:
    return next(csv.reader(io.StringIO(path.read_text(encoding="utf-8"))))


def strict_json(text: str) -> Any:
    """JSON as RFC 8259 has it: ``NaN`` and ``Infinity`` are errors, not numbers."""

    def reject(constant: str) -> Any:
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=reject)


def read_json(path: Path, header: list[str]) -> list[dict[str, Any]]:
    """A JSON download's rows; its columns are the CSV's ``header``, each row's keys too."""
    document = strict_json(path.read_text(encoding="utf-8"))
    assert document["columns"] == header, path.name  # an empty table's too
    for row in document["rows"]:
        assert list(row) == header, path.name
    return list(document["rows"])


def unguard(text: str) -> str:
    return text[1:] if text.startswith("'") else text


def test_every_csv_matches_its_json_and_every_download_is_linked(built: tuple[Path, Path]) -> None:
    _, out = built
    written = {p.name for p in out.glob("*.csv")}
    linked = {
        name
        for page in out.glob("*.html")
        for name in re.findall(r'href="([^"/]+\.(?:csv|json))"', page.read_text(encoding="utf-8"))
    }
    assert written | {p.name for p in out.glob("*.json")} == linked
    assert {
        "leaderboard.csv",
        "benchmark-demo--table-hpe.csv",
        "dataset-digits--entries.csv",
    } <= written
    assert "leaderboard.parquet" in (out / "index.html").read_text(encoding="utf-8")
    for path in sorted(out.glob("*--*.csv")):
        rows = read_csv(path)
        records = read_json(path.with_suffix(".json"), csv_header(path))
        assert len(rows) == len(records), path.name
        for row, record in zip(rows, records, strict=True):
            assert list(row) == list(record), path.name
            for key, text in row.items():
                value = record[key]
                if value is None:
                    assert text == "", (path.name, key)
                elif isinstance(value, bool):
                    assert text == str(value).lower()
                elif isinstance(value, int | float):
                    assert float(text) == value, (path.name, key)
                else:
                    assert unguard(text) == str(value), (path.name, key)


def test_an_empty_table_keeps_its_columns(tmp_path: Path) -> None:
    csv_path, json_path = write_download(Download("p--t", "empty", ("a", "b"), ()), tmp_path)
    assert csv_header(csv_path) == ["a", "b"]
    assert read_json(json_path, csv_header(csv_path)) == []


def test_json_downloads_write_non_finite_numbers_as_null() -> None:
    # JSON has neither NaN nor infinity: both are null (no value), in the downloads and in
    # the regime selector's embedded data alike (one helper).
    columns = ("nan", "inf", "minus_inf", "numpy_inf", "finite", "none", "text")
    row = (math.nan, math.inf, -math.inf, np.float64(np.inf), 1.5, None, "x")
    expected = [None, None, None, None, 1.5, None, "x"]
    document = strict_json(download_json(Download("p--t", "t", columns, (row,))))
    assert document["rows"] == [dict(zip(columns, expected, strict=True))]
    assert [json_value(v) for v in row] == expected


def html_rows(page: str, section: str) -> dict[str, str]:
    """Each ``<tr>`` of a section's (first) table body, by the method id it links to."""
    start = page.index(f'id="{section}"')
    body = page[start:].split("<tbody>", 1)[1].split("</tbody>", 1)[0]
    rows = {}
    for tr in body.split("<tr")[1:]:
        ident = re.search(r'href="method-([^"#]+)\.html', tr)
        assert ident is not None
        rows[ident.group(1)] = tr
    return rows


def ci_cell(mean: str, ci: str) -> str:
    return f'<span class="mean">{float(mean):.2f}</span>&nbsp;<span class="pm">± {float(ci):.2f}</span>'


@pytest.mark.parametrize("aggregation", COLUMN_SETS)
def test_benchmark_tables_equal_their_html(built: tuple[Path, Path], aggregation: str) -> None:
    _, out = built
    page = (out / "benchmark-demo.html").read_text(encoding="utf-8")
    rows = read_csv(out / f"benchmark-demo--table-{aggregation}.csv")
    html = html_rows(page, f"table-{aggregation}")
    assert [r["entry_id"] for r in rows] == list(html)  # same rows, same order
    for row in rows:
        tr = html[row["entry_id"]]
        assert f'>{row["rank"]} <span class="interval"' in tr
        assert f"[{row['rank_low']}–{row['rank_high']}]" in tr
        assert ci_cell(row["digits.mean"], row["digits.ci95"]) in tr
        assert (
            f'{float(row["average"]):.2f}</a> <span class="pm">'
            f"[{float(row['average_low']):.2f}, {float(row['average_high']):.2f}]"
        ) in tr
        assert ("≈ best" in tr) == (row["tied_with_best"] == "true")
        if row["difference"]:
            assert f"{float(row['difference']):+.2f}</span>" in tr
            assert f"p={float(row['p_holm']):.2g}, d={float(row['cohens_d']):+.2f}" in tr
        elif row["vs_reference"] == "reference":
            assert ">reference</td>" in tr
    hostile = next(r for r in rows if r["entry_id"] == HOSTILE_ENTRY)
    assert unguard(hostile["method"]).startswith(EVIL)


def boot_cell(row: dict[str, str], name: str) -> str:
    return f'{float(row[name]):.2f} <span class="pm">[{float(row[name + "_low"]):.2f}, {float(row[name + "_high"]):.2f}]</span>'


def test_base_novel_tables_equal_their_html(built: tuple[Path, Path]) -> None:
    _, out = built
    page = (out / "benchmark-demo-base-to-novel.html").read_text(encoding="utf-8")
    for aggregation in COLUMN_SETS:
        rows = read_csv(out / f"benchmark-demo-base-to-novel--base-novel-{aggregation}.csv")
        html = html_rows(page, f"base-novel-{aggregation}")
        assert [r["entry_id"] for r in rows] == list(html) and rows
        for row in rows:
            tr = html[row["entry_id"]]
            assert f'data-sort="{row["rank"]}">{row["rank"]}</td>' in tr
            for split in ("base", "novel", "hm"):
                assert ci_cell(row[f"digits.{split}.mean"], row[f"digits.{split}.ci95"]) in tr
            for name in ("average_base", "average_novel", "hm_of_averages"):
                assert boot_cell(row, name) in tr


def spread_cell(mean: str, std: str) -> str:
    return ci_cell(mean, std)  # the same markup: mean, then ± its spread


def test_per_shot_and_settings_tables_equal_their_html(built: tuple[Path, Path]) -> None:
    _, out = built
    page = (out / "benchmark-demo-clip-inductive.html").read_text(encoding="utf-8")
    rows = read_csv(out / "benchmark-demo-clip-inductive--per-shot-hpe.csv")
    html = html_rows(page, "per-shot-hpe")
    assert [r["entry_id"] for r in rows] == list(html) and rows
    for row in rows:
        tr = html[row["entry_id"]]
        for k in (1, 2, 4, 8, 16):
            assert spread_cell(row[f"K={k}.mean"], row[f"K={k}.std"]) in tr
        assert spread_cell(row["average"], row["average_std"]) in tr
    settings = (out / "clip-settings-demo-clip-inductive.html").read_text(encoding="utf-8")
    pairs = read_csv(out / "clip-settings-demo-clip-inductive--clip-settings.csv")
    assert pairs
    for pair in pairs:
        for setting in ("original", "inductive"):
            cell = (
                f'<a href="method-{pair[setting + "_entry"]}.html">{float(pair[setting + "_average"]):.2f}'
                f'</a> <span class="pm">± {float(pair[setting + "_std"]):.2f}</span>'
            )
            assert cell in settings
        assert f'data-sort="{float(pair["gap"])}">{float(pair["gap"]):+.2f}</td>' in settings


def test_dataset_tables_equal_their_html(built: tuple[Path, Path]) -> None:
    _, out = built
    for name in ("digits", "digits-5-9"):
        page = (out / f"dataset-{name}.html").read_text(encoding="utf-8")
        rows = read_csv(out / f"dataset-{name}--entries.csv")
        body = page.split("<tbody>", 1)[1].split("</tbody>", 1)[0].split("<tr>")[1:]
        assert len(body) == len(rows) and rows
        for row, tr in zip(rows, body, strict=True):
            assert f'href="method-{row["entry_id"]}.html#{row["column"]}"' in tr
            if row["shot_average"]:
                assert spread_cell(row["shot_average"], row["shot_average_std"]) in tr
                assert row["mean"] == ""
            else:
                assert ci_cell(row["mean"], row["ci95"]) in tr
            if row["novel_mean"]:
                assert ci_cell(row["novel_mean"], row["novel_ci95"]) in tr
                assert ci_cell(row["hm_mean"], row["hm_ci95"]) in tr


def test_the_leaderboard_table_agrees_with_the_benchmark_table(built: tuple[Path, Path]) -> None:
    _, out = built
    table = fewtrans_board.load_leaderboard(out).to_pylist()
    for aggregation in COLUMN_SETS:
        for row in read_csv(out / f"benchmark-demo--table-{aggregation}.csv"):
            mine = next(
                r
                for r in table
                if r["entry_id"] == row["entry_id"] and r["aggregation"] == aggregation
            )
            assert (mine["mean"], mine["ci95"]) == (
                float(row["digits.mean"]),
                float(row["digits.ci95"]),
            )


# --- badges ----------------------------------------------------------------------------


def test_every_verified_entry_has_a_well_formed_badge(built: tuple[Path, Path]) -> None:
    store, out = built
    entries = sorted(p.name for p in (store / "submissions").iterdir())
    assert sorted(p.stem for p in (out / "badges").glob("*.svg")) == entries
    superseded = {
        tomllib.loads((store / "submissions" / e / "submission.toml").read_text())[
            "submission"
        ].get("supersedes")
        for e in entries
    }
    for ident in entries:
        root = ET.fromstring((out / "badges" / f"{ident}.svg").read_bytes())
        assert root.tag == f"{SVG}svg"
        texts = [t.text for t in root.iter(f"{SVG}text")]
        assert texts[0] == "fewtrans-board" and texts[1] is not None
        assert texts[1].endswith(f", {stored_status(store, ident).kind}")
        # A superseded entry's badge says so instead of a rank (its path stays valid).
        if ident in superseded:
            assert texts[1].startswith("superseded, ") and "rank " not in texts[1]
        else:
            assert "rank " in texts[1]


def test_the_badge_shows_the_benchmark_tables_numbers_and_escapes_the_name(
    built: tuple[Path, Path],
) -> None:
    store, out = built
    row = next(
        r for r in read_csv(out / "benchmark-demo--table-hpe.csv") if r["entry_id"] == HOSTILE_ENTRY
    )
    status = stored_status(store, HOSTILE_ENTRY).kind
    raw = (out / "badges" / f"{HOSTILE_ENTRY}.svg").read_text(encoding="utf-8")
    assert "<script" not in raw and "<![CDATA[" not in raw
    assert "&lt;script&gt;alert(&#34;pwned&#34;)&lt;/script&gt; &amp; &#34;quotes&#34;" in raw
    root = ET.fromstring(raw.encode())
    title = root.find(f"{SVG}title")
    assert title is not None and title.text is not None and EVIL in title.text
    message = [t.text for t in root.iter(f"{SVG}text")][1]
    average = f"{float(row['average']):.1f} [{float(row['average_low']):.1f}, {float(row['average_high']):.1f}]"
    assert message == f"{average}, rank {row['rank_low']}–{row['rank_high']} of 6, {status}"
    assert root.get("aria-label") == f"fewtrans-board: {message}"


def test_the_method_page_shows_the_badge_and_its_markdown(built: tuple[Path, Path]) -> None:
    _, out = built
    page = (out / f"method-{HOSTILE_ENTRY}.html").read_text(encoding="utf-8")
    assert f'<img src="badges/{HOSTILE_ENTRY}.svg"' in page
    markdown = f"[![fewtrans-board](badges/{HOSTILE_ENTRY}.svg)](method-{HOSTILE_ENTRY}.html)"
    assert f"<pre><code>{markdown}</code></pre>" in page
    assert "<script>alert" not in page


def _method(method: str, superseded_by: str | None = None) -> MethodView:
    meta = SubmissionMeta(
        id="an-entry",
        method=method,
        model="demo-cnn.digits",
        adapter="mean-centroid",
        benchmark="demo",
        hpe_protocol="fewtrans-reference",
        authors=("Test",),
        hardware="CPU",
        plugins={},
    )
    return MethodView("an-entry", meta, "verified", superseded_by, None)


def test_badge_markdown_takes_the_sites_address(monkeypatch: pytest.MonkeyPatch) -> None:
    badge = badges_module.Badge(_method("M"), "1.0 [0.5, 1.5], rank 1–1 of 1, verified", "")
    base = badges_module.site_url("https://example.org/board")
    assert badge.markdown(base) == (
        "[![fewtrans-board](https://example.org/board/badges/an-entry.svg)]"
        "(https://example.org/board/method-an-entry.html)"
    )
    monkeypatch.setenv(badges_module.SITE_URL_ENV, "https://example.org/")
    assert badges_module.site_url(None) == "https://example.org/"
    monkeypatch.delenv(badges_module.SITE_URL_ENV)
    assert badges_module.site_url(None) == ""
    for bad in ("javascript:alert(1)", 'https://x.org/"><script>', "https://x.org/a b"):
        with pytest.raises(badges_module.SiteUrlError):
            badges_module.site_url(bad)


def test_a_badge_is_well_formed_whatever_the_name() -> None:
    for name in (EVIL, "a\x00b\x1bc\ufffe", "&#0; &amp; <!-- -->", "]]>"):
        svg = badges_module.Badge(_method(name), "verified", "x").svg()
        root = ET.fromstring(svg.encode())
        title = root.find(f"{SVG}title")
        assert title is not None and title.text is not None
        assert badges_module.NOT_XML.sub("", name) in title.text
    superseded = badges_module.Badge(
        _method("M", superseded_by="newer"), "superseded, verified", ""
    )
    assert 'fill="#9e9e9e"' in superseded.svg()


def test_an_http_url_is_downloaded_with_urllib(
    built: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    import urllib.request

    _, out = built
    asked: list[str] = []

    def urlopen(url: str, timeout: float) -> io.BytesIO:  # no network: the site's own file
        asked.append(url)
        return io.BytesIO((out / Path(url).name).read_bytes())

    monkeypatch.setattr(urllib.request, "urlopen", urlopen)
    expected = fewtrans_board.load_leaderboard(out)
    for url in ("https://example.org/board/", "http://example.org/board/leaderboard.csv"):
        assert fewtrans_board.load_leaderboard(url).equals(expected)
    assert asked == [
        "https://example.org/board/leaderboard.parquet",
        "http://example.org/board/leaderboard.csv",
    ]
