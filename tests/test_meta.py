"""BSCD-FSL meta-learners: heads against numpy oracles, FWT, checkpoints, and meta-training
on digits 0-4 that beats its random-init twin on the 5-9 manifest with a paired test."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fewtrans_board.methods.meta import heads

ROOT = Path(__file__).resolve().parents[1]
FIVE_WAY = ROOT / "leaderboard" / "manifests" / "fewtrans-fixed-5w1s--digits.parquet"
METHODS = ("protonet", "matchingnet", "relationnet", "metaopt", "maml")
VARIANTS = ("matchingnet-nofce", "relationnet-mlp", "metaopt-ridge", "proto-maml")
# CI-sized schedule: the paper's is 400 epochs x 100 episodes, 5-shot, 16 queries, augmented.
CI_SCHEDULE = {"epochs": 2, "episodes_per_epoch": 20, "shots": 1, "queries": 5, "augment": False}
# MetaOpt's heads need 5 epochs to show their gain, the MAMLs 3 (with a larger inner learning
# rate, below); the others show theirs after 2 (measured below).
CI_EPOCHS = {"metaopt": 5, "metaopt-ridge": 5, "maml": 3, "proto-maml": 3}
# MAML: meta-batches of 2 tasks (one Adam step each, as the others' one per episode), and an
# inner learning rate of 0.05 in training (CloserLook's 0.01 needs 15 epochs here to show a
# comparable gain; the adapters still evaluate with their default, 0.01).
MAML_SCHEDULE = {"maml_tasks": 2, "maml_lr": 0.05}
EVAL_EPISODES = 60
# RelationNet's conv relation module is the costliest to evaluate, and its gain the largest.
EVAL_EPISODES_FOR = {"relationnet": 30}


def toy(seed: int = 0) -> tuple:  # type: ignore[type-arg]
    import torch

    g = torch.Generator().manual_seed(seed)
    support = torch.randn(10, 6, generator=g, dtype=torch.float64)
    labels = torch.tensor([0, 0, 1, 1, 1, 2, 2, 0, 2, 1])
    query = torch.randn(7, 6, generator=g, dtype=torch.float64)
    return support, labels, query


def test_protonet_logits_are_negative_squared_distances_to_class_means() -> None:
    support, labels, query = toy()
    s, q, y = support.numpy(), query.numpy(), labels.numpy()
    means = np.stack([s[y == c].mean(0) for c in range(3)])
    expected = -((q[:, None, :] - means[None]) ** 2).sum(-1)
    assert heads.protonet_logits(support, labels, query, 3).numpy() == pytest.approx(expected)


def test_ridge_head_equals_the_primal_ridge_solution() -> None:
    support, labels, query = toy()
    s, q, y = support.numpy(), query.numpy(), np.eye(3)[labels.numpy()]
    lam = heads.RIDGE_LAMBDA
    primal = np.linalg.solve(s.T @ s + lam * np.eye(6), s.T @ y)  # (S^T S + l I)^-1 S^T Y
    got = heads.ridge_logits(support, labels, query, 3, scale=2.0).numpy()
    assert got == pytest.approx(2.0 * q @ primal)


def test_matching_head_is_log_attention_over_support_labels() -> None:
    support, labels, query = toy()
    s, q, y = support.numpy(), query.numpy(), labels.numpy()
    cos = (q / np.linalg.norm(q, axis=1, keepdims=True)) @ (
        s / np.linalg.norm(s, axis=1, keepdims=True)
    ).T
    scores = 100.0 * np.maximum(cos, 0.0)
    attention = np.exp(scores - scores.max(1, keepdims=True))
    attention /= attention.sum(1, keepdims=True)
    expected = np.log(attention @ np.eye(3)[y] + heads.MATCHING_EPS)
    assert heads.matching_logits(support, labels, query, 3).numpy() == pytest.approx(expected)


def test_relation_scores_pair_each_query_with_each_class_mean() -> None:
    import torch

    support, labels, query = toy()
    module = heads.make_relation_module(6).double()
    head = dict(module.state_dict())
    scores = heads.relation_scores(head, support, labels, query, 3)
    means = torch.stack([support[labels == c].mean(0) for c in range(3)])
    expected = torch.stack(
        [
            module(torch.cat([means[c], q, (means[c] - q).abs(), means[c] * q]))
            for q in query
            for c in range(3)
        ]
    )
    assert scores.shape == (7, 3)
    assert scores.reshape(-1).detach().numpy() == pytest.approx(
        expected.reshape(-1).detach().numpy()
    )


@pytest.mark.slow
def test_fwt_perturbs_training_forwards_only_and_adds_no_parameters() -> None:
    import torch

    from fewtrans_board.methods.meta.fwt import fwt_hooks
    from fewtrans_board.methods.trained.demo_cnn import build_demo_cnn

    torch.manual_seed(0)
    encoder = build_demo_cnn()
    keys = set(encoder.state_dict())
    x = torch.randn(4, 3, 32, 32)
    encoder.eval()
    plain = encoder(x)
    with fwt_hooks(encoder, torch.Generator().manual_seed(0)) as hooked:
        assert hooked == 3  # one per stage of the demo CNN
        assert torch.equal(encoder(x), plain)  # eval: identity
        encoder.train()
        first, second = encoder(x), encoder(x)
        assert not torch.allclose(first, second)  # a fresh draw per forward
    assert set(encoder.state_dict()) == keys
    encoder.train()
    torch.manual_seed(1)
    a = encoder(x)
    torch.manual_seed(1)
    assert torch.equal(a, encoder(x))  # hooks are gone


def test_meta_train_refuses_fwt_where_the_paper_has_none(invoke, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    result = invoke(
        [
            "meta-train",
            "--method",
            "maml",
            "--source",
            "digits",
            "--fwt",
            "--out",
            str(tmp_path / "m.safetensors"),
        ]
    )
    assert result.exit_code == 1
    assert "no MAML+FWT variant" in result.output and "protonet" in result.output


def test_meta_trained_model_needs_a_meta_checkpoint(registry, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from fewtrans_board.core.errors import FewtransError
    from fewtrans_board.methods.trained.demo_cnn import weights_path

    spec = registry.model("meta-trained").obj
    with pytest.raises(FewtransError, match="needs --weights"):
        spec.load(None)
    with pytest.raises(FewtransError, match="not a meta-trained checkpoint"):
        spec.load(weights_path())


def train_and_twin(registry, method: str, folder: Path, **extra) -> tuple[Path, Path]:  # type: ignore[no-untyped-def]
    import torch

    from fewtrans_board.metatrain.train import MetaTrainSpec, meta_train

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny batches: extra threads only contend on a shared machine
    try:
        paths = []
        trained_epochs = CI_EPOCHS.get(method, CI_SCHEDULE["epochs"])
        for tag, epochs in (("trained", trained_epochs), ("twin", 0)):
            schedule = {**CI_SCHEDULE, "epochs": epochs, **extra}
            spec = MetaTrainSpec(
                method=method, source="digits", model="demo-cnn.random", **schedule
            )
            path = folder / f"{method}-{tag}.safetensors"
            meta_train(spec, registry, path)
            paths.append(path)
        return paths[0], paths[1]
    finally:
        torch.set_num_threads(threads)


def evaluate(
    registry, checkpoint: Path, adapter: str, out: Path, limit: int = EVAL_EPISODES
) -> np.ndarray:  # type: ignore[no-untyped-def]
    from fewtrans_board.results.load import load_run
    from fewtrans_board.runner.run import run_evaluation
    from fewtrans_board.runner.spec import RunSpec

    spec = RunSpec(
        model="meta-trained", weights=str(checkpoint), adapter=adapter, manifest=str(FIVE_WAY),
        hpe="single", limit=limit, threads=1,
    )  # fmt: skip
    run_evaluation(spec, registry, out, progress=False)
    return load_run(out).aggregations()["hpe"]


@pytest.mark.slow
@pytest.mark.parametrize("method", METHODS + VARIANTS)
def test_meta_training_on_digits_0_4_beats_the_random_init_twin_on_5_9(
    registry, method: str, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    from fewtrans_board.methods.meta.checkpoint import read_checkpoint
    from fewtrans_board.stats.tests import paired_ttest

    extra = MAML_SCHEDULE if method in ("maml", "proto-maml") else {}
    trained, twin = train_and_twin(registry, method, tmp_path, **extra)
    _, _, record = read_checkpoint(trained)
    assert record["method"] == method and record["source_classes"] == ["0", "1", "2", "3", "4"]
    assert len(record["losses"]) == CI_EPOCHS.get(method, CI_SCHEDULE["epochs"])
    assert record["losses"][-1] < record["losses"][0]
    episodes = EVAL_EPISODES_FOR.get(method, EVAL_EPISODES)
    ours = evaluate(registry, trained, method, tmp_path / "trained", episodes)
    baseline = evaluate(registry, twin, method, tmp_path / "twin", episodes)
    test = paired_ttest(ours, baseline)
    assert test.n == episodes
    # Measured (points, p; training seeds 0, 1, 2) with the schedule above, on 60 episodes
    # unless said: ProtoNet +19 (1e-19), +26, +24; MatchingNet-FCE +22 (1e-26), +37, +28;
    # MatchingNet-no-FCE +22 (2e-21), +20 (1e-19), +23; RelationNet (conv) on 30 episodes
    # +46 (2e-21), +52, +54; RelationNet-MLP +16, +18, +15 (5e-17); MetaOpt-SVM +6.2 (3e-5),
    # +8.6 (9e-8), +8.6 (3e-8), but at 3 epochs +1.6 (0.21) with seed 1; MetaOpt-ridge +13
    # (3e-21), but at 2 epochs +1.0 (0.1); MAML (linear head) +9.9 (2e-9), +8.6 (7e-9), +12
    # (8e-15), where CloserLook's inner lr 0.01 needed 15 epochs for +10.5 (5e-8), +12, +23;
    # Proto-MAML +11 (3e-11), +9.1 (6e-10), +8.0 (8e-8), where 0.01 gave +10, +8 and +5.6
    # (6e-4) in 5 epochs. The thresholds keep a margin from the weakest measurement (MetaOpt-SVM
    # +6.2): half its gain, and a p-value hundreds of times its own.
    assert ours.mean() - baseline.mean() > 3.0, (ours.mean(), baseline.mean())
    assert test.pvalue < 0.01, test


@pytest.mark.slow
def test_protonet_fwt_through_the_cli_is_an_ordinary_model_adapter_pair(
    invoke, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    checkpoint = tmp_path / "protonet-fwt.safetensors"
    result = invoke(
        [
            "meta-train", "--method", "protonet", "--source", "digits", "--fwt", "--epochs", "1",
            "--episodes-per-epoch", "3", "--shots", "1", "--queries", "2", "--no-augment",
            "--device", "cpu", "--out", str(checkpoint), "--quiet",
        ]
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "ProtoNet+FWT on digits" in result.output
    out = tmp_path / "run"
    result = invoke(
        [
            "evaluate", "--model", "meta-trained", "--weights", str(checkpoint), "--adapter", "protonet",
            "--manifest", str(FIVE_WAY), "--hpe", "single", "--limit", "3", "--device", "cpu",
            "--out", str(out), "--quiet",
        ]
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    shard = json.loads((out / "run.json").read_text())
    assert shard["identity"]["model"] == "meta-trained"
    from fewtrans_board.results.load import load_run

    meta = load_run(out).meta
    assert meta["model"]["info"]["meta_trained"]["method_title"] == "ProtoNet+FWT"
    assert meta["model"]["info"]["meta_trained"]["base_model"] == "demo-cnn.random"


def test_relationnet_without_its_checkpoint_records_an_untrained_module(registry) -> None:  # type: ignore[no-untyped-def]
    from fewtrans_board.methods.meta.adapters import RelationNetAdapter
    from fewtrans_board.testing.tiny import toy_episode

    backbone = registry.model("demo-cnn.random").obj.load()
    episode = toy_episode(image_size=32)
    predictor = RelationNetAdapter().fit(
        backbone, episode.support, episode.class_names, RelationNetAdapter.Config()
    )
    assert predictor.record is not None
    assert predictor.record["relation_module"].startswith(
        "untrained: meta-train --method relationnet"
    )
    assert predictor.predict(episode.query).shape == (len(episode.query), 3)
