"""Entries under different HPE protocols are never ranked together on the site.

A store holds two verified demo entries under fewtrans-reference (committed: full
fine-tuning, the benchmark's reference adapter, and mean-centroid on the random-init
backbone) and two under fewtrans-paper (the shared mean-centroid runs, added here with
``leaderboard add --sample 1``). The benchmark page must rank each protocol's entries in its
own section (ranks restart at 1), compare with the reference only within a protocol, and
every page that lists an entry must name its protocol.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
from pathlib import Path

import pytest

from fewtrans_board.hpe.protocols import HPE_PROTOCOLS
from fewtrans_board.leaderboard.store import LeaderboardStore
from fewtrans_board.leaderboard.sub_benchmarks import SUB_BENCHMARKS
from fewtrans_board.registry.manager import get_plugin_manager
from fewtrans_board.results.load import find_runs, load_run
from fewtrans_board.stats.bootstrap import holm_paired
from fewtrans_board.website.data import build_site_data, protocol_section
from fewtrans_board.website.model import MethodView

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = (
    "finetune--demo-cnn",
    "mean-centroid--demo-cnn-random",
)  # committed, fewtrans-reference
PAPER = ("mc-pretrained", "mc-random")  # added here, fewtrans-paper
META = """[submission]
id = "{id}"
method = "{method}"
model = "{model}"
adapter = "mean-centroid"
benchmark = "demo"
hpe_protocol = "fewtrans-paper"
authors = ["Test"]
hardware = "CPU"
plugins = ["fewtrans-board==0.1.0"]
"""


@pytest.fixture(scope="module")
def two_protocols(
    tmp_path_factory: pytest.TempPathFactory, mean_centroid_runs: dict[str, Path]
) -> tuple[Path, Path]:
    """The store (two entries per protocol on ``demo``) and its built site."""
    from click.testing import CliRunner

    from fewtrans_board.cli import make_cli

    work = tmp_path_factory.mktemp("protocols")
    store = work / "leaderboard"
    shutil.copytree(ROOT / "leaderboard" / "manifests", store / "manifests")
    for ident in REFERENCE:
        for part in ("submissions", "results"):
            shutil.copytree(ROOT / "leaderboard" / part / ident, store / part / ident)
    cli = make_cli(get_plugin_manager(entry_points=False))

    def run(*args: str) -> None:
        result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
        assert result.exit_code == 0, result.output

    for ident, model, method in (
        ("mc-pretrained", "demo-cnn.digits", "Mean centroid"),
        ("mc-random", "demo-cnn.random", "Mean centroid, random"),
    ):
        (work / f"{ident}.toml").write_text(META.format(id=ident, method=method, model=model))
        bundle = str(work / f"{ident}.zip")
        run("submission", "pack", str(mean_centroid_runs[model]), "--meta", str(work / f"{ident}.toml"), "--out", bundle)  # fmt: skip
        run("leaderboard", "add", bundle, "--leaderboard", str(store), "--sample", "1", "--threads", "1")  # fmt: skip
    run("site", "build", "--leaderboard", str(store), "--out", str(work / "_site"))
    return store, work / "_site"


def _hpe(store: Path, ident: str):  # type: ignore[no-untyped-def]
    return load_run(find_runs([store / "results" / ident])[0]).aggregations()["hpe"]


def _section(page: str, protocol: str) -> str:
    """The HTML of one protocol's section of a benchmark page."""
    start = page.index(f'<section class="protocol" id="protocol-{protocol}"')
    following = page.find('<section class="protocol"', start + 1)
    return page[start : following if following != -1 else len(page)]


def _ranked(html: str) -> list[tuple[int, str]]:
    """``(rank, method id)`` of the first table's rows."""
    table = html.split("</table>")[0]
    return [
        (int(rank), ident)
        for rank, ident in re.findall(
            r'<td class="num" data-sort="(\d+)">.*?</td>\s*<td[^>]*><a href="method-([^"]+)\.html">',
            table,
            flags=re.S,
        )
    ]


def _flags(html: str) -> dict[str, tuple[str, float, str]]:
    """Method id -> (verdict, difference, p as printed) from the first table's flags."""
    table = html.split("</table>")[0]
    out = {}
    for row in table.split("<tr")[2:]:
        ident = re.search(r'<a href="method-([^"]+)\.html">', row)
        flag = re.search(
            r'<span class="flag (\w+)"[^>]*>\S+ ([+-]\d+\.\d+)</span> <span class="pm">p=([^,]+),',
            row,
        )
        if ident and flag:
            out[ident.group(1)] = (flag.group(1), float(flag.group(2)), flag.group(3))
    return out


def test_each_protocol_is_ranked_in_its_own_section(two_protocols: tuple[Path, Path]) -> None:
    store, site = two_protocols
    data = build_site_data(LeaderboardStore(store))
    view = next(v for v in data.benchmarks if v.benchmark.name == "demo")
    assert [s.protocol for s in view.sections] == ["fewtrans-paper", "fewtrans-reference"]
    for section, idents in zip(view.sections, (PAPER, REFERENCE), strict=True):
        assert {m.id for m in section.methods} == set(idents)
        for aggregation in ("hpe", "vote", "oracle"):
            rows = section.tables[aggregation]
            assert {r.method.id for r in rows} == set(idents)
            assert sorted(r.rank[0] for r in rows) == [1, 2]  # ranks restart at 1
            assert all(1 <= r.rank[1] <= r.rank[2] <= 2 for r in rows)
    paper, reference = view.sections
    # The reference adapter (finetune) has an entry under fewtrans-reference only.
    assert paper.reference is None
    assert reference.reference is not None and reference.reference.id == "finetune--demo-cnn"
    assert all(r.versus_reference is None for r in paper.tables["hpe"])
    compared = {r.method.id: r.versus_reference for r in reference.tables["hpe"]}
    assert compared["finetune--demo-cnn"] is None
    flagged = compared["mean-centroid--demo-cnn-random"]
    assert flagged is not None
    # Holm over the one other fewtrans-reference entry: the plain paired p-value.
    ref, other = _hpe(store, "finetune--demo-cnn"), _hpe(store, "mean-centroid--demo-cnn-random")
    assert flagged.p_holm == pytest.approx(holm_paired({"x": other}, ref)["x"])
    assert flagged.difference == pytest.approx(other.mean() - ref.mean())

    page = (site / "benchmark-demo.html").read_text()
    assert page.count('<section class="protocol"') == 2
    for section, idents in zip(view.sections, (PAPER, REFERENCE), strict=True):
        html = _section(page, section.protocol)
        assert f"<h2>HPE protocol: {section.protocol}</h2>" in html
        assert HPE_PROTOCOLS[section.protocol].description in html
        ranked = _ranked(html)
        assert sorted(r for r, _ in ranked) == [1, 2]
        assert {i for _, i in ranked} == set(idents)
        assert {i: r for r, i in ranked} == {r.method.id: r.rank[0] for r in section.tables["hpe"]}
        others = set(PAPER + REFERENCE) - set(idents)
        assert not any(f'href="method-{i}.html"' in html for i in others)
    # The first section keeps the plain anchors; the other's are suffixed with its protocol.
    assert 'id="table-hpe"' in _section(page, "fewtrans-paper")
    assert 'id="table-hpe-fewtrans-reference"' in _section(page, "fewtrans-reference")
    # Significance: none under fewtrans-paper (no finetune entry there), the
    # fewtrans-reference entry against the fewtrans-reference fine-tuning.
    paper_html = _section(page, "fewtrans-paper")
    assert _flags(paper_html) == {} and "none submitted under this protocol" in paper_html
    flags = _flags(_section(page, "fewtrans-reference"))
    assert set(flags) == {"mean-centroid--demo-cnn-random"}
    verdict, difference, p = flags["mean-centroid--demo-cnn-random"]
    assert verdict == flagged.verdict.replace(".", "")
    assert difference == round(flagged.difference, 2) and p == f"{flagged.p_holm:.2g}"
    assert ">reference</td>" in _section(page, "fewtrans-reference")


def test_the_protocol_is_named_wherever_entries_are_listed(
    two_protocols: tuple[Path, Path],
) -> None:
    _, site = two_protocols
    protocol_of = dict.fromkeys(PAPER, "fewtrans-paper") | dict.fromkeys(
        REFERENCE, "fewtrans-reference"
    )
    benchmark = (site / "benchmark-demo.html").read_text()
    dataset = (site / "dataset-digits.html").read_text()
    for ident, protocol in protocol_of.items():
        link = re.compile(rf'<a href="method-{ident}\.html(?:#\w+)?">([^<\d][^<]*)</a>')
        labels = link.findall(dataset)
        assert labels and all(label.endswith(f" · {protocol}") for label in labels), ident
        # The benchmark page lists an entry only in its protocol's section, whose heading names
        # the protocol, so its rows carry the short label (method and model).
        own = _section(benchmark, protocol)
        assert f"<h2>HPE protocol: {protocol}</h2>" in own and link.findall(own), ident
        for other in set(protocol_of.values()) - {protocol}:
            assert not link.findall(_section(benchmark, other)), (ident, other)
        method = (site / f"method-{ident}.html").read_text()
        assert re.search(rf"<h1>[^<]+ · {protocol} <span", method), ident
        description = HPE_PROTOCOLS[protocol].description
        assert f"<th>HPE protocol</th><td>{protocol}: {description}</td>" in method
        # the dataset page's protocol column, next to the entry
        row = next(r for r in dataset.split("<tr>") if f"method-{ident}.html" in r)
        assert f">{protocol}</span></td>" in row
    # The index: one row, one leader, per protocol of the demo benchmark.
    index = (site / "index.html").read_text()
    rows = [r for r in re.split(r"<tr\b", index) if 'href="benchmark-demo.html' in r]
    assert len(rows) == 2
    leaders = {}
    for row in rows:
        protocol = re.search(r'<span class="protocol"[^>]*>([^<]+)</span>', row)
        leader = re.search(r'<a href="method-([^"]+)\.html">([^<]+)</a>', row)
        assert protocol and leader  # the row's protocol column names it, not the label
        leaders[protocol.group(1)] = leader.group(1)
    assert leaders == {
        "fewtrans-paper": "mc-pretrained",
        "fewtrans-reference": "mean-centroid--demo-cnn-random",
    }


def _as(method: MethodView, protocol: str, **changes: object) -> MethodView:
    """A copy of an entry as if submitted under another protocol (same runs)."""
    ident = f"{method.id}--{protocol}"
    meta = dataclasses.replace(method.meta, id=ident, hpe_protocol=protocol)
    return dataclasses.replace(method, id=ident, meta=meta, **changes)  # type: ignore[arg-type]


def test_unverified_and_transductive_entries_stay_in_their_protocol(
    two_protocols: tuple[Path, Path],
) -> None:
    store, _ = two_protocols
    data = build_site_data(LeaderboardStore(store))
    view = next(v for v in data.benchmarks if v.benchmark.name == "demo")
    paper = next(m for m in data.methods if m.id == "mc-pretrained")
    unverified = _as(paper, "fewtrans-reference", status="validated")
    listed = [*data.methods, unverified]
    benchmark = SUB_BENCHMARKS["demo"]
    by_reference = protocol_section(benchmark, "fewtrans-reference", listed, view.datasets)
    by_paper = protocol_section(benchmark, "fewtrans-paper", listed, view.datasets)
    assert [r.method.id for r in by_reference.unverified] == [unverified.id]
    assert by_paper.unverified == []
    assert unverified.id not in {m.id for m in by_reference.methods}
    assert by_reference.description == HPE_PROTOCOLS["fewtrans-reference"].description


def test_clip_settings_pair_a_method_only_under_one_protocol() -> None:
    from fewtrans_board.website.clip_settings import compare

    data = build_site_data(LeaderboardStore(ROOT / "leaderboard"))
    views = {v.benchmark.name: v for v in data.benchmarks}
    original = views["demo-clip-partially-transductive"]
    inductive = views["demo-clip-inductive"]
    assert {m.protocol for m in original.methods + inductive.methods} == {"published"}
    coop = {v.benchmark.name: next(m for m in v.methods if m.meta.adapter == "coop") for v in (original, inductive)}  # fmt: skip
    taskres = next(m for m in original.methods if m.meta.adapter == "taskres")
    # CoOp also under "single" in both settings: a second pair, ranked among "single" only.
    original.methods.append(_as(coop[original.benchmark.name], "single"))
    inductive.methods.append(_as(coop[inductive.benchmark.name], "single"))
    # TaskRes under "fewtrans-paper" in one setting only: never paired across protocols.
    original.methods.append(_as(taskres, "fewtrans-paper"))
    cmp = compare(original, inductive)
    keys = {p.key: p for p in cmp.pairs}
    assert "coop on demo-clip.digits · published" in keys
    assert "coop on demo-clip.digits · single" in keys
    assert not any(p.protocol == "fewtrans-paper" for p in cmp.pairs)
    for pair in cmp.pairs:
        assert pair.original.method.protocol == pair.inductive.method.protocol == pair.protocol
        assert pair.key == f"{pair.name} · {pair.protocol}"
    single = keys["coop on demo-clip.digits · single"]
    assert (single.rank_original, single.rank_inductive) == (1, 1)
    published = [p for p in cmp.pairs if p.protocol == "published"]
    assert sorted(p.rank_inductive for p in published) == list(range(1, len(published) + 1))
    assert all(keys[a].protocol == keys[b].protocol for a, b in cmp.flips)
