"""The committed store's site as a reader's browser renders it (headless Chromium).

Geometry is measured by the browser, not estimated: every rendered text element of every
inline SVG must lie inside its SVG's viewport and overlap no other text of the same SVG
(``tests/test_cost_stability.py`` checks the same from estimated text widths, without a
browser). Every download link must resolve to a file that parses as what it claims to be,
and no page may request anything outside the site. Screenshots of the index, a benchmark
page with a regime selected, a method page and the cost figure go to ``test-artifacts/``.
"""

from __future__ import annotations

import csv
import io
import json
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.conftest import CHROMIUM, serving

ROOT = Path(__file__).resolve().parents[1]
STORE = ROOT / "leaderboard"
ARTIFACTS = ROOT / "test-artifacts"
LAUNCH_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not CHROMIUM.exists(), reason="Debian chromium not installed (.ci/run installs it)"
    ),
]

# Text boxes in the SVG's own user units (getBBox, mapped by getCTM so rotated labels count
# as drawn), against the viewBox; pairs of texts whose boxes overlap by more than a pixel in
# both directions. Hidden SVGs (another regime's view) have no layout and are skipped.
GEOMETRY_JS = """
() => {
  const report = [];
  document.querySelectorAll('svg').forEach((svg, index) => {
    const outer = svg.getBoundingClientRect();
    if (outer.width === 0 || outer.height === 0) return;
    const vb = svg.viewBox && svg.viewBox.baseVal && svg.viewBox.baseVal.width
      ? svg.viewBox.baseVal
      : {x: 0, y: 0, width: svg.width.baseVal.value, height: svg.height.baseVal.value};
    const svgCtm = svg.getScreenCTM().inverse();
    const boxes = [];
    svg.querySelectorAll('text').forEach(text => {
      const b = text.getBBox();
      if (b.width === 0 && b.height === 0) return;
      const m = svgCtm.multiply(text.getScreenCTM());
      const corners = [[b.x, b.y], [b.x + b.width, b.y], [b.x, b.y + b.height],
                       [b.x + b.width, b.y + b.height]].map(([x, y]) =>
        [m.a * x + m.c * y + m.e, m.b * x + m.d * y + m.f]);
      const xs = corners.map(c => c[0]), ys = corners.map(c => c[1]);
      boxes.push({text: text.textContent, x0: Math.min(...xs), y0: Math.min(...ys),
                  x1: Math.max(...xs), y1: Math.max(...ys)});
    });
    const title = svg.querySelector('title');
    report.push({index, title: title ? title.textContent : '', viewBox: [vb.x, vb.y,
                 vb.width, vb.height], boxes});
  });
  return report;
}
"""


@pytest.fixture(scope="module")
def site(committed_site: Path) -> Path:
    return committed_site


@pytest.fixture(scope="module")
def server(site: Path) -> Iterator[str]:
    with serving(site) as url:
        yield url


def layout_problems(report: list[dict[str, Any]], page: str) -> tuple[int, list[str]]:
    """Texts outside their SVG's viewport, and overlapping texts; with the count checked."""
    problems, checked = [], 0
    for svg in report:
        x, y, width, height = svg["viewBox"]
        boxes = svg["boxes"]
        where = f"{page} svg {svg['index']} ({svg['title'][:60]!r})"
        for box in boxes:
            checked += 1
            if (
                box["x0"] < x - 0.5
                or box["y0"] < y - 0.5
                or box["x1"] > x + width + 0.5
                or box["y1"] > y + height + 0.5
            ):
                problems.append(f"{where}: {box['text']!r} is cut at {box} of {svg['viewBox']}")
        for i, a in enumerate(boxes):
            for b in boxes[i + 1 :]:
                dx = min(a["x1"], b["x1"]) - max(a["x0"], b["x0"])
                dy = min(a["y1"], b["y1"]) - max(a["y0"], b["y0"])
                if dx > 1 and dy > 1:
                    problems.append(
                        f"{where}: {a['text']!r} overlaps {b['text']!r} by {dx:.1f} x {dy:.1f} "
                        f"({a['y1'] - a['y0']:.1f} high)"
                    )
    return checked, problems


def test_layout_requests_and_screenshots_in_chromium(site: Path, server: str) -> None:
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    pages = sorted(p.name for p in site.glob("*.html"))
    errors: list[str] = []
    outside: list[str] = []
    problems: list[str] = []
    checked = 0
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=LAUNCH_ARGS)
        page = browser.new_page(viewport={"width": 1300, "height": 900})
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on(
            "request", lambda r: outside.append(r.url) if not r.url.startswith(server) else None
        )
        for name in pages:
            response = page.goto(f"{server}/{name}")
            assert response is not None and response.ok, name
            count, found = layout_problems(page.evaluate(GEOMETRY_JS), name)
            checked += count
            problems += found
        # Every regime view is laid out once it is selected.
        page.goto(f"{server}/benchmark-demo.html")
        regimes = page.locator("select.regime-select").first.evaluate(
            "s => Array.from(s.options).map(o => o.value)"
        )
        assert len(regimes) >= 2
        for regime in regimes:
            page.goto(f"{server}/benchmark-demo.html#regime={regime}")
            page.reload()
            count, found = layout_problems(page.evaluate(GEOMETRY_JS), f"#regime={regime}")
            checked += count
            problems += found
        page.goto(f"{server}/benchmark-demo.html#regime=shots-1")
        page.reload()
        page.screenshot(path=str(ARTIFACTS / "benchmark-demo-shots-1.png"), full_page=True)
        page.goto(f"{server}/index.html")
        page.screenshot(path=str(ARTIFACTS / "browser-index.png"), full_page=True)
        method = next(n for n in pages if n.startswith("method-"))
        page.goto(f"{server}/{method}")
        page.screenshot(path=str(ARTIFACTS / "browser-method.png"), full_page=True)
        page.goto(f"{server}/benchmark-demo.html")
        cost = page.locator("svg:has(title:text-matches('cost', 'i'))").first
        cost.scroll_into_view_if_needed()
        cost.screenshot(path=str(ARTIFACTS / "browser-cost-plot.png"))
        browser.close()
    assert checked > 500, checked  # every plot of every page, not an empty selector
    assert errors == [] and outside == []
    assert not problems, "\n".join(problems[:40])
    for shot in ("benchmark-demo-shots-1", "browser-index", "browser-method", "browser-cost-plot"):
        assert (ARTIFACTS / f"{shot}.png").stat().st_size > 2000


def download_links(site: Path) -> dict[str, str]:
    """Every ``<a ... download>`` target of every page, with the first page linking it."""
    from html.parser import HTMLParser

    links: dict[str, str] = {}

    class Links(HTMLParser):
        page = ""

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            found = dict(attrs)
            if tag == "a" and "download" in found and found.get("href"):
                links.setdefault(str(found["href"]), self.page)

    parser = Links()
    for page in sorted(site.glob("*.html")):
        parser.page = page.name
        parser.feed(page.read_text(encoding="utf-8"))
    return links


def parsed(name: str, data: bytes) -> int:
    """Rows of a downloaded table, parsed as its extension says (raises if it does not parse)."""
    suffix = Path(urllib.parse.urlparse(name).path).suffix
    if suffix == ".csv":
        rows = list(csv.reader(io.StringIO(data.decode("utf-8"))))
        assert rows and all(len(r) == len(rows[0]) for r in rows), name
        return len(rows) - 1
    if suffix == ".json":
        document = json.loads(data)
        assert isinstance(document, (dict, list)) and document, name
        return len(document)
    if suffix == ".parquet":
        return pq.read_table(io.BytesIO(data)).num_rows
    raise AssertionError(f"{name}: a download of unexpected type")


def test_every_download_link_resolves_to_a_file_that_parses(site: Path, server: str) -> None:
    links = download_links(site)
    kinds = {Path(href).suffix for href in links}
    assert {".csv", ".json", ".parquet"} <= kinds, kinds
    assert len(links) > 20
    empty = []
    for href, page in links.items():
        url = urllib.parse.urljoin(f"{server}/{page}", href)
        assert url.startswith(server), f"{page} links {href} outside the site"
        with urllib.request.urlopen(url) as response:
            if parsed(href, response.read()) == 0:
                empty.append(href)
    # The whole-leaderboard files hold every entry's rows.
    assert "leaderboard.parquet" not in empty and "leaderboard.csv" not in empty


def test_no_page_is_wider_than_its_window_at_desktop_and_phone_widths(
    site: Path, server: str
) -> None:
    """Wide tables scroll inside themselves; headers, figures and text wrap (1400 and 390 px)."""
    from playwright.sync_api import sync_playwright

    pages = sorted(p.name for p in site.glob("*.html"))
    wide: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=LAUNCH_ARGS)
        for width in (1400, 390):
            page = browser.new_page(viewport={"width": width, "height": 900})
            for name in pages:
                page.goto(f"{server}/{name}")
                scroll = page.evaluate("() => document.documentElement.scrollWidth")
                if scroll > width:
                    wide.append(f"{name} at {width} px: {scroll} px wide")
            page.close()
        browser.close()
    assert len(pages) > 20 and not wide, "\n".join(wide)


SORT_KEYS_JS = """
(column) => Array.from(document.querySelector('table.sortable.results').tBodies[0].rows).map(
  (row) => { const c = row.cells[column]; return c ? (c.dataset.sort ?? c.textContent.trim()) : ''; })
"""


def _order(keys: list[str]) -> list[tuple[int, Any]]:
    """The order the site promises: numbers (numerically), then text, then empty cells."""
    out: list[tuple[int, Any]] = []
    for raw in keys:
        if raw in ("", "-"):
            out.append((2, ""))
            continue
        try:
            out.append((0, float(raw)))
        except ValueError:
            out.append((1, raw.lower()))
    return out


def test_every_column_sorts_by_keyboard_with_its_sort_state(site: Path, server: str) -> None:
    """Enter on a focused header sorts ascending, again descending (numbers as numbers, the
    'vs reference' column by its difference, empty cells last), and aria-sort says so."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=LAUNCH_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.goto(f"{server}/benchmark-demo.html")
        headers = page.locator("table.sortable.results").first.locator("thead th")
        count = headers.count()
        assert count >= 5
        for column in range(count):
            header = headers.nth(column)
            for direction in ("ascending", "descending"):
                header.focus()
                page.keyboard.press("Enter")
                assert header.get_attribute("aria-sort") == direction
                order = _order(page.evaluate(SORT_KEYS_JS, column))
                filled = [k for k in order if k[0] < 2]
                expected = sorted(filled, reverse=direction == "descending")
                expected = sorted(expected, key=lambda k: k[0])  # stable: kinds stay in order
                assert filled == expected, (column, direction, order)
                assert all(k[0] == 2 for k in order[len(filled) :]), "empty cells sort last"
        others = [headers.nth(i).get_attribute("aria-sort") for i in range(count - 1)]
        assert others == ["none"] * (count - 1)
        browser.close()


def test_a_regime_link_shows_its_regime_in_the_selectors_anchor_format(
    site: Path, server: str
) -> None:
    """Index links and the selector share one anchor (#regime=ID); a link shows its regime."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=LAUNCH_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.goto(f"{server}/benchmark-demo.html")
        links = page.locator("p.regime-index a")
        assert links.count() >= 2
        href = str(links.nth(1).get_attribute("href"))
        assert href.startswith("#regime=")
        links.nth(1).click()
        wanted = href.removeprefix("#regime=")
        shown = page.evaluate(
            "() => Array.from(document.querySelectorAll('section.regime'))"
            ".filter((s) => !s.hidden).map((s) => s.dataset.regime)"
        )
        assert shown and set(shown) == {wanted}
        assert page.locator("select.regime-select").first.input_value() == wanted
        browser.close()
