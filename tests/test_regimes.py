"""Regime views (shots and ways buckets) on the benchmark pages, against numbers computed here.

The committed store's demo benchmarks are built once; bucket membership is recounted from the
frozen manifests' Parquet rows, each bucket's mean ± CI from the stored shard rows, the paired
tests with scipy, and the page is read as HTML (every regime table is there without
JavaScript; the embedded data the selector uses matches the tables) and, marked slow, opened
in headless Chromium to check that ``#regime=...`` selects a view.
"""

from __future__ import annotations

import contextlib
import csv
import html
import io
import json
import math
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from scipy import stats as scipy_stats

from fewtrans_board.leaderboard.store import LeaderboardStore
from fewtrans_board.leaderboard.sub_benchmarks import SUB_BENCHMARKS
from fewtrans_board.website.data import build_site_data
from fewtrans_board.website.model import BenchmarkView, Bucket, SiteData
from fewtrans_board.website.regimes import (
    BUCKETS,
    PER_SHOT_NOTE,
    EpisodeProfiles,
    regime_views,
    shot_count,
)
from tests.conftest import CHROMIUM, serving

ROOT = Path(__file__).resolve().parents[1]
STORE = ROOT / "leaderboard"
MANIFESTS = STORE / "manifests"
# benchmark -> its one frozen manifest (the demo benchmarks are one column each)
EPISODE_BENCHMARKS = {
    "demo": "fewtrans-varied--digits.parquet",
    "demo-base-to-novel": "fewtrans-base2novel--digits.parquet",
}


@pytest.fixture(scope="module")
def site(committed_site: Path) -> Path:
    return committed_site


@pytest.fixture(scope="module")
def data() -> SiteData:
    return build_site_data(LeaderboardStore(STORE))


def view_of(data: SiteData, name: str) -> BenchmarkView:
    return next(v for v in data.benchmarks if v.benchmark.name == name)


# --- by hand, from the files -----------------------------------------------------------------


def manifest_counts(manifest: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(episodes, ways, shot count)`` of a frozen manifest, from its Parquet rows.

    Shot count: the lower median of the per-class support sizes (the page's rule), written
    with numpy on the support rows.
    """
    table = pq.read_table(MANIFESTS / manifest, columns=["episode", "role", "label"])
    support = table.filter(pc.equal(table["role"].cast("string"), "support"))
    episode = support["episode"].to_numpy()
    label = support["label"].to_numpy().astype(np.int64)
    episodes = np.unique(episode)
    ways, shots = [], []
    for e in episodes:
        per_class = np.bincount(label[episode == e])
        ways.append(len(per_class))
        ordered = np.sort(per_class)
        shots.append(int(ordered[(len(ordered) - 1) // 2]))
    return episodes, np.array(ways), np.array(shots)


def in_bucket(bucket: Bucket, counts: np.ndarray) -> np.ndarray:
    high = np.inf if bucket.high is None else bucket.high
    return (counts >= bucket.low) & (counts <= high)


def stored_hpe(run: Path) -> tuple[np.ndarray, np.ndarray]:
    """``(episodes, hpe accuracy)`` of a stored run, from its shards' rows."""
    files = sorted((run / "shards").glob("*.parquet"))
    # The footer's key-value metadata: a split shard keeps its provenance only there.
    meta = json.loads(pq.ParquetFile(files[0]).metadata.metadata[b"fewtrans_board.results"])
    fusion = meta["hpe"]["aggregation"]
    columns = ["episode", "split", "kind", "aggregation", "accuracy"]
    rows = [r for f in files for r in pq.read_table(f, columns=columns).to_pylist()]
    chosen = {
        r["episode"]: r["accuracy"]
        for r in rows
        if r["split"] == "base" and r["kind"] == "ensemble" and r["aggregation"] == fusion
    }
    episodes = np.array(sorted(chosen))
    return episodes, np.array([chosen[e] for e in episodes])


def mean_and_ci(values: np.ndarray, ddof: int) -> tuple[float, float]:
    n = len(values)
    s = math.sqrt(sum((v - values.mean()) ** 2 for v in values) / (n - ddof))
    return float(values.mean()), 1.96 * s / math.sqrt(n)


def holm_by_hand(pvalues: dict[str, float]) -> dict[str, float]:
    ordered = sorted(pvalues, key=lambda k: pvalues[k])
    out, running, m = {}, 0.0, len(ordered)
    for i, name in enumerate(ordered):
        running = max(running, min(1.0, (m - i) * pvalues[name]))
        out[name] = running
    return out


def read_csv(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(path.read_text(encoding="utf-8"))))


def entry_run(entry: str) -> Path:
    return next((STORE / "results" / entry).iterdir())


# --- the rule ---------------------------------------------------------------------------------


def test_shot_count_is_the_lower_median_and_buckets_cover_every_count() -> None:
    assert shot_count([1, 1, 1, 1, 1]) == 1
    assert shot_count([3, 6]) == 3  # even: the smaller middle one
    assert shot_count([10, 1, 4, 7]) == 4
    assert shot_count([5, 1, 9]) == 5
    for dimension in ("shots", "ways"):
        buckets = [b for b in BUCKETS if b.dimension == dimension]
        for count in range(1 if dimension == "shots" else 2, 1000):
            assert sum(bool(b.contains(np.array([count]))[0]) for b in buckets) == 1
    assert [b.label for b in BUCKETS] == [
        "1 shot", "2–4 shots", "5–10 shots", "11+ shots", "2–5 ways", "6–10 ways", "11+ ways",
    ]  # fmt: skip


@pytest.mark.parametrize("benchmark", sorted(EPISODE_BENCHMARKS))
def test_bucket_membership_equals_a_count_from_the_manifest(data: SiteData, benchmark: str) -> None:
    view = view_of(data, benchmark)
    _, ways, shots = manifest_counts(EPISODE_BENCHMARKS[benchmark])
    expected = {}
    for bucket in BUCKETS:
        counts = shots if bucket.dimension == "shots" else ways
        n = int(in_bucket(bucket, counts).sum())
        if n:
            expected[bucket.id] = n
    assert expected  # the demo manifests have 1-shot, 2-4 and 5-10 shot episodes
    for section in view.sections:
        regimes = section.regimes
        assert regimes is not None and not regimes.note
        assert {t.bucket.id: t.n for t in regimes.tables} == expected
        assert [b.id for b in regimes.empty] == [b.id for b in BUCKETS if b.id not in expected]
        assert regimes.episodes == len(shots)
        # every episode in exactly one bucket per dimension
        for dimension in ("shots", "ways"):
            assert sum(t.n for t in regimes.tables if t.bucket.dimension == dimension) == len(shots)


def test_a_fixed_shot_manifest_has_its_k() -> None:
    frozen = LeaderboardStore(STORE).frozen
    sha = next(
        s for s, (name, _) in frozen.items() if name == "fewtrans-fixed-5w1s--digits.parquet"
    )
    profile = EpisodeProfiles(frozen).get(sha)
    assert profile is not None
    assert set(profile.shots.values()) == {1} and set(profile.ways.values()) == {5}
    assert EpisodeProfiles(frozen).get("0" * 64) is None


# --- the numbers against the stored rows ----------------------------------------------------


@pytest.mark.parametrize("benchmark", sorted(EPISODE_BENCHMARKS))
def test_each_buckets_mean_and_ci_equal_the_stored_rows(
    data: SiteData, site: Path, benchmark: str
) -> None:
    view = view_of(data, benchmark)
    ddof = SUB_BENCHMARKS[benchmark].statistic_ddof
    manifest_episodes, ways, shots = manifest_counts(EPISODE_BENCHMARKS[benchmark])
    section = view.sections[0]
    assert section.regimes is not None
    checked = 0
    for table in section.regimes.tables:
        (column,) = table.columns
        counts = shots if table.bucket.dimension == "shots" else ways
        members = set(manifest_episodes[in_bucket(table.bucket, counts)].tolist())
        rows = {r["entry_id"]: r for r in read_csv(site / f"benchmark-{benchmark}--{table.id}.csv")}
        assert set(rows) == {r.method.id for r in table.rows}
        for row in table.rows:
            episodes, accuracy = stored_hpe(entry_run(row.method.id))
            picked = accuracy[np.isin(episodes, sorted(members))]
            mean, ci = mean_and_ci(picked, ddof)
            cell = row.cells[column]
            assert cell.n == len(picked) == table.episodes[column]
            assert cell.mean == pytest.approx(mean, abs=1e-9)
            assert cell.ci95 == pytest.approx(ci, abs=1e-9)
            written = rows[row.method.id]
            assert float(written[f"{column}.mean"]) == pytest.approx(mean, abs=1e-9)
            assert float(written[f"{column}.ci95"]) == pytest.approx(ci, abs=1e-9)
            assert int(written[f"{column}.n"]) == len(picked)
            checked += 1
    assert checked >= 3 * len(section.methods)


@pytest.mark.parametrize("benchmark", sorted(EPISODE_BENCHMARKS))
def test_paired_tests_against_the_reference_equal_scipy(
    data: SiteData, site: Path, benchmark: str
) -> None:
    view = view_of(data, benchmark)
    manifest_episodes, ways, shots = manifest_counts(EPISODE_BENCHMARKS[benchmark])
    section = view.sections[0]
    assert section.reference is not None and section.regimes is not None
    reference = section.reference.id
    ref_episodes, ref_accuracy = stored_hpe(entry_run(reference))
    for table in section.regimes.tables:
        counts = shots if table.bucket.dimension == "shots" else ways
        members = sorted(manifest_episodes[in_bucket(table.bucket, counts)].tolist())
        ref = ref_accuracy[np.isin(ref_episodes, members)]
        pvalues, differences, effects = {}, {}, {}
        for row in table.rows:
            if row.method.id == reference:
                continue
            episodes, accuracy = stored_hpe(entry_run(row.method.id))
            assert np.array_equal(episodes, ref_episodes)
            mine = accuracy[np.isin(episodes, members)]
            pvalues[row.method.id] = float(scipy_stats.ttest_rel(mine, ref).pvalue)
            differences[row.method.id] = float(mine.mean() - ref.mean())
            d = mine - ref
            effects[row.method.id] = float(d.mean() / d.std(ddof=1))
        adjusted = holm_by_hand(pvalues)
        written = {
            r["entry_id"]: r for r in read_csv(site / f"benchmark-{benchmark}--{table.id}.csv")
        }
        assert written[reference]["vs_reference"] == "reference"
        for row in table.rows:
            if row.method.id == reference:
                assert row.versus_reference is None
                continue
            versus = row.versus_reference
            assert versus is not None
            assert versus.p_holm == pytest.approx(adjusted[row.method.id], rel=1e-6, abs=1e-300)
            assert versus.difference == pytest.approx(differences[row.method.id], abs=1e-9)
            assert versus.cohens_d == pytest.approx(effects[row.method.id], rel=1e-9)
            assert float(written[row.method.id]["p_holm"]) == pytest.approx(versus.p_holm)
            expected = (
                "n.s."
                if adjusted[row.method.id] >= 0.05
                else ("better" if differences[row.method.id] > 0 else "worse")
            )
            assert written[row.method.id]["vs_reference"] == expected


def test_a_regime_holding_every_episode_is_the_headline_table(data: SiteData) -> None:
    """The demo's episodes are all 2-5 ways: that regime's table equals the headline one."""
    section = view_of(data, "demo").sections[0]
    assert section.regimes is not None
    (table,) = [t for t in section.regimes.tables if t.bucket.id == "ways-2-5"]
    assert table.n == section.regimes.episodes
    headline = section.tables["hpe"]
    assert [r.method.id for r in table.rows] == [r.method.id for r in headline]
    for mine, theirs in zip(table.rows, headline, strict=True):
        assert mine.cells == theirs.cells
        assert mine.average == theirs.average and mine.rank == theirs.rank
        assert mine.tied_with_best == theirs.tied_with_best
        assert mine.versus_reference == theirs.versus_reference


def test_per_shot_benchmarks_have_no_regimes_and_say_why(data: SiteData, site: Path) -> None:
    for name in ("demo-clip-inductive", "demo-clip-partially-transductive"):
        for section in view_of(data, name).sections:
            assert section.regimes is not None
            assert section.regimes.tables == [] and section.regimes.note == PER_SHOT_NOTE
        page = (site / f"benchmark-{name}.html").read_text(encoding="utf-8")
        assert PER_SHOT_NOTE in html.unescape(page)
        assert 'class="regime"' not in page and 'id="regime-data"' not in page
        assert not list(site.glob(f"benchmark-{name}--regime-*"))


def test_a_manifest_the_store_lacks_is_named_not_guessed(data: SiteData) -> None:
    view = view_of(data, "demo")
    section = view.sections[0]
    regimes = regime_views(view.benchmark, section, view.datasets, EpisodeProfiles({}))
    assert regimes.tables == []
    assert "has not frozen the manifest" in regimes.note
    assert "fewtrans-varied--digits.parquet" in regimes.note


def test_local_runs_under_another_protocol_get_their_own_regime_tables(
    mean_centroid_runs: dict[str, Path],
) -> None:
    """Each protocol section ranks its own entries per regime, against its own reference."""
    data = build_site_data(LeaderboardStore(STORE), list(mean_centroid_runs.values()))
    view = view_of(data, "demo")
    assert len(view.sections) == 2 and len({s.anchor for s in view.sections}) == 2
    for section in view.sections:
        assert section.regimes is not None and section.regimes.tables
        local = {m.status for m in section.methods} == {"local"}
        # the local runs have no fine-tuning entry under their protocol: nothing to compare
        assert (section.reference is None) == local
        for table in section.regimes.tables:
            assert table.id == f"regime-{table.bucket.id}{section.anchor}"
            assert {r.method.id for r in table.rows} == {m.id for m in section.methods}
            assert sorted(r.rank[0] for r in table.rows) == list(range(1, len(table.rows) + 1))
            compared = {r.method.id for r in table.rows if r.versus_reference is not None}
            assert compared == (
                set()
                if local
                else {m.id for m in section.methods} - {"finetune--demo-cnn--full-batch"}
            )


# --- the page ---------------------------------------------------------------------------------


def regime_sections(page: str) -> dict[str, str]:
    """Each regime table's section HTML by its id."""
    out = {}
    for match in re.finditer(r'<section class="regime" id="([^"]+)"([^>]*)>', page):
        assert "hidden" not in match.group(2)  # shown without JavaScript
        end = page.index("</section>", match.end())
        out[match.group(1)] = page[match.end() : end]
    return out


def embedded(page: str) -> dict[str, Any]:
    match = re.search(
        r'<script type="application/json" id="regime-data">(.*?)</script>', page, re.S
    )
    assert match is not None
    return dict(json.loads(match.group(1)))


@pytest.mark.parametrize("benchmark", sorted(EPISODE_BENCHMARKS))
def test_the_page_holds_every_regime_table_and_its_embedded_data(
    data: SiteData, site: Path, benchmark: str
) -> None:
    page = (site / f"benchmark-{benchmark}.html").read_text(encoding="utf-8")
    view = view_of(data, benchmark)
    tables = [t for s in view.sections if s.regimes for t in s.regimes.tables]
    sections = regime_sections(page)
    assert list(sections) == [t.id for t in tables]
    document = embedded(page)
    assert [r["id"] for r in document["regimes"]] == [t.bucket.id for t in tables]
    assert [t["id"] for t in document["tables"]] == list(sections)
    for table, record in zip(tables, document["tables"], strict=True):
        body = sections[table.id]
        assert f'data-regime="{table.bucket.id}"' in body
        assert f"n = {table.n} of" in body
        assert record["regime"] == table.bucket.id and record["episodes"] == table.n
        assert record["columns"] == table.episodes
        rows = body.split("<tbody>", 1)[1].split("</tbody>", 1)[0].split("<tr")[1:]
        assert len(rows) == len(record["rows"])
        written = read_csv(site / f"benchmark-{benchmark}--{table.id}.csv")
        assert [r["entry_id"] for r in written] == [r["entry_id"] for r in record["rows"]]
        for tr, row, csv_row in zip(rows, record["rows"], written, strict=True):
            assert f'href="method-{row["entry_id"]}.html"' in tr
            rank, low, high = row["rank"]
            assert f'data-sort="{rank}">{rank} <span class="interval"' in tr
            assert f"[{low}–{high}]" in tr
            assert f'{row["average"]:.2f}</a> <span class="pm">[' in tr
            assert float(csv_row["average"]) == pytest.approx(row["average"])
            assert (row["vs_reference"] or "reference") in (csv_row["vs_reference"] or "reference")
            if row["difference"] is not None:
                assert f"{row['difference']:+.2f}</span>" in tr
                assert f"p={row['p_holm']:.2g}," in tr
        assert f'href="benchmark-{benchmark}--{table.id}.csv"' in body
        assert f'href="benchmark-{benchmark}--{table.id}.json"' in body
    # the selector is hidden until the script shows it; the script asks nothing of the network
    assert '<p class="regime-choice" hidden>' in page
    script = page.split('<script type="application/json" id="regime-data">', 1)[1]
    script = script.split("<script>", 1)[1].split("</script>", 1)[0]
    for forbidden in ("fetch(", "XMLHttpRequest", "import(", "http:", "https:", "src="):
        assert forbidden not in script
    assert "#regime=" in script and "replaceState" in script and "hashchange" in script


def test_the_rules_are_stated_on_the_page(site: Path) -> None:
    page = html.unescape((site / "benchmark-demo.html").read_text(encoding="utf-8"))
    assert "lower median of its classes' support sizes" in page
    assert "a regime with no episode here is left out (11+ shots, 6–10 ways, 11+ ways)" in page
    assert "Shot buckets: 1, 2–4, 5–10, 11+; way buckets: 2–5, 6–10, 11+" in page


def test_few_episodes_are_marked(data: SiteData) -> None:
    counts = Counter(
        t.few for v in data.benchmarks for s in v.sections if s.regimes for t in s.regimes.tables
    )
    assert counts[False] > 0
    table = view_of(data, "demo").sections[0].regimes.tables[0]  # type: ignore[union-attr]
    assert table.few == (table.n < 30)


# --- in a browser -----------------------------------------------------------------------------


SHOWN = """expected => JSON.stringify(
  [...document.querySelectorAll("section.regime")]
    .filter((s) => s.getClientRects().length > 0)
    .map((s) => s.dataset.regime)
) === JSON.stringify(expected)"""
"""Whether the page shows exactly the regime tables ``expected`` (a selection's result)."""


@pytest.fixture
def server(site: Path) -> Iterator[str]:
    with serving(site) as url:
        yield url


@pytest.mark.slow
@pytest.mark.skipif(
    not CHROMIUM.exists(), reason="Debian chromium not installed (.ci/run installs it)"
)
def test_the_address_selects_a_regime_in_headless_chromium(server: str) -> None:
    from playwright.sync_api import TimeoutError as PlaywrightTimeoutError
    from playwright.sync_api import sync_playwright

    errors: list[str] = []
    outside: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=str(CHROMIUM),
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--disable-background-networking",
            ],
        )
        page = browser.new_page()
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on(
            "request", lambda r: outside.append(r.url) if not r.url.startswith(server) else None
        )

        def visible() -> list[str]:
            return [
                str(s.get_attribute("data-regime"))
                for s in page.locator("section.regime").all()
                if s.is_visible()
            ]

        def shown(expected: list[str]) -> list[str]:
            """The regimes shown once the page shows ``expected`` (or, after 5 s, as it is)."""
            with contextlib.suppress(PlaywrightTimeoutError):
                page.wait_for_function(SHOWN, arg=expected, timeout=5000)
            return visible()

        every = ["shots-1", "shots-2-4", "shots-5-10", "ways-2-5"]
        page.goto(f"{server}/benchmark-demo.html")
        assert shown(every) == every
        page.goto(f"{server}/benchmark-demo.html#regime=shots-1")
        page.reload()  # a fresh load of the linked view, not only a hash change
        assert shown(["shots-1"]) == ["shots-1"]
        select = page.locator("select.regime-select").first
        assert select.is_visible() and select.input_value() == "shots-1"
        select.select_option("ways-2-5")
        assert shown(["ways-2-5"]) == ["ways-2-5"]
        assert page.url.endswith("#regime=ways-2-5")
        page.goto(f"{server}/benchmark-demo.html#regime=shots-11plus")  # no such episode here
        assert len(shown(every)) == 4
        assert "shots-11plus" in page.locator(".regime-status").first.inner_text()
        page.goto(f"{server}/benchmark-demo.html#regime=shots-2-4")  # hash change only
        assert shown(["shots-2-4"]) == ["shots-2-4"]
        browser.close()
    assert errors == [] and outside == []
