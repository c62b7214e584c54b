"""Total knowledge loss: MMD against direct numpy, the four weightings against hand-computed
oracles on toy features, the CI, and the benchmark's model rules."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
import pytest

from fewtrans_board.core.errors import FewtransError
from fewtrans_board.leaderboard.sub_benchmarks import SUB_BENCHMARKS
from fewtrans_board.unlearning.similarity import (
    DatasetFeatures,
    mmd_distance,
    mmd_rbf,
    proxy_a_distance,
    wordnet_distance,
)
from fewtrans_board.unlearning.tkl import KnowledgeLoss, knowledge_loss, tkl_under
from fewtrans_board.unlearning.tkl_run import distances
from fewtrans_board.unlearning.zeroshot import ZeroShotResult


def direct_mmd(x: np.ndarray, y: np.ndarray, gamma: float) -> float:
    """The biased MMD^2 written out pair by pair."""

    def k(a: np.ndarray, b: np.ndarray) -> float:
        return math.exp(-gamma * float(((a - b) ** 2).sum()))

    xx = sum(k(a, b) for a in x for b in x) / len(x) ** 2
    yy = sum(k(a, b) for a in y for b in y) / len(y) ** 2
    xy = sum(k(a, b) for a in x for b in y) / (len(x) * len(y))
    return xx + yy - 2 * xy


@pytest.mark.parametrize("gamma", [0.01, 0.5])
def test_mmd_matches_a_direct_numpy_computation(
    gamma: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.RandomState(0)
    x, y = rng.randn(7, 5) * 3, rng.randn(9, 5) * 3 + 1
    assert mmd_rbf(x, y, gamma) == pytest.approx(direct_mmd(x, y, gamma), rel=1e-10)
    monkeypatch.setattr("fewtrans_board.unlearning.similarity.BLOCK", 2)  # blocked sums agree
    assert mmd_rbf(x, y, gamma) == pytest.approx(direct_mmd(x, y, gamma), rel=1e-10)
    assert mmd_rbf(x, x, gamma) == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(FewtransError):
        mmd_rbf(x, rng.randn(3, 4))


def test_proxy_a_distance_is_two_for_separable_and_near_zero_for_identical_data() -> None:
    rng = np.random.RandomState(1)
    a = rng.randn(40, 3)
    assert proxy_a_distance(a, a + 50.0) == pytest.approx(2.0)
    assert proxy_a_distance(a, rng.randn(40, 3)) < 0.6


@dataclass
class ToyTaxonomy:
    """A hand-made tree: depth-based Wu-Palmer similarities."""

    depth: dict[str, int]
    lcs_depth: dict[frozenset[str], int]

    def synset(self, name: str) -> str | None:
        return name if name in self.depth else None

    def similarity(self, a: str, b: str) -> float:
        if a == b:
            return 1.0
        return 2.0 * self.lcs_depth[frozenset((a, b))] / (self.depth[a] + self.depth[b])


TOY = ToyTaxonomy(
    depth={"dog": 4, "cat": 4, "oak": 4, "pine": 4, "rock": 2},
    lcs_depth={
        frozenset(p): d
        for p, d in {
            ("dog", "cat"): 3,
            ("dog", "oak"): 1,
            ("dog", "pine"): 1,
            ("cat", "oak"): 1,
            ("cat", "pine"): 1,
            ("oak", "pine"): 3,
            ("dog", "rock"): 1,
            ("cat", "rock"): 1,
            ("oak", "rock"): 1,
            ("pine", "rock"): 1,
        }.items()
    },
)


def test_wordnet_distance_is_the_mean_pairwise_wu_palmer_gap() -> None:
    got = wordnet_distance(TOY, ["dog", "cat"], ["oak", "pine", "unicorn"])
    # wup(dog, oak) = 2*1/8 = 0.25 for all four pairs -> distance 0.75
    assert got.distance == pytest.approx(0.75) and got.pairs == 4 and got.missing == ("unicorn",)
    same = wordnet_distance(TOY, ["dog"], ["cat"])
    assert same.distance == pytest.approx(1 - 6 / 8)
    with pytest.raises(FewtransError, match="synset"):
        wordnet_distance(TOY, ["unicorn"], ["dog"])


def zs(dataset: str, correct: list[int], classes: int = 4) -> ZeroShotResult:
    return ZeroShotResult(dataset, "test", np.array(correct, dtype=float), 1.0 / classes)


def test_tkl_under_all_four_weightings_equals_a_hand_computed_oracle() -> None:
    # forget set and two validation sets with 2-d "image" features and 1-d "text" features
    forget = DatasetFeatures(
        "f", np.array([[0.0, 0.0], [0.0, 2.0]]), np.array([[0.0], [1.0]]), ["dog", "cat"]
    )
    near = DatasetFeatures(
        "near", np.array([[0.0, 1.0], [0.0, 1.0]]), np.array([[0.5], [0.5]]), ["cat", "dog"]
    )
    far = DatasetFeatures(
        "far", np.array([[10.0, 0.0], [10.0, 2.0]]), np.array([[3.0], [4.0]]), ["oak", "pine"]
    )
    validation = {"near": near, "far": far}
    losses = {
        "near": knowledge_loss(zs("near", [1, 1, 1, 1]), zs("near", [1, 1, 1, 0])),  # drop 25
        "far": knowledge_loss(zs("far", [1, 1, 0, 0, 1]), zs("far", [1, 1, 0, 0, 1])),  # drop 0
    }
    assert losses["near"].drop == pytest.approx(25.0) and losses["far"].drop == 0.0
    # variance of the mean of the paired differences (0, 0, 0, 100): s^2 / n
    assert losses["near"].variance == pytest.approx(np.var([0, 0, 0, 100], ddof=1) / 4)

    g = 0.01
    e = math.exp

    def mmd_by_hand(k_xx: float, k_yy: float, k_xy: float) -> float:
        return k_xx + k_yy - 2 * k_xy

    # image MMD f vs near: |x - y|^2 = 1 for all four cross pairs; within f one pair at 4
    img_near = mmd_by_hand((2 + 2 * e(-4 * g)) / 4, 1.0, e(-g))
    txt_near = mmd_by_hand((2 + 2 * e(-g)) / 4, 1.0, e(-0.25 * g))
    # image f vs far: cross distances 100, 104, 104, 100 (squared)
    img_far = mmd_by_hand(
        (2 + 2 * e(-4 * g)) / 4, (2 + 2 * e(-4 * g)) / 4, (2 * e(-100 * g) + 2 * e(-104 * g)) / 4
    )
    txt_far = mmd_by_hand(
        (2 + 2 * e(-g)) / 4,
        (2 + 2 * e(-g)) / 4,
        (e(-9 * g) + e(-16 * g) + e(-4 * g) + e(-9 * g)) / 4,
    )
    assert mmd_distance(forget, near) == pytest.approx(0.5 * (img_near + txt_near), rel=1e-9)
    assert mmd_distance(forget, far) == pytest.approx(0.5 * (img_far + txt_far), rel=1e-9)

    found = distances(forget, validation, lambda: TOY)
    assert isinstance(found["pad"], str) and "4 images" in found["pad"]  # too few to split
    expected_distance = {
        "mmd": {"near": 0.5 * (img_near + txt_near), "far": 0.5 * (img_far + txt_far)},
        # near: pairs (dog,cat)=0.25, (dog,dog)=0, (cat,cat)=0, (cat,dog)=0.25 -> mean 0.125
        "wordnet": {"near": 0.125, "far": 0.75},
    }
    for weighting in ("mmd", "wordnet"):
        dist = expected_distance[weighting]
        w_near = dist["near"] / (dist["near"] + dist["far"])
        result = tkl_under(weighting, losses, found[weighting])
        assert result.weights["near"] == pytest.approx(w_near, rel=1e-9), weighting
        assert result.value == pytest.approx(w_near * 25.0, rel=1e-9), weighting
        assert result.ci95 == pytest.approx(
            1.96 * w_near * math.sqrt(losses["near"].variance), rel=1e-9
        )
    uniform = tkl_under("uniform", losses, found["uniform"])
    assert uniform.value == pytest.approx(12.5) and uniform.weights == {"near": 0.5, "far": 0.5}
    pad = tkl_under("pad", losses, {"near": 1.0, "far": 3.0})  # PAD distances given by hand
    assert pad.value == pytest.approx(0.25 * 25.0) and pad.weights["far"] == pytest.approx(0.75)
    # a closer validation set gets less weight, so the drop there counts less
    assert tkl_under("mmd", losses, found["mmd"]).value < uniform.value


def test_tkl_ci_covers_the_bootstrap_spread() -> None:
    rng = np.random.RandomState(3)
    before = {d: rng.rand(400) < 0.8 for d in ("a", "b", "c")}
    after = {d: before[d] & (rng.rand(400) < 0.9) for d in before}
    losses = {
        d: knowledge_loss(zs(d, before[d].astype(int)), zs(d, after[d].astype(int))) for d in before
    }
    weights = {"a": 0.5, "b": 0.3, "c": 0.2}
    result = tkl_under("mmd", losses, weights)
    boot = []
    for _ in range(2000):
        value = 0.0
        for d, w in weights.items():
            idx = rng.randint(0, 400, 400)
            value += w * 100 * (before[d][idx].astype(float) - after[d][idx]).mean()
        boot.append(value)
    assert result.ci95 == pytest.approx(1.96 * np.std(boot), rel=0.1)


def test_unavailable_weightings_say_why_and_bad_weights_are_refused() -> None:
    losses = {"a": KnowledgeLoss("a", 80, 70, 10, 1, 10)}
    result = tkl_under("wordnet", losses, "unavailable: no database")
    assert result.value is None and "no database" in result.note
    with pytest.raises(FewtransError, match="positive sum"):
        tkl_under("pad", losses, {"a": 0.0})
    with pytest.raises(FewtransError, match="same test images"):
        knowledge_loss(zs("a", [1, 0]), zs("a", [1]))


def test_clip_settings_pin_the_model_to_the_target() -> None:
    inductive = SUB_BENCHMARKS["clip-inductive"]
    original = SUB_BENCHMARKS["clip-partially-transductive"]
    # The inductive setting covers the seven forget datasets, the original all twelve.
    assert set(inductive.manifests) < set(original.manifests) and len(inductive.manifests) == 7
    base = "open-clip:ViT-B-16/openai"
    assert inductive.expected_model(base, "clip-cub") == base + "+unlearn:clip-cub"
    assert original.expected_model(base, "clip-cub") == base
    with pytest.raises(ValueError, match="base model name"):
        inductive.expected_model(base + "+unlearn:clip-cub", "clip-cub")
    assert inductive.accepts(base + "+unlearn:clip-cub", "clip-cub")
    for model, dataset in itertools.product([base, base + "+unlearn:clip-ucf101"], ["clip-cub"]):
        assert not inductive.accepts(model, dataset)
    assert original.accepts(base, "clip-cub") and not original.accepts(
        base + "+unlearn:clip-cub", "clip-cub"
    )


def test_validation_refuses_unlearning_off_the_recipe() -> None:
    from fewtrans_board.core.errors import SubmissionError
    from fewtrans_board.leaderboard.validate import _check_unlearning

    @dataclass
    class Run:
        dataset: str = "clip-cub"

    good = {
        "forget": "clip-cub",
        "retain": ["clip-caltech101", "clip-oxford-flowers", "clip-ucf101"],
        "alpha": 30.0,
        "lambda": 1.0,
        "importance_batch_size": 64,
    }
    _check_unlearning(Run(), good)  # type: ignore[arg-type]
    for change in ({"alpha": 1e9}, {"retain": ["clip-caltech101"]}, {"forget": "clip-ucf101"}):
        with pytest.raises(SubmissionError) as info:
            _check_unlearning(Run(), {**good, **change})  # type: ignore[arg-type]
        assert info.value.code == "unlearning-recipe"
    with pytest.raises(SubmissionError) as missing:
        _check_unlearning(Run(), None)  # type: ignore[arg-type]
    assert missing.value.code == "unlearning-record-missing"
