"""Figures that say what they show: point labels by their own points (or joined to them by a
leader line), dot-and-CI plots whose axis says where it starts and whose names are never cut,
and the index's build date and changelog read from the store (never from a clock).

The geometry is checked from the SVG the code writes (attributes parsed back, distances and
overlaps computed here); ``tests/test_site_browser.py`` measures the same in Chromium.
"""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from fewtrans_board.figures.accuracy import ci_dots
from fewtrans_board.figures.labels import (
    RINGS,
    Placement,
    boxes_overlap,
    place_labels,
    segment_hits_box,
)
from fewtrans_board.figures.text import FONT_PX, LINE, text_box, text_width, wrap_text
from fewtrans_board.website.changelog import BuildDateError, build_date, changelog
from fewtrans_board.website.clip_settings import scatter

SVG = "{http://www.w3.org/2000/svg}"
FRAME = (50.0, 20.0, 390.0, 360.0)
RADIUS, GAP = 5.0, 3.0
TOUCH = RADIUS + GAP + 0.5
"""A label this close to its point touches its marker (the placement's own rule)."""
FARTHEST = RADIUS + GAP + RINGS * LINE * FONT_PX + 1.0
"""No label goes farther from its point than the outermost ring."""


def _distance(x: float, y: float, box: tuple[float, float, float, float]) -> float:
    """Point-to-box distance, written independently of the module's."""
    nearest_x = min(max(x, box[0]), box[2])
    nearest_y = min(max(y, box[1]), box[3])
    return math.hypot(x - nearest_x, y - nearest_y)


def _marker(x: float, y: float) -> tuple[float, float, float, float]:
    return (x - RADIUS, y - RADIUS, x + RADIUS, y + RADIUS)


def check_placements(
    points: list[tuple[float, float]], placements: list[Placement], frame: Any = FRAME
) -> None:
    """Inside the frame, no label over another label, distance bounded, a leader line exactly
    when moved (from the marker's edge to the label's box); and unless the placement says it
    found no free position, neither the label nor its leader over another marker or label."""
    for i, ((x, y), p) in enumerate(zip(points, placements, strict=True)):
        box = p.box
        assert frame[0] - 1e-6 <= box[0] and box[2] <= frame[2] + 1e-6
        assert frame[1] - 1e-6 <= box[1] and box[3] <= frame[3] + 1e-6
        distance = _distance(x, y, box)
        assert distance <= FARTHEST, (i, distance)
        assert distance >= RADIUS, (i, "a label over its own marker")
        if distance <= TOUCH:
            assert p.leader is None, (i, distance)
        else:
            assert p.leader is not None, (i, distance)
            x1, y1, x2, y2 = p.leader
            assert math.hypot(x1 - x, y1 - y) == pytest.approx(RADIUS, abs=1e-6)
            assert _distance(x2, y2, box) == pytest.approx(0.0, abs=1e-6)
        # The text drawn at (x, y, anchor) covers the box the placement reserved.
        assert text_box(p.x, p.y, p.text, p.anchor) == pytest.approx(box, abs=1e-6)
        for j, other in enumerate(placements):
            if j != i:
                assert not boxes_overlap(box, other.box), (i, "overlaps label", j)
        if p.overlaps:
            continue
        for j, (ox, oy) in enumerate(points):
            if j != i:
                assert not boxes_overlap(box, _marker(ox, oy)), (i, "covers marker", j)
        if p.leader is not None:  # a free position's leader crosses no label and no marker
            for j, (other, (ox, oy)) in enumerate(zip(placements, points, strict=True)):
                if j != i:
                    assert not segment_hits_box(p.leader, other.box), (i, "leader crosses", j)
                    assert not segment_hits_box(p.leader, _marker(ox, oy)), (i, "via marker", j)


def cluster(seed: int, spread: float, most: int, longest: int) -> tuple[list[Any], list[str]]:
    """A seeded cloud of 3 to ``most`` points and labels of 10 to 9 + ``longest`` characters."""
    rng = np.random.default_rng(seed)
    count = int(rng.integers(3, most + 1))
    centre = rng.uniform([120, 80], [320, 300])
    cloud = centre + rng.normal(0, spread, size=(count, 2))
    points = [(float(np.clip(x, 60, 380)), float(np.clip(y, 30, 350))) for x, y in cloud.tolist()]
    texts = [f"method {k} " + "x" * int(rng.integers(1, longest + 1)) for k in range(count)]
    return points, texts


def test_lone_points_get_touching_labels_without_leaders() -> None:
    points = [(100.0, 100.0), (300.0, 300.0), (200.0, 50.0)]
    placements = place_labels(points, ["A", "CoOp", "TaskRes"], FRAME, radius=RADIUS, gap=GAP)
    check_placements(points, placements)
    assert all(not p.moved and not p.overlaps for p in placements)
    # The first choice is to the right of the point, vertically centred on it.
    assert placements[0].anchor == "start" and placements[0].x == pytest.approx(100 + RADIUS + GAP)


def test_a_label_at_the_frames_edge_goes_to_the_other_side_still_touching() -> None:
    points = [(385.0, 200.0)]
    (placement,) = place_labels(points, ["CLIP-LoRA"], FRAME, radius=RADIUS, gap=GAP)
    check_placements(points, [placement])
    assert placement.anchor == "end" and not placement.moved


def test_the_issue_case_a_label_is_never_left_under_a_neighbours() -> None:
    """PromptSRC's label ended ~10 px below its marker, under CLIP-LoRA's (issue 40)."""
    points = [(240.0, 200.0), (244.0, 211.0), (236.0, 189.0), (250.0, 200.0)]
    texts = ["CLIP-LoRA on ViT-B/16", "PromptSRC on ViT-B/16", "CoOp on ViT-B/16", "Tip-Adapter"]
    placements = place_labels(points, texts, FRAME, radius=RADIUS, gap=GAP)
    check_placements(points, placements)
    assert not any(p.overlaps for p in placements)
    assert any(p.moved for p in placements)  # crowded: some had to move, with a leader


@pytest.mark.parametrize("seed", range(12))
def test_random_clusters_keep_every_rule(seed: int) -> None:
    points, texts = cluster(seed, spread=45, most=8, longest=7)
    placements = place_labels(points, texts, FRAME, radius=RADIUS, gap=GAP)
    assert not any(p.overlaps for p in placements), "room enough in a 340 px frame"
    check_placements(points, placements)


@pytest.mark.parametrize("seed", range(6))
def test_crowded_clusters_never_overprint_labels(seed: int) -> None:
    """12 long labels within ~25 px: some leaders may have to cross, no label covers one."""
    points, texts = cluster(seed, spread=25, most=12, longest=13)
    placements = place_labels(points, texts, FRAME, radius=RADIUS, gap=GAP)
    check_placements(points, placements)


def test_mismatched_labels_are_refused() -> None:
    with pytest.raises(ValueError, match="2 points but 1 labels"):
        place_labels([(1.0, 1.0), (2.0, 2.0)], ["a"], FRAME)


def _svg(markup: str) -> ET.Element:
    return ET.fromstring(str(markup))


def labels_by_point(svg: ET.Element) -> list[tuple[float, float, float, Any, Any]]:
    """``(centre x, centre y, radius, label box, leader or None)`` of each labelled point,
    read back from the SVG (the text box by the estimated width model)."""
    markers = {c.get("data-point"): c for c in svg.iter(f"{SVG}circle") if c.get("data-point")}
    leaders = {ln.get("data-point"): ln for ln in svg.iter(f"{SVG}line") if ln.get("data-point")}
    out = []
    for text in svg.iter(f"{SVG}text"):
        if "point-label" not in text.get("class", "").split():
            continue
        marker = markers[text.get("data-point")]
        content = "".join(text.itertext())
        size = float(text.get("font-size") or FONT_PX)
        box = text_box(
            float(text.get("x", 0)),
            float(text.get("y", 0)),
            content,
            text.get("text-anchor", "start"),
            size,
        )
        line = leaders.get(text.get("data-point"))
        leader = (
            None if line is None else tuple(float(line.get(k, 0)) for k in ("x1", "y1", "x2", "y2"))
        )
        out.append(
            (
                float(marker.get("cx", 0)),
                float(marker.get("cy", 0)),
                float(marker.get("r", 0)),
                box,
                leader,
            )
        )
    return out


def test_the_settings_scatter_labels_each_point_by_itself_or_by_a_leader() -> None:
    """Red team: the old scatter wrote labels with no tie to their points (and moved them a
    line down, detached); every label now touches its marker or a line joins them."""
    # The paper's reported pairs (inductive, original): with the old placement PromptSRC's
    # label ended 33 px from its marker, no line joining them.
    points = [("CoOp", 15.2, 71.5), ("CLIP-LoRA", 19.2, 75.1), ("PromptSRC", 20.2, 74.9)]
    points += [("SEPRES", 55.9, 75.6), ("Zero-shot CLIP", 17.0, 73.0)]
    svg = _svg(scatter(points))
    found = labels_by_point(svg)
    assert len(found) == len(points)
    for x, y, r, box, leader in found:
        distance = _distance(x, y, box)
        if leader is None:
            assert distance <= r + GAP + 0.5, (x, y, box)
        else:
            assert math.hypot(leader[0] - x, leader[1] - y) == pytest.approx(r, abs=0.1)
            assert _distance(leader[2], leader[3], box) <= 0.1
    boxes = [f[3] for f in found]
    for i, a in enumerate(boxes):
        assert not any(boxes_overlap(a, b) for b in boxes[i + 1 :])


def test_wrap_text_breaks_at_spaces_and_shortens_only_what_cannot_fit() -> None:
    label = "SimpleShot (example plugin) (demo-cnn.digits) · fewtrans-reference"
    lines = wrap_text(label, 150)
    assert " ".join(lines) == label and len(lines) > 1
    assert all(text_width(line) <= 150 for line in lines)
    short = wrap_text(label, 60, max_lines=2)
    assert len(short) == 2 and short[-1].endswith("…") and " ".join(short) != label
    assert wrap_text("finetune", 200) == ["finetune"]


def _ticks(svg: ET.Element) -> dict[float, float]:
    """Grid value -> x pixel, read from the tick labels under the grid lines."""
    texts = [t for t in svg.iter(f"{SVG}text") if t.get("class") == "tick"]
    grid = [ln for ln in svg.iter(f"{SVG}line") if ln.get("stroke") == "#eee"]
    assert len(texts) == len(grid) >= 2
    return {float(t.text or ""): float(ln.get("x1", 0)) for t, ln in zip(texts, grid, strict=True)}


def test_ci_dots_draw_means_and_intervals_on_an_axis_that_says_where_it_starts() -> None:
    rows = [
        ("Linear probe (demo-cnn.digits) · fewtrans-reference", 62.5, 1.5),
        ("Full fine-tuning (FewTrans recipe, 5 epochs for CPU) (demo-cnn.digits)", 48.25, 2.0),
        ("SimpleShot", 71.0, 0.75),
    ]
    svg = _svg(ci_dots(rows, title="digits"))
    assert not list(svg.iter(f"{SVG}rect")), "no bars: a dot is a position, not a length"
    ticks = _ticks(svg)
    (v0, p0), (v1, p1) = sorted(ticks.items())[:2]
    value_at = lambda px: v0 + (px - p0) * (v1 - v0) / (p1 - p0)  # noqa: E731
    dots = list(svg.iter(f"{SVG}circle"))
    intervals = [ln for ln in svg.iter(f"{SVG}line") if ln.get("stroke-width") == "1.5"]
    assert len(dots) == len(intervals) == 3
    for (_, mean, ci), dot, line in zip(rows, dots, intervals, strict=True):
        assert value_at(float(dot.get("cx", 0))) == pytest.approx(mean, abs=0.06)
        assert value_at(float(line.get("x1", 0))) == pytest.approx(mean - ci, abs=0.06)
        assert value_at(float(line.get("x2", 0))) == pytest.approx(mean + ci, abs=0.06)
    lowest = min(ticks)
    assert 0 < lowest <= 48.25 - 2.0  # the axis starts where the data needs it...
    title = next(t for t in svg.iter(f"{SVG}text") if "axis starts" in "".join(t.itertext()))
    assert f"the axis starts at {lowest:g}" in "".join(title.itertext())  # ...and says so
    # Every name is whole: wrapped over lines, or shortened with the full name as a tooltip.
    names = [
        t
        for t in svg.iter(f"{SVG}text")
        if t.get("class") == "label" and t.get("text-anchor") == "end"
    ]
    shown = " ".join("".join(t.itertext()) for t in names)
    tooltips = [t.text or "" for g in svg.iter(f"{SVG}g") for t in g.iter(f"{SVG}title")]
    for label, _, _ in rows:
        assert label in shown or label in tooltips, label
    assert not any("…" in "".join(t.itertext()) for t in names) or tooltips


def test_a_name_too_long_for_three_lines_keeps_its_full_text_as_a_tooltip() -> None:
    label = "A very long method name " * 8
    svg = _svg(ci_dots([(label.strip(), 50.0, 1.0)], width=300))
    tooltips = [t.text for g in svg.iter(f"{SVG}g") for t in g.iter(f"{SVG}title")]
    assert tooltips == [label.strip()]


# --- build date and changelog -----------------------------------------------------------------


def _entry(ident: str, created: str, **fields: Any) -> Any:
    run = SimpleNamespace(run=SimpleNamespace(meta={"created_at": created}))
    meta = SimpleNamespace(benchmark="demo")
    return SimpleNamespace(
        id=ident,
        label=f"{ident} · p",
        meta=meta,
        runs={"digits": run},
        status=fields.get("status", "verified"),
        superseded_by=fields.get("superseded_by"),
        verification=fields.get("verification"),
    )


def test_the_changelog_lists_additions_supersessions_and_reverifications_newest_first() -> None:
    old = _entry("old", "2026-11-01T10:00:00Z", superseded_by="new")
    new = _entry("new", "2026-12-02T09:30:00Z")
    rerun = {"passed": True, "date": "2026-12-05T08:00:00Z", "datasets": [
        {"passed": True, "mode": "exact", "rerun_episodes": 3, "episodes": 600}]}  # fmt: skip
    checked = _entry("checked", "2026-10-05T00:00:00Z", verification=rerun)
    earlier = {
        "passed": True,
        "episodes": [{"passed": True}],
        "threshold": 0.9,
        "date": "2026-12-06",
    }
    legacy = _entry("legacy", "2026-10-01T00:00:00Z", verification=earlier)
    local = _entry("local", "2026-12-31T00:00:00Z", status="local")
    changes = changelog([old, new, checked, legacy, local])
    assert [(c.date, c.kind, c.entry.id) for c in changes] == [
        ("2026-12-05", "re-verified", "checked"),
        ("2026-12-02", "added", "new"),
        ("2026-12-02", "superseded", "old"),
        ("2026-11-01", "added", "old"),
        ("2026-10-05", "added", "checked"),
        ("2026-10-01", "added", "legacy"),  # the earlier check is never called re-verified
    ]
    assert (
        changes[0].detail == "3 of 600 episodes re-run, exact" and changes[2].detail == "by new · p"
    )


def test_the_build_date_is_explicit_then_source_date_epoch_then_the_stores() -> None:
    changes = changelog([_entry("a", "2026-12-03T16:37:07Z"), _entry("b", "2026-11-30T00:00:00Z")])
    assert build_date(changes, environ={}).date == "2026-12-03"
    assert build_date(changes, environ={}).source == "the store's latest change"
    # 1700000000 s after the epoch is 2023-11-14 22:13:20 UTC.
    epoch = build_date(changes, environ={"SOURCE_DATE_EPOCH": "1700000000"})
    assert (epoch.date, epoch.source) == ("2023-11-14", "SOURCE_DATE_EPOCH")
    given = build_date(changes, "2027-01-02", environ={"SOURCE_DATE_EPOCH": "1700000000"})
    assert (given.date, given.source) == ("2027-01-02", "--build-date")
    assert build_date([], environ={}).date == ""
    with pytest.raises(BuildDateError, match="YYYY-MM-DD"):
        build_date(changes, "yesterday", environ={})
    with pytest.raises(BuildDateError, match="SOURCE_DATE_EPOCH"):
        build_date(changes, environ={"SOURCE_DATE_EPOCH": "soon"})


def test_the_index_shows_the_stores_date_and_its_changelog(committed_site: Path) -> None:
    """The committed site says the latest ``created_at`` of the store's runs, from the store."""
    import pyarrow.parquet as pq

    store = Path(__file__).resolve().parents[1] / "leaderboard" / "results"
    days = set()
    for shard in store.rglob("*.parquet"):
        meta = pq.ParquetFile(shard).metadata.metadata or {}  # split shards: footer only
        days |= set(re.findall(rb'"created_at": ?"(\d{4}-\d\d-\d\d)', b"".join(meta.values())))
    assert days
    latest = max(days).decode()
    index = (committed_site / "index.html").read_text(encoding="utf-8")
    assert f"Data as of {latest} (the store&#39;s latest change)." in index
    section = index[index.index('<section id="changes">') :].split("</section>", 1)[0]
    rows = re.findall(r'<tr><td class="num">(\d{4}-\d\d-\d\d)</td><td>([a-z-]+)</td>', section)
    assert rows and rows[0][0] == latest
    assert [d for d, _ in rows] == sorted((d for d, _ in rows), reverse=True)
    assert {kind for _, kind in rows} <= {"added", "superseded", "re-verified"}
    method = next(committed_site.glob("method-*.html")).read_text(encoding="utf-8")
    assert f"Data as of {latest}" in method  # every page's footer


def test_site_build_refuses_a_bad_build_date_before_writing(tmp_path: Path, invoke: Any) -> None:
    out = tmp_path / "site"
    result = invoke(["site", "build", "--out", str(out), "--build-date", "2026-13-45"])
    assert result.exit_code == 1 and "is not a date; give it as YYYY-MM-DD" in result.output
    assert not out.exists()
