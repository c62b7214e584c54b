"""``analyze cross-validation``: the validation set illusion (FewTrans Fig. 3).

Oracles: fold plans and fold assignments checked by hand on tiny label vectors; held-out
accuracies of toy adapters whose answers are known by hand (one memorises its training
images, so any leak of a held-out image into training shows); the average-optimal
configuration and both accuracies recomputed with numpy from the stored rows.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from click.testing import CliRunner

from fewtrans_board import Adapter, AdapterConfig, hparam
from fewtrans_board.analysis.cross_validation import (
    assign_folds,
    cross_validation_scores,
    fold_plan,
)
from fewtrans_board.api.episode_data import ImageSet, SupportSet
from fewtrans_board.cli import make_cli
from fewtrans_board.core.errors import FewtransError
from fewtrans_board.episodes.manifest import ManifestEpisode
from fewtrans_board.registry.manager import get_plugin_manager
from fewtrans_board.runner.presentation import EpisodeInputs

MODEL = ["--model", "demo-cnn.digits", "--device", "cpu", "--threads", "1"]


def _invoke(args: list[str]) -> tuple[int, str]:
    cli = make_cli(get_plugin_manager(entry_points=False))
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    return result.exit_code, result.output


# --- folds, by hand ----------------------------------------------------------------------


def test_fold_plans() -> None:
    assert fold_plan([1, 3], 5).scheme == "impossible" and fold_plan([1, 3]).folds == 0
    assert fold_plan([1, 1]).scheme == "impossible"
    two = fold_plan([2, 2, 2], 5)
    assert (two.folds, two.scheme) == (2, "leave-one-out")
    assert (fold_plan([4, 4], 5).folds, fold_plan([4, 4], 5).scheme) == (4, "leave-one-out")
    assert (fold_plan([5, 5]).folds, fold_plan([5, 5]).scheme) == (5, "5-fold")
    assert (fold_plan([7, 9], 5).folds, fold_plan([7, 9], 5).scheme) == (5, "5-fold")
    uneven = fold_plan([3, 4], 5)  # not leave-one-out for the 4-shot class
    assert (uneven.folds, uneven.scheme) == (3, "3-fold")
    assert (fold_plan([3, 3], 2).folds, fold_plan([3, 3], 2).scheme) == (2, "2-fold")
    with pytest.raises(FewtransError):
        fold_plan([5, 5], 1)


def test_folds_are_stratified_by_class() -> None:
    labels = np.array([0, 1, 0, 1, 1, 0, 1])  # class 0: 3 images, class 1: 4
    fold = assign_folds(labels, 3, seed=7)
    assert sorted(fold[labels == 0].tolist()) == [0, 1, 2]
    assert sorted(fold[labels == 1].tolist()) == [0, 0, 1, 2]  # 4 dealt into 3 folds
    assert (assign_folds(labels, 3, seed=7) == fold).all()  # seeded
    # 2 shots, 2 folds: leave-one-out, one image of each class per fold.
    pairs = np.array([0, 0, 1, 1, 2, 2])
    fold = assign_folds(pairs, 2, seed=1)
    for f in (0, 1):
        assert sorted(pairs[fold == f].tolist()) == [0, 1, 2]


# --- held-out accuracy, by hand ----------------------------------------------------------


class _Guess(Adapter):
    """Feature 0 of an image is its label, feature 1 a unique id.

    ``rule="label"`` reads the label (100% on anything), ``"zero"`` answers class 0, and
    ``"memory"`` answers the label of a training image with the same id and class 0 for
    an image it was not trained on.
    """

    name = "test-guess"
    description = "Toy adapter with answers known by hand."
    trains = "nothing"
    frozen_backbone = True
    training_free = True
    fits: ClassVar[list[int]] = []

    @dataclass(frozen=True)
    class Config(AdapterConfig):
        rule: str = hparam("label", "label, zero or memory.")

    def fit(self, backbone, support, class_names, config):  # type: ignore[no-untyped-def]
        features = support.images.features(backbone)
        memory = {int(f[1]): int(label) for f, label in zip(features, support.labels, strict=True)}
        type(self).fits.append(len(support))
        n_way = len(class_names)

        class Predictor:
            def predict(self, query):  # type: ignore[no-untyped-def]
                rows = query.features(backbone)
                if config.rule == "label":
                    answers = [int(r[0]) for r in rows]
                elif config.rule == "zero":
                    answers = [0] * len(rows)
                else:
                    answers = [memory.get(int(r[1]), 0) for r in rows]
                return torch.nn.functional.one_hot(torch.tensor(answers), n_way).float()

        return Predictor()


def _inputs(shots: int, ways: int = 2) -> EpisodeInputs:
    labels = np.repeat(np.arange(ways), shots)
    features = torch.tensor([[label, i] for i, label in enumerate(labels)], dtype=torch.float32)
    support = SupportSet(ImageSet(features=features), torch.as_tensor(labels), ways)
    episode = ManifestEpisode(
        index=0,
        stream_index=0,
        classes=tuple(range(ways)),
        class_ids=tuple(str(c) for c in range(ways)),
        support=tuple((f"s{i}", int(label)) for i, label in enumerate(labels)),
        query=(("q0", 0),),
    )
    query = ImageSet(features=torch.zeros(1, 2))
    return EpisodeInputs(
        episode, [str(c) for c in range(ways)], support, query, np.zeros(1), np.zeros(1, int)
    )


def test_held_out_accuracy_matches_the_hand_computed_values() -> None:
    configs = [_Guess.Config(rule=rule) for rule in ("zero", "memory", "label")]
    _Guess.fits = []
    # 2 ways x 4 shots, 4 folds: each fold holds one image per class; training sees 6.
    scores = cross_validation_scores(
        _Guess(),
        None,
        _inputs(4),
        configs,
        fold_plan([4, 4], 4),
        "0" * 64,  # type: ignore[arg-type]
    )
    # zero: half of every held-out fold is class 0; memory: it never saw the held-out
    # images (so it answers 0, like zero); label: always right.
    assert scores.tolist() == [50.0, 50.0, 100.0]
    assert _Guess.fits == [6] * 12  # 4 folds x 3 configurations, each on 3 of 4 shots per class
    # 3 ways x 5 shots, 2 folds: folds of 3 and 2 images per class (9 and 6 held out).
    _Guess.fits = []
    scores = cross_validation_scores(
        _Guess(),
        None,
        _inputs(5, 3),
        configs,
        fold_plan([5, 5, 5], 2),
        "1" * 64,  # type: ignore[arg-type]
    )
    assert scores.tolist() == pytest.approx([100 / 3, 100 / 3, 100.0])
    assert sorted(set(_Guess.fits)) == [6, 9]


# --- the command, end to end -------------------------------------------------------------


def _stored_matrix(run: Path) -> tuple[list[int], np.ndarray]:
    rows = [
        r for s in sorted((run / "shards").glob("*.parquet")) for r in pq.read_table(s).to_pylist()
    ]
    rows = [r for r in rows if r["kind"] == "config"]
    episodes = sorted({r["episode"] for r in rows})
    matrix = np.full((len(episodes), max(r["config_index"] for r in rows) + 1), np.nan)
    for r in rows:
        matrix[episodes.index(r["episode"]), r["config_index"]] = r["accuracy"]
    return episodes, matrix


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory: pytest.TempPathFactory) -> dict[int, tuple[Path, Path]]:
    """Mean-centroid sweeps (normalize off/on) of 1-shot and 2-shot digits manifests."""
    root = tmp_path_factory.mktemp("cv")
    out = {}
    for shots in (1, 2):
        manifest = root / f"digits-{shots}shot.parquet"
        code, output = _invoke(
            ["manifest", "build", "--protocol", "fewtrans-fixed", "--dataset", "digits", "--ways",
             "3", "--shots", str(shots), "--queries", "4", "--episodes", "3", "--seed", "1",
             "--out", str(manifest)]
        )  # fmt: skip
        assert code == 0, output
        run = root / f"sweep-{shots}"
        code, output = _invoke(
            ["sweep", *MODEL, "--adapter", "mean-centroid", "--manifest", str(manifest),
             "--grid", "normalize=false,true", "--out", str(run), "--quiet"]
        )  # fmt: skip
        assert code == 0, output
        out[shots] = (manifest, run)
    return out


def test_cross_validation_against_the_average_optimal_configuration(
    sweeps: dict[int, tuple[Path, Path]], tmp_path: Path
) -> None:
    args = ["analyze", "cross-validation", str(sweeps[1][1]), str(sweeps[2][1])]
    args += ["--manifest", str(sweeps[1][0]), "--manifest", str(sweeps[2][0])]
    code, output = _invoke([*args, "--device", "cpu", "--out", str(tmp_path)])
    assert code == 0, output
    assert "impossible (3 episodes)" in output and "leave-one-out" in output
    data = json.loads((tmp_path / "cross-validation.json").read_text())
    assert (tmp_path / "cross-validation.svg").read_text().startswith("<svg")
    assert data["folds"] == 5
    for result, shots in zip(data["runs"], (1, 2), strict=True):
        episodes, matrix = _stored_matrix(sweeps[shots][1])
        optimal = int(np.argmax(matrix.mean(axis=0)))
        assert result["average_optimal"]["index"] == optimal
        for row, episode in zip(result["episodes"], episodes, strict=True):
            assert row["episode"] == episode and row["shots"] == shots
            assert row["average_optimal_accuracy"] == matrix[episodes.index(episode), optimal]
            if shots == 1:
                assert row["scheme"] == "impossible" and row["cv_accuracy"] is None
            else:
                assert row["scheme"] == "leave-one-out" and row["folds"] == 2
                assert row["cv_index"] == int(np.argmax(row["cv_scores"]))
                assert row["cv_accuracy"] == matrix[episodes.index(episode), row["cv_index"]]
                # held-out accuracies of a 3-way leave-one-out fold are multiples of 100/3 / 2
                assert all(math.isclose(s * 6 / 100, round(s * 6 / 100)) for s in row["cv_scores"])
    by_shots = {row["shots"]: row for row in data["per_shot"]}
    assert by_shots[1]["cross_validation"] is None and by_shots[1]["cv_impossible"] == 3
    two = data["runs"][1]["episodes"]
    difference = np.array([r["average_optimal_accuracy"] - r["cv_accuracy"] for r in two])
    paired: dict[str, Any] = by_shots[2]["paired_difference"]
    assert paired["mean"] == pytest.approx(difference.mean())
    assert paired["ci95"] == pytest.approx(1.96 * difference.std(ddof=1) / math.sqrt(3))
    assert by_shots[2]["average_optimal"]["n"] == 3 == by_shots[1]["average_optimal"]["n"]


def test_cross_validation_refuses_runs_it_cannot_use(
    sweeps: dict[int, tuple[Path, Path]], tmp_path: Path
) -> None:
    manifest, _ = sweeps[2]
    single = tmp_path / "single"
    code, output = _invoke(
        ["evaluate", *MODEL, "--adapter", "mean-centroid", "--manifest", str(manifest),
         "--hpe", "single", "--quiet", "--out", str(single)]
    )  # fmt: skip
    assert code == 0, output
    for args in (
        [str(single), "--manifest", str(manifest)],  # one configuration: nothing to choose
        [str(sweeps[2][1]), "--manifest", str(sweeps[1][0])],  # not the run's manifest
        [str(sweeps[2][1]), "--manifest", str(manifest), "--folds", "1"],
    ):
        code, output = _invoke(["analyze", "cross-validation", *args, "--out", str(tmp_path / "a")])
        errors = [line for line in output.splitlines() if line.startswith("Error")]
        assert code != 0 and len(errors) == 1 and "Traceback" not in output, output
        assert not (tmp_path / "a").exists()
