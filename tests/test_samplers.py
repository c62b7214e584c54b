"""Samplers: a step-by-step worked example, property tests, hierarchy and CoOp replay."""

from __future__ import annotations

import math
import random
from collections import Counter
from itertools import islice
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fewtrans_board.api.dataset_spec import DatasetSpec
from fewtrans_board.core.errors import FewtransError
from fewtrans_board.datasets.hierarchy import pool_nodes, sampling_graph, spanning_leaves
from fewtrans_board.episodes.protocols import PROTOCOLS
from fewtrans_board.episodes.samplers import (
    ClassPool,
    CoopKShotSampler,
    FixedWayShotSampler,
    VariedWayShotSampler,
)

SIZES = {"a": 6, "b": 8, "c": 5, "d": 7}
BASE_ORDER = ["c", "a", "d", "b"]  # a FewTrans-style random base order, kept as is


def tiny_pool() -> ClassPool:
    classes = {"a": 0, "b": 1, "c": 2, "d": 3}
    return ClassPool(
        classes=tuple(classes[c] for c in BASE_ORDER),
        items=tuple(tuple(f"{c}/img_{i}.png" for i in range(SIZES[c])) for c in BASE_ORDER),
    )


def expected_varied_episodes(n: int, seed: int = 0) -> list[dict[str, object]]:
    """Replay the FewTrans varied sampler by hand: each reference RNG call, in order."""
    rng = np.random.RandomState(seed)
    files = [[f"{c}/img_{i}.png" for i in range(SIZES[c])] for c in BASE_ORDER]
    out = []
    for _ in range(n):
        n_ways = rng.randint(low=2, high=min(15, 4) + 1)  # 1. number of ways
        rel = list(rng.choice([0, 1, 2, 3], n_ways, replace=False))  # 2. classes
        counts = np.array([len(files[r]) for r in rel])
        q = min(10, int((counts // 2).min()))  # balanced query count (no RNG)
        remaining = counts - q
        beta = rng.uniform()  # 3. support-size fraction
        total = min(np.floor(beta * np.minimum(10, remaining) + 1).sum(), 150)
        log_w = rng.uniform(math.log(0.5), math.log(2), size=n_ways)  # 4. class weights
        weights = counts * np.exp(log_w)
        shots = np.floor(weights / weights.sum() * (total - n_ways)).astype("int32") + 1
        shots = np.minimum(np.minimum(shots, 10), remaining)
        support, query = [], []
        for r, k in zip(rel, shots, strict=True):  # 5. one image draw per class
            picked = rng.choice(files[r], k + q, replace=False)
            support.append(tuple(picked[:k]))
            query.append(tuple(picked[k:]))
        out.append({"classes": [BASE_ORDER[r] for r in rel], "support": support, "query": query})
    return out


def test_worked_example_matches_reference_stream() -> None:
    pool = tiny_pool()
    names = "abcd"
    draws = list(islice(VariedWayShotSampler().stream(pool, seed=0), 3))
    for draw, expected in zip(draws, expected_varied_episodes(3), strict=True):
        assert [names[c] for c in draw.classes] == expected["classes"]
        assert list(draw.support) == expected["support"]
        assert list(draw.query) == expected["query"]


def test_fixed_sampler_replays_reference_calls() -> None:
    pool = tiny_pool()
    rng = np.random.RandomState(3)
    eligible = [i for i, c in enumerate(BASE_ORDER) if SIZES[c] >= 1 + 4]
    draw = next(FixedWayShotSampler(ways=2, shots=1, queries=4).stream(pool, seed=3))
    rel = list(rng.choice(eligible, 2, replace=False))
    assert draw.classes == tuple(pool.classes[r] for r in rel)
    for position, r in enumerate(rel):
        picked = rng.choice(list(pool.items[r]), 5, replace=False)
        assert draw.support[position] == tuple(picked[:1])
        assert draw.query[position] == tuple(picked[1:])


def test_fixed_sampler_drops_small_classes_and_errors_when_too_few() -> None:
    pool = tiny_pool()
    draws = islice(FixedWayShotSampler(ways=2, shots=2, queries=5).stream(pool, 0), 30)
    assert {c for d in draws for c in d.classes} == {1, 3}  # only b (8) and d (7) have 7+
    with pytest.raises(FewtransError, match="only 2 classes have at least 7 items"):
        next(FixedWayShotSampler(ways=3, shots=2, queries=5).stream(pool, 0))


def random_pool(sizes: list[int]) -> ClassPool:
    return ClassPool(
        classes=tuple(range(100, 100 + len(sizes))),
        items=tuple(tuple(f"c{c}/{i:04d}.jpg" for i in range(n)) for c, n in enumerate(sizes)),
    )


@settings(max_examples=25, deadline=None)
@given(
    sizes=st.lists(st.integers(min_value=2, max_value=60), min_size=2, max_size=30),
    seed=st.integers(min_value=0, max_value=2**31 - 1),
)
def test_varied_sampler_properties(sizes: list[int], seed: int) -> None:
    pool = random_pool(sizes)
    sampler = VariedWayShotSampler()
    draws = list(islice(sampler.stream(pool, seed), 20))
    again = list(islice(sampler.stream(pool, seed), 20))
    assert draws == again  # deterministic
    for draw in draws:
        ways = len(draw.classes)
        assert 2 <= ways <= min(15, len(sizes)) and len(set(draw.classes)) == ways
        shots = [len(s) for s in draw.support]
        queries = {len(q) for q in draw.query}
        assert len(queries) == 1 and 1 <= queries.pop() <= 10  # balanced, capped
        assert all(1 <= k <= 10 for k in shots) and ways <= sum(shots) <= 150
        for support, query in zip(draw.support, draw.query, strict=True):
            assert not set(support) & set(query)
            assert len(set(support)) == len(support)


def test_varied_sampler_produces_imbalance() -> None:
    pool = random_pool([60] * 20)
    draws = islice(VariedWayShotSampler().stream(pool, 0), 100)
    imbalanced = sum(len({len(s) for s in d.support}) > 1 for d in draws)
    assert imbalanced > 50


def test_meta_dataset_sampler_has_no_per_class_cap() -> None:
    pool = random_pool([400] * 8)
    sampler = PROTOCOLS["meta-dataset"].sampler
    assert isinstance(sampler, VariedWayShotSampler)
    max_shot = max(len(s) for d in islice(sampler.stream(pool, 0), 200) for s in d.support)
    assert max_shot > 10
    assert all(len(d.classes) >= 5 for d in islice(sampler.stream(pool, 0), 50))


@pytest.mark.parametrize("name", ["fewtrans-varied", "fewtrans-fixed", "bscd", "fewtrans-search"])
def test_every_stream_sampler_is_deterministic(name: str) -> None:
    sampler = PROTOCOLS[name].sampler
    pool = random_pool([30, 40, 25, 50, 35, 22])
    first = list(islice(sampler.stream(pool, 7), 10))  # type: ignore[union-attr]
    assert first == list(islice(sampler.stream(pool, 7), 10))  # type: ignore[union-attr]
    assert first != list(islice(sampler.stream(pool, 8), 10))  # type: ignore[union-attr]


# --- hierarchy --------------------------------------------------------------------------

IS_A = [
    ("entity", "animal"),
    ("entity", "thing"),
    ("animal", "dog"),
    ("animal", "cat_family"),
    ("cat_family", "lion"),  # cat_family has one child: collapsed
    ("dog", "d1"),
    ("dog", "d2"),
    ("dog", "d3"),
    ("animal", "a4"),
    ("thing", "t1"),
    ("thing", "t2"),
    ("unrelated", "u1"),
]


def test_sampling_graph_collapses_single_child_nodes() -> None:
    edges = sampling_graph(IS_A, ["d1", "d2", "d3", "lion", "a4", "t1", "t2"])
    parents = {p for p, _ in edges}
    assert "cat_family" not in parents and ("animal", "lion") in edges
    assert "unrelated" not in parents
    spans = spanning_leaves(edges)
    assert spans["animal"] == {"d1", "d2", "d3", "lion", "a4"}
    assert spans["entity"] == {"d1", "d2", "d3", "lion", "a4", "t1", "t2"}


def test_sampling_graph_with_root_keeps_only_descendants() -> None:
    edges = sampling_graph(IS_A, ["d1", "d2", "d3"], root="dog")
    assert {p for p, _ in edges} == {"dog"}


def test_dag_sampling_draws_classes_under_one_node() -> None:
    edges = sampling_graph(IS_A, ["d1", "d2", "d3", "lion", "a4", "t1", "t2"])
    leaves = sorted({"d1", "d2", "d3", "lion", "a4", "t1", "t2"})
    nodes = pool_nodes(edges, leaves)
    # Nodes sorted by id: animal, dog, entity, thing; leaves sorted within each.
    assert nodes[0] == tuple(leaves.index(x) for x in ["a4", "d1", "d2", "d3", "lion"])
    pool = ClassPool(
        classes=tuple(range(len(leaves))),
        items=tuple(tuple(f"{leaf}/{i}" for i in range(6)) for leaf in leaves),
        nodes=nodes,
    )
    spans = [set(n) for n in nodes]
    for draw in islice(VariedWayShotSampler().stream(pool, 0), 50):
        assert any(set(draw.classes) <= span for span in spans)
    # The first node choice is rng.choice over the eligible nodes, as in the reference.
    rng = np.random.RandomState(0)
    first = next(VariedWayShotSampler().stream(pool, 0))
    assert list(first.classes) == list(nodes[rng.choice(list(range(len(nodes))))])


def test_dag_sampling_subsamples_large_nodes_to_max_ways() -> None:
    leaves = [f"l{i:02d}" for i in range(40)]
    edges = [("root", leaf) for leaf in leaves]
    pool = ClassPool(
        classes=tuple(range(40)),
        items=tuple(tuple(f"{leaf}/{i}" for i in range(4)) for leaf in leaves),
        nodes=pool_nodes(edges, leaves),
    )
    draw = next(VariedWayShotSampler().stream(pool, 0))
    assert len(draw.classes) == 15


# --- CoOp k-shot ------------------------------------------------------------------------


def test_coop_kshot_replays_random_sample_per_class() -> None:
    train = random_pool([20, 3, 30])
    test = random_pool([5, 6, 7])
    pairs = list(CoopKShotSampler(shots=(1, 4), seeds=(1, 2)).episodes(train, test))
    assert [info for info, _ in pairs] == [
        {"shots": 1, "seed": 1},
        {"shots": 1, "seed": 2},
        {"shots": 4, "seed": 1},
        {"shots": 4, "seed": 2},
    ]
    _, draw = pairs[2]
    rng = random.Random(1)
    expected = [tuple(rng.sample(list(train.items[0]), 4)), train.items[1]]
    expected.append(tuple(rng.sample(list(train.items[2]), 4)))
    assert list(draw.support) == expected  # class 1 has only 3 items: all kept
    assert draw.query == test.items
    assert Counter(len(s) for s in draw.support) == Counter({4: 2, 3: 1})


def dassl_fewshot(
    train: list[list[object]], image_dir: str, k: int, seed: int, *, by_label: bool = False
) -> dict[int, list[str]]:
    """Dassl's generate_fewshot_dataset, replayed by hand: group the split list by label in
    list order (a dict keeps first-appearance order), then sample class by class.
    ``by_label`` walks the labels in sorted order instead (the old, wrong walk)."""
    tracker: dict[int, list[str]] = {}
    for impath, label, _ in train:
        tracker.setdefault(int(str(label)), []).append(f"{image_dir}/{impath}")
    if by_label:
        tracker = dict(sorted(tracker.items()))
    rng = random.Random(seed)
    return {
        label: rng.sample(items, k) if len(items) >= k else items
        for label, items in tracker.items()
    }


def test_coop_kshot_walks_classes_in_dassl_order_on_an_interleaved_split(
    tmp_path: Path, tiny_dataset_spec: DatasetSpec
) -> None:
    import dataclasses
    import json

    from fewtrans_board.datasets.readers import SplitJsonReader
    from fewtrans_board.episodes.build import build_manifest

    counts = {0: 5, 1: 9, 2: 7}
    # Interleaved as CoOp's split files are: label 2 appears first, then 0, then 1.
    order = [2, 0, 2, 1, 0, 1, 2, 1, 0, 2, 1, 1, 0, 2, 1, 2, 1, 0, 1, 2, 1]
    seen = Counter[int]()
    train = []
    for label in order:
        train.append([f"c{label}/train_{seen[label]}.png", label, f"class {label}"])
        seen[label] += 1
    assert dict(seen) == counts
    test = [[f"c{c}/test_{i}.png", c, f"class {c}"] for c in range(3) for i in range(2)]
    root = tmp_path / "copy"
    for impath, _, _ in train + test:
        path = root / "images" / str(impath)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"not decoded when building")
    (root / "split.json").write_text(json.dumps({"train": train, "val": [], "test": test}))
    spec = dataclasses.replace(
        tiny_dataset_spec,
        name="interleaved",
        reader=SplitJsonReader(split_file="split.json", image_dir="images"),
    )
    assert spec.class_order(root, "train") == (2, 0, 1)
    manifest = build_manifest(spec, root, PROTOCOLS["clip-kshot"])
    info = manifest.meta["episode_info"]
    differs_from_label_order = False
    for episode, pair in zip(manifest.episodes(), info, strict=True):
        expected = dassl_fewshot(train, "images", pair["shots"], pair["seed"])
        assert episode.classes == (0, 1, 2)  # labels stay in class-list order
        support = {c: [i for i, label in episode.support if label == c] for c in range(3)}
        assert support == expected, pair
        label_walk = dassl_fewshot(train, "images", pair["shots"], pair["seed"], by_label=True)
        differs_from_label_order |= label_walk != expected
    assert differs_from_label_order  # the old label-order walk draws other episodes
