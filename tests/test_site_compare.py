"""The pairwise paired-test matrix and the "compare A vs B" pages (issue 40, item 6).

Oracles: scipy's ``ttest_rel`` and ``wilcoxon`` on the same episodes paired by index, Holm
written out by hand, and counts fixed by how the episode data is built.
"""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from scipy import stats

from fewtrans_board.leaderboard.compare import compare_values
from fewtrans_board.website.pairwise import pairwise_downloads, pairwise_matrix

ROOT = Path(__file__).resolve().parents[1]


def hand_holm(pvalues: list[float]) -> list[float]:
    """Holm's step-down adjustment as the textbook states it, in the input order."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    adjusted, running = [0.0] * m, 0.0
    for step, index in enumerate(order):  # the k-th smallest p times (m - k + 1), monotone
        running = max(running, min(1.0, (m - step) * pvalues[index]))
        adjusted[index] = running
    return adjusted


def entry(ident: str, columns: dict[str, tuple[str, list[int], list[float]]]) -> Any:
    """A ranked entry: per column its manifest, episode indices and headline accuracies."""
    runs = {
        key: SimpleNamespace(
            manifest=manifest,
            run=SimpleNamespace(episodes=np.array(episodes)),
            aggregations={"hpe": np.array(values, dtype=np.float64)},
        )
        for key, (manifest, episodes, values) in columns.items()
    }
    return SimpleNamespace(id=ident, name=f"{ident} (model)", status="verified", runs=runs)


# Column x: 16 episodes numbered from 100, column y: 10 from 0. C is the baseline; A is 5
# points better with small noise; B is C plus noise except on 3 x-episodes where it equals C
# exactly; D has the same x manifest but ran y on another manifest (not paired there).
RNG = np.random.default_rng(7)
X, Y = list(range(100, 116)), list(range(10))
C = {"x": 60 + 10 * RNG.random(16), "y": 40 + 10 * RNG.random(10)}
A = {k: v + 5 + RNG.normal(0, 1, len(v)) for k, v in C.items()}
B = {k: v + RNG.normal(0, 3, len(v)) for k, v in C.items()}
B["x"][:3] = C["x"][:3]
D = {k: v + RNG.normal(0.5, 2, len(v)) for k, v in C.items()}


def fixture_view() -> tuple[Any, Any, dict[str, Any]]:
    def both(values: dict[str, np.ndarray], reverse: bool = False) -> dict[str, Any]:
        # B's episodes are stored in reverse order: pairing must go by index, not position.
        cols = {}
        for key, episodes in (("x", X), ("y", Y)):
            pairs = list(zip(episodes, values[key].tolist(), strict=True))
            pairs = pairs[::-1] if reverse else pairs
            cols[key] = (f"{key}.parquet", [e for e, _ in pairs], [v for _, v in pairs])
        return cols

    d_columns = both(D)
    d_columns["y"] = ("y-other.parquet", *d_columns["y"][1:])
    entries = {
        "a": entry("a", both(A)),
        "b": entry("b", both(B, reverse=True)),
        "c": entry("c", both(C)),
        "d": entry("d", d_columns),
    }
    rows = [SimpleNamespace(method=entries[i]) for i in "abcd"]  # the headline order
    section = SimpleNamespace(protocol="p", anchor="", tables={"hpe": rows}, shots={})
    benchmark = SimpleNamespace(name="toy", title="Toy")
    view = SimpleNamespace(datasets=["x", "y"], benchmark=benchmark, sections=[section])
    return view, section, entries


def test_the_matrix_is_scipys_paired_tests_holm_adjusted_over_its_pairs() -> None:
    view, section, _ = fixture_view()
    matrix = pairwise_matrix(view, section, seed=0, resamples=500)
    assert matrix is not None
    values = {"a": A, "b": B, "c": C, "d": D}
    pairs = {(p.a.id, p.b.id): p for p in matrix.pairs}
    assert list(pairs) == [("a", "b"), ("a", "c"), ("a", "d"), ("b", "c"), ("b", "d"), ("c", "d")]
    raw = []
    for (i, j), pair in pairs.items():
        # D's y ran on another manifest: pairs with D are paired on x only.
        columns = ["x"] if "d" in (i, j) else ["x", "y"]
        xa = np.concatenate([values[i][k] for k in columns])
        xb = np.concatenate([values[j][k] for k in columns])
        assert pair.overall["episodes"] == len(xa)
        assert pair.overall["t_p"] == pytest.approx(stats.ttest_rel(xa, xb).pvalue, rel=1e-9)
        expected = np.mean([np.mean(values[i][k] - values[j][k]) for k in columns])
        assert pair.difference == pytest.approx(expected, abs=1e-12)
        low, high = pair.overall["difference_ci"]
        assert low <= pair.difference <= high
        for row, key in zip(pair.columns, columns, strict=True):
            a, b = values[i][key], values[j][key]
            assert row["dataset"] == key and row["episodes"] == len(a)
            assert row["t_p"] == pytest.approx(stats.ttest_rel(a, b).pvalue, rel=1e-9)
            if not np.any(a == b):  # no zero differences: scipy's exact Wilcoxon
                exact = stats.wilcoxon(a, b, method="exact").pvalue
                assert row["wilcoxon_p"] == pytest.approx(exact, rel=1e-9)
        raw.append(stats.ttest_rel(xa, xb).pvalue)
    for pair, adjusted in zip(pairs.values(), hand_holm(raw), strict=True):
        assert pair.tests == 6 and pair.p_holm == pytest.approx(adjusted, rel=1e-9)
    # Designed outcomes: A is far above C on every episode; B ties C on exactly 3 episodes.
    a_c = pairs["a", "c"]
    assert a_c.verdict == "better" and a_c.overall["wins"] == 26 and a_c.overall["losses"] == 0
    b_c = pairs["b", "c"]
    assert b_c.overall["ties"] == 3 and b_c.overall["wins"] + b_c.overall["losses"] == 23
    assert b_c.columns[0]["ties"] == 3 and b_c.columns[1]["ties"] == 0


def test_a_cell_reads_from_its_row_and_mirrors_the_other_triangle() -> None:
    view, section, entries = fixture_view()
    matrix = pairwise_matrix(view, section, seed=0, resamples=200)
    assert matrix is not None
    a, c = entries["a"], entries["c"]
    upper, lower = matrix.cell(a, c), matrix.cell(c, a)
    assert upper is not None and lower is not None and matrix.cell(a, a) is None
    assert upper.pair is lower.pair and upper.difference == -lower.difference > 0
    assert (upper.mark, lower.mark) == ("▲", "▼")
    assert upper.description.startswith("a (model) minus c (model): +")
    assert "significantly better than it" in upper.description
    assert "significantly worse than it" in lower.description
    for pair in matrix.pairs:  # not colour alone: every verdict has its mark and its words
        if pair.verdict == "n.s.":
            cell = matrix.cell(pair.a, pair.b)
            assert cell is not None and cell.mark == "=" and "not significantly" in cell.description


def test_the_download_holds_every_pair_pooled_and_per_column() -> None:
    view, section, _ = fixture_view()
    matrix = pairwise_matrix(view, section, seed=0, resamples=200)
    assert matrix is not None
    download = pairwise_downloads(view, [matrix])["pairwise"]
    assert download.stem == "benchmark-toy--pairwise"
    rows = [dict(zip(download.columns, r, strict=True)) for r in download.rows]
    pooled = [r for r in rows if r["column"] == "all"]
    assert [(r["a"], r["b"]) for r in pooled] == [(p.a.id, p.b.id) for p in matrix.pairs]
    assert [r["t_p_holm_pairs"] for r in pooled] == [p.p_holm for p in matrix.pairs]
    assert len(rows) == 6 + 2 * 3 + 1 * 3  # pooled rows, then 2 columns (1 with D) per pair


def test_a_single_entry_has_no_matrix_and_no_shared_episode_is_refused() -> None:
    view, section, _ = fixture_view()
    section.tables = {"hpe": section.tables["hpe"][:1]}
    assert pairwise_matrix(view, section) is None
    with pytest.raises(Exception, match="share no episode"):
        compare_values({"x": {0: 1.0}}, {"x": {1: 1.0}})


# --- the committed store's site -------------------------------------------------------


class _Links(HTMLParser):
    """The matrix cells' links of a benchmark page, with their accessible text."""

    def __init__(self) -> None:
        super().__init__()
        self.cells: list[dict[str, str]] = []
        self.depth = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = {k: v or "" for k, v in attrs}
        if tag == "table" and "pairwise-matrix" in found.get("class", ""):
            self.depth += 1
        if self.depth and tag == "a" and found.get("href", "").startswith("compare-"):
            self.cells.append(found)

    def handle_endtag(self, tag: str) -> None:
        if tag == "table" and self.depth:
            self.depth -= 1


def test_the_committed_sites_matrix_links_pages_with_scipys_numbers(committed_site: Path) -> None:
    from fewtrans_board.results.load import find_runs, load_run

    page = (committed_site / "benchmark-demo.html").read_text(encoding="utf-8")
    parser = _Links()
    parser.feed(page)
    assert parser.cells, "the demo benchmark shows a matrix"
    for cell in parser.cells:
        assert (committed_site / cell["href"]).is_file(), cell["href"]
        assert re.search(
            r"(significantly|not significantly) (better|worse|different)", cell["aria-label"]
        )
    document = json.loads((committed_site / "benchmark-demo--pairwise.json").read_text())
    pooled = [r for r in document["rows"] if r["column"] == "all"]
    assert len(parser.cells) == 2 * len(pooled)  # both triangles link each pair

    def episodes(ident: str) -> dict[int, float]:
        run = load_run(find_runs([ROOT / "leaderboard" / "results" / ident])[0])
        indices, _, _ = run.config_matrix()
        return dict(zip(indices.tolist(), run.aggregations()["hpe"].tolist(), strict=True))

    # The first pair (the two best entries) against scipy on the stored rows; every pair's
    # adjusted p against Holm by hand over the raw ones.
    first = pooled[0]
    a, b = episodes(first["a"]), episodes(first["b"])
    shared = sorted(set(a) & set(b))
    xa, xb = np.array([a[e] for e in shared]), np.array([b[e] for e in shared])
    assert first["episodes"] == len(shared)
    assert first["t_p"] == pytest.approx(stats.ttest_rel(xa, xb).pvalue, rel=1e-9)
    assert first["difference"] == pytest.approx(float(np.mean(xa - xb)), abs=1e-9)
    raw = [row["t_p"] for row in pooled]
    for row, adjusted in zip(pooled, hand_holm(raw), strict=True):
        assert row["t_p_holm_pairs"] == pytest.approx(adjusted, rel=1e-9)
    # The pair's page states the same difference, raw and adjusted p, wins, ties, losses.
    html = (committed_site / f"compare-{first['a']}-vs-{first['b']}.html").read_text()
    assert f"A − B = {first['difference']:+.2f} points" in html
    assert f">{first['t_p']:.3g}</td>" in html and f">{first['t_p_holm_pairs']:.3g}</td>" in html
    assert (
        f"A better on {first['wins']} · tied on {first['ties']} · B better on {first['losses']}"
        in html
    )
