"""Cost and stability: the sampling lottery against known answers, the Pareto front against
its definition, nice ticks, every plot label inside its SVG, and trainable parameter counts
recorded by ``evaluate`` against hand counts."""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from fewtrans_board.figures.axes import log_ticks, nice_axis, nice_ticks, ticks_with_text
from fewtrans_board.figures.text import FONT_PX, fit_text, text_box, text_width
from fewtrans_board.website.cost import pareto_front
from fewtrans_board.website.lottery import lottery
from tests.conftest import shared_folder

ROOT = Path(__file__).resolve().parents[1]
VARIED_DIGITS = ROOT / "leaderboard" / "manifests" / "fewtrans-varied--digits.parquet"
SVG = "{http://www.w3.org/2000/svg}"


# --- the sampling lottery ------------------------------------------------------------------


def three_entries(gap_second: float, gap_third: float) -> np.ndarray:
    """3 entries x 40 episodes: a random first entry, the others shifted down per episode."""
    first = np.random.default_rng(7).uniform(40, 90, size=40)
    return np.stack([first, first - gap_second, first - gap_third])


def test_identical_entries_flip_half_the_time() -> None:
    # The first two are the same entry: every draw ties them, and a tie goes either way.
    points = lottery([three_entries(0.0, 60.0)], resamples=4000)
    assert [p.episodes for p in points] == [5, 10, 20]  # 50 and more: above the 40 stored
    for p in points:
        assert abs(p.p_top1_differs - 0.5) < 0.04
        # Pairs (1, 3) and (2, 3) always agree, (1, 2) half the time: tau = (2 + 0) / 3.
        assert abs(p.kendall_tau - 2 / 3) < 0.03
        assert abs(p.p_order_differs - 0.5) < 0.04


def test_well_separated_entries_never_change_places() -> None:
    points = lottery([three_entries(20.0, 40.0)], resamples=500)
    assert all(
        p.p_top1_differs == 0 and p.kendall_tau == 1 and p.p_order_differs == 0 for p in points
    )


def test_two_entries_flip_as_often_as_the_binomial_says() -> None:
    # The first entry beats the second by 1 point on 24 episodes and loses by 1 on 16: a draw
    # of n episodes ranks the second first when fewer than n/2 drawn episodes favour the
    # first, and half the time when exactly n/2 do (a tie).
    first = np.random.default_rng(3).uniform(40, 90, size=40)
    sign = np.array([1.0] * 24 + [-1.0] * 16)
    second = first - sign
    resamples = 6000
    points = lottery([np.stack([first, second])], (5, 10, 20), resamples=resamples)
    for p in points:
        n = p.episodes
        pmf = [math.comb(n, k) * 0.6**k * 0.4 ** (n - k) for k in range(n + 1)]
        expected = sum(pmf[k] for k in range(n + 1) if 2 * k < n)
        expected += 0.5 * (pmf[n // 2] if n % 2 == 0 else 0.0)
        error = math.sqrt(expected * (1 - expected) / resamples)
        assert abs(p.p_top1_differs - expected) < 4 * error + 1e-9, (n, p, expected)
        assert p.kendall_tau == pytest.approx(1 - 2 * p.p_top1_differs)  # k = 2


def test_pairing_and_columns() -> None:
    # Paired draws: two entries that differ by a constant never swap, however noisy each is;
    # a second column (dataset) is averaged in with the same weight.
    noisy = np.random.default_rng(5).uniform(0, 100, size=(1, 30))
    column = np.concatenate([noisy, noisy - 0.01])
    other = np.stack([np.full(30, 50.0), np.full(30, 50.0)])
    assert all(p.p_top1_differs == 0 for p in lottery([column, other], resamples=300))
    # The smallest column decides which sizes are kept.
    short = np.stack([np.full(12, 1.0), np.full(12, 0.0)])
    assert [p.episodes for p in lottery([column, short], resamples=50)] == [5, 10]


def test_the_lottery_is_seeded() -> None:
    matrix = np.random.default_rng(11).uniform(0, 100, size=(4, 40))
    first = lottery([matrix], resamples=200, seed=1)
    assert lottery([matrix], resamples=200, seed=1) == first
    assert lottery([matrix], resamples=200, seed=2) != first
    # Each size's draws are its own: asking for one size gives the same numbers.
    assert lottery([matrix], (10,), resamples=200, seed=1) == [first[1]]


def test_the_lottery_equals_a_gather_of_the_same_draws() -> None:
    # Oracle: the module's definition with the draws as indices, each entry's values
    # gathered and averaged. Continuous values: no two scores tie, so the counts agree
    # exactly and the mean tau up to rounding.
    rng = np.random.default_rng(21)
    columns = [rng.uniform(0, 100, size=(7, 60)), rng.uniform(0, 100, size=(7, 45))]
    resamples, k = 300, 5
    points = lottery(columns, (5, 20), resamples=resamples, seed=3, top_k=k)
    full = np.mean([c.mean(axis=1) for c in columns], axis=0)
    top = np.argsort(-full)[:k]
    for p in points:
        draw = np.random.default_rng([3, p.episodes])
        scores = np.zeros((resamples, 7))
        for c in columns:
            index = draw.integers(0, c.shape[1], size=(resamples, p.episodes))
            scores += c[:, index].mean(axis=2).T
        order = np.lexsort((draw.random((resamples, 7)), -scores), axis=-1)
        ranks = np.argsort(order, axis=-1)
        pairs = [(i, j) for i in range(k) for j in range(i + 1, k)]
        tau = sum(np.where(ranks[:, top[i]] < ranks[:, top[j]], 1.0, -1.0) for i, j in pairs)
        tau /= len(pairs)
        assert p.p_top1_differs == np.mean(order[:, 0] != top[0])
        assert p.p_order_differs == np.mean(tau < 1.0)
        np.testing.assert_allclose(p.kendall_tau, tau.mean(), rtol=1e-12)


# --- the Pareto front -----------------------------------------------------------------------


def dominated(p: tuple[float, float], q: tuple[float, float]) -> bool:
    """Whether ``q`` dominates ``p``: no costlier, no less accurate, one strictly."""
    return q[0] <= p[0] and q[1] >= p[1] and (q[0] < p[0] or q[1] > p[1])


def test_the_pareto_front_is_what_the_definition_says() -> None:
    rng = np.random.default_rng(0)
    for trial in range(300):
        count = int(rng.integers(1, 12))
        # Small integers, so that equal costs, equal accuracies and duplicates happen.
        points = [(float(rng.integers(1, 6)), float(rng.integers(0, 6))) for _ in range(count)]
        brute = {
            i
            for i, p in enumerate(points)
            if not any(dominated(p, q) for j, q in enumerate(points) if j != i)
        }
        assert set(pareto_front(points)) == brute, (trial, points)
    assert pareto_front([]) == []
    assert pareto_front([(1.0, 5.0), (2.0, 6.0), (3.0, 5.5), (0.5, 1.0)]) == [3, 0, 1]


# --- nice ticks -------------------------------------------------------------------------------


def test_nice_ticks_against_hand_written_expectations() -> None:
    assert nice_ticks(0.493, 6.95) == [0, 2, 4, 6]
    assert [t for _, t in ticks_with_text(0.493, 6.95)] == ["0", "2", "4", "6"]
    assert nice_ticks(85.2, 95.1) == [84, 86, 88, 90, 92, 94]
    assert [t for _, t in ticks_with_text(0, 1)] == ["0", "0.2", "0.4", "0.6", "0.8", "1.0"]
    assert [t for _, t in ticks_with_text(0.012, 0.049)] == ["0.01", "0.02", "0.03", "0.04"]
    assert nice_ticks(0, 100) == [0, 20, 40, 60, 80, 100]
    assert nice_ticks(-0.31, 0.05) == [-0.4, -0.3, -0.2, -0.1, 0.0]
    assert nice_ticks(3.0, 3.0) == [2.4, 2.6, 2.8, 3.0, 3.2, 3.4]  # a unit range around it
    assert nice_axis(0.493, 6.95) == (0, 6.95, [0, 2, 4, 6])
    assert [t for _, t in log_ticks(0.03, 120)] == ["0.1", "1", "10", "100"]
    assert [t for _, t in log_ticks(1.2, 30)] == ["2", "5", "10", "20"]


def test_fit_text_keeps_within_the_width() -> None:
    label = "SimpleShot (example plugin) (demo-cnn.digits) · fewtrans-reference"
    short = fit_text(label, 120)
    assert short.endswith("…") and text_width(short) <= 120 and label.startswith(short[:-1])
    assert fit_text("finetune", 200) == "finetune"


# --- every label of every plot of the site inside its SVG ------------------------------------


@pytest.fixture(scope="module")
def site(committed_site: Path) -> Path:
    return committed_site


def label_box(text: ET.Element, size: float) -> tuple[float, float, float, float]:
    """The estimated extent of a ``<text>`` (the module's width rule), rotation included."""
    x, y = float(text.get("x", 0)), float(text.get("y", 0))
    content = "".join(text.itertext())
    box = text_box(x, y, content, text.get("text-anchor", "start"), size)
    rotate = re.fullmatch(r"rotate\(-90 ([\d.]+) ([\d.]+)\)", text.get("transform", ""))
    if rotate is None:
        assert not text.get("transform"), text.get("transform")
        return box
    cx, cy = float(rotate.group(1)), float(rotate.group(2))
    # rotate(-90) about (cx, cy): (x, y) -> (cx + (y - cy), cy - (x - cx)).
    corners = [(cx + (b - cy), cy - (a - cx)) for a in (box[0], box[2]) for b in (box[1], box[3])]
    xs, ys = [c[0] for c in corners], [c[1] for c in corners]
    return min(xs), min(ys), max(xs), max(ys)


def test_every_label_of_every_plot_lies_inside_its_svg(site: Path) -> None:
    checked, outside = 0, []
    for page in sorted(site.glob("*.html")):
        for markup in re.findall(r"<svg\b.*?</svg>", page.read_text(encoding="utf-8"), re.S):
            svg = ET.fromstring(markup)
            if svg.get("viewBox"):
                _, _, width, height = (float(v) for v in svg.get("viewBox", "").split())
            else:
                width, height = float(svg.get("width", 0)), float(svg.get("height", 0))
            for text in svg.iter(f"{SVG}text"):
                classes = text.get("class", "").split()
                size = float(text.get("font-size") or (10 if "cell" in classes else FONT_PX))
                x0, y0, x1, y1 = label_box(text, size)
                checked += 1
                if x0 < -0.5 or y0 < -0.5 or x1 > width + 0.5 or y1 > height + 0.5:
                    content = "".join(text.itertext())
                    outside.append(
                        f"{page.name}: {content!r} at {(x0, y0, x1, y1)} in {width}x{height}"
                    )
    assert checked > 200  # the benchmark, dataset, method, analyses and settings pages' plots
    assert not outside, "\n".join(outside)


def test_the_pages_show_cost_and_the_lottery(site: Path) -> None:
    page = (site / "benchmark-demo.html").read_text(encoding="utf-8")
    assert 'id="cost"' in page and 'id="lottery"' in page
    assert "sampling lottery" in page and "Pareto front" in page
    # The committed demo entries predate trainable counts and peak memory: "not recorded".
    method = (site / "method-linear-probe--demo-cnn.html").read_text(encoding="utf-8")
    cost = method[method.index('<section id="cost">') :].split("</section>", 1)[0]
    assert cost.count("not recorded") == 2 and "Seconds per episode" in cost
    assert "cpu (x86_64)" in cost and "heads batched" in cost
    # The CLIP entries recorded their peak memory.
    clip = (site / "method-taskres--demo-clip-digits--original.html").read_text(encoding="utf-8")
    clip_cost = clip[clip.index('<section id="cost">') :].split("</section>", 1)[0]
    assert "MiB (rss-high-water)" in clip_cost and clip_cost.count("not recorded") == 1
    lottery_csv = (site / "benchmark-demo--lottery.csv").read_text(encoding="utf-8").splitlines()
    assert [line.split(",")[0] for line in lottery_csv[1:]] == [
        "5", "10", "20", "50", "100", "300", "600"
    ]  # fmt: skip
    # Fewer stored episodes (15 per k-shot run): the larger sizes are left out.
    clip_lottery = (site / "benchmark-demo-clip-inductive--lottery.csv").read_text(encoding="utf-8")
    assert [line.split(",")[0] for line in clip_lottery.splitlines()[1:]] == ["5", "10"]


# --- trainable parameters recorded by evaluate ----------------------------------------------


def counter_total(build: Any) -> int:
    from fewtrans_board.runner.worker.trainable import counting

    with counting() as counter:
        build()
    return counter.total


def test_the_counter_sees_what_optimisers_train() -> None:
    import torch

    from fewtrans_board.blocks.lockstep.adam import StackedOptimiser
    from fewtrans_board.runner.worker.trainable import checked_counts

    weight, bias, frozen = torch.zeros(5, 64), torch.zeros(5), torch.zeros(1000)

    def two_groups() -> None:
        optimiser = torch.optim.SGD([{"params": [weight, bias]}], lr=0.1)
        optimiser.add_param_group({"params": [frozen], "lr": 0.0})  # lr 0: not trained
        torch.optim.Adam([weight], lr=0.1)  # the same tensor again: counted once

    assert counter_total(two_groups) == 5 * 64 + 5
    stacked = torch.zeros(4, 5, 64)

    def rows() -> None:
        StackedOptimiser([stacked], [[0.1, 0.1, 0.0, 0.1]], [3, 2, 2, 1])
        StackedOptimiser([stacked[:2]], [[0.1, 0.1]], [3, 2])  # a retried chunk: same rows

    assert counter_total(rows) == 3 * 5 * 64
    assert torch.optim.Optimizer.add_param_group.__name__ == "add_param_group"  # restored
    assert checked_counts([1, -1, True, "3", 10**14], 5) == [1, None, None, None, None]
    assert checked_counts([1, 2], 3) == [None, None, None]


@pytest.fixture(scope="module")
def counted_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One-episode runs of four built-in adapters on the demo CNN (inline, in this process)."""
    from fewtrans_board.cli import make_cli
    from fewtrans_board.registry.manager import get_plugin_manager

    adapters = ("linear-probe", "cosine-classifier", "mean-centroid", "finetune")

    def build(folder: Path) -> None:
        cli = make_cli(get_plugin_manager(entry_points=False))
        for adapter in adapters:
            args = ["evaluate", "--model", "demo-cnn.digits", "--adapter", adapter]
            args += ["--manifest", str(VARIED_DIGITS), "--out", str(folder / adapter)]
            args += ["--limit", "1", "--quiet", "--device", "cpu"]
            if adapter == "finetune":  # what is counted does not depend on how long it trains
                args += ["--config", "epochs=1"]
            result = CliRunner().invoke(cli, args, catch_exceptions=False)
            assert result.exit_code == 0, result.output

    folder = shared_folder(tmp_path_factory, "trainable-runs", build)
    return {a: folder / a for a in adapters}


def demo_backbone() -> Any:
    """The demo CNN, loaded in this process."""
    from fewtrans_board.registry.lookup import Registry
    from fewtrans_board.registry.manager import get_plugin_manager

    registry = Registry.from_plugin_manager(get_plugin_manager(entry_points=False))
    return registry.load_model("demo-cnn.digits", None, "cpu")


def demo_feature_dim() -> int:
    return int(demo_backbone().feature_dim)


def test_evaluate_records_trainable_parameters(counted_runs: dict[str, Path]) -> None:
    from fewtrans_board.results.load import load_run
    from fewtrans_board.results.summary import summarize

    backbone = demo_backbone()
    dim = int(backbone.feature_dim)
    encoder = sum(p.numel() for p in backbone.image_encoder.parameters())
    counts = {}
    for adapter, path in counted_runs.items():
        run = load_run(path)
        ways = int(run.column("n_way")[0])
        record = run.shard_meta[0]["shard"]["trainable_parameters"]
        assert record["measure"] == "optimised-tensors" and record["episodes"] == 1
        assert len(set(record["max"])) == 1 and record["max"] == record["total"]
        assert len(record["max"]) == run.config_matrix()[1].shape[1]  # one per configuration
        counts[adapter] = (record["max"][0], ways)
        summary = summarize(run)["trainable_parameters"]
        assert summary["per_fit"] == record["max"][0] and summary["shards_counted"] == 1
    linear, ways = counts["linear-probe"]
    assert linear == dim * ways + ways  # weights and biases of the head
    cosine, ways = counts["cosine-classifier"]
    assert cosine == dim * ways  # a cosine head has no bias
    assert counts["mean-centroid"][0] == 0  # training-free
    finetune, ways = counts["finetune"]
    assert finetune == encoder + dim * ways + ways  # the whole backbone and a linear head


@pytest.mark.slow
def test_the_plugin_worker_reports_the_counts(tmp_path: Path) -> None:
    """In a worker run the episode process counts and its reply carries the counts."""
    from fewtrans_board.cli import make_cli
    from fewtrans_board.registry.manager import get_plugin_manager
    from fewtrans_board.results.load import load_run

    args = ["evaluate", "--model", "demo-cnn.digits", "--adapter", "linear-probe"]
    args += ["--manifest", str(VARIED_DIGITS), "--out", str(tmp_path / "run"), "--limit", "1"]
    args += ["--quiet", "--device", "cpu", "--isolation", "process"]
    cli = make_cli(get_plugin_manager(entry_points=False))
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    run = load_run(tmp_path / "run")
    record = run.shard_meta[0]["shard"]["trainable_parameters"]
    ways, dim = int(run.column("n_way")[0]), demo_feature_dim()
    assert set(record["max"]) == {dim * ways + ways}
