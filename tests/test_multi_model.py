"""IMS-f, all embeddings, the model library and BSCD-FSL's Random baseline."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fewtrans_board.methods.adapters.layer_selection import folds_of, select_layers

LIBRARY = "library:demo-cnn.digits+demo-cnn.random"
REPO = Path(__file__).resolve().parents[1]


def test_folds_are_leave_one_per_class_for_five_shots_and_absent_for_one_shot() -> None:
    labels = np.repeat(np.arange(5), 5)
    folds, scheme = folds_of(labels)
    assert scheme == "5-fold"
    for fold in range(5):  # every fold holds out exactly one item of every class
        assert sorted(labels[folds == fold].tolist()) == list(range(5))
    assert folds_of(np.array([0, 1, 1, 2, 2]))[1] == "resubstitution"
    assert folds_of(np.repeat(np.arange(3), [3, 4, 6]))[1] == "3-fold"


def test_selection_keeps_the_informative_layer_and_rejects_noise() -> None:
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(4), 5)
    centres = rng.normal(size=(4, 8)) * 3
    informative = centres[labels] + rng.normal(size=(20, 8))
    noise = [rng.normal(size=(20, 8)) for _ in range(2)]
    # model 0: [noise, informative]; model 1: [noise]
    selected, record = select_layers([[noise[0], informative], [noise[1]]], labels)
    assert selected == [(0, 1)]
    assert record["stage1"][0]["layer"] == 1
    assert record["stage2"][0]["cv_loss"] >= record["cv_loss"]  # noise did not help
    assert record["cv"] == "5-fold"


def test_library_concatenates_member_features(registry) -> None:  # type: ignore[no-untyped-def]
    import torch

    from fewtrans_board.core.errors import FewtransError
    from fewtrans_board.models.library import library_members

    library = registry.model(LIBRARY).obj.load()
    a = registry.model("demo-cnn.digits").obj.load()
    b = registry.model("demo-cnn.random").obj.load()
    x = torch.randn(3, 3, 32, 32)
    assert library.feature_dim == a.feature_dim + b.feature_dim
    assert torch.allclose(library.embed(x), torch.cat([a.embed(x), b.embed(x)], dim=1))
    assert [m.name for m in library_members(library)] == ["demo-cnn.digits", "demo-cnn.random"]
    single = registry.model("library:demo-cnn.digits").obj.load()  # BSCD-FSL Table 5, row 1
    assert torch.allclose(single.embed(x), a.embed(x))
    with pytest.raises(FewtransError, match="empty member"):
        registry.model("library:demo-cnn.digits+").obj.load()
    with pytest.raises(FewtransError, match="takes no --weights"):
        registry.model(LIBRARY).obj.load(Path("x.safetensors"))


@pytest.fixture(scope="module")
def five_shot_manifest(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from fewtrans_board.datasets.digits import DIGITS
    from fewtrans_board.episodes.build import build_manifest
    from fewtrans_board.episodes.protocols import get_protocol

    path = tmp_path_factory.mktemp("m") / "digits-5w5s.parquet"
    protocol = get_protocol("fewtrans-fixed").with_overrides(ways=5, shots=5, queries=6, episodes=6)
    build_manifest(DIGITS, None, protocol).write(path)
    return path


def run(registry, model: str, adapter: str, manifest: Path, out: Path, limit=None, **config):  # type: ignore[no-untyped-def]
    from fewtrans_board.results.load import load_run
    from fewtrans_board.runner.run import run_evaluation
    from fewtrans_board.runner.spec import RunSpec

    spec = RunSpec(
        model=model, adapter=adapter, manifest=str(manifest), hpe="single", config=config,
        threads=1, limit=limit,
    )  # fmt: skip
    run_evaluation(spec, registry, out, progress=False)
    return load_run(out)


@pytest.mark.slow
def test_ims_f_selects_a_subset_recorded_for_every_episode(
    registry, five_shot_manifest, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    from fewtrans_board.results.records import adapter_records

    config = {"epochs": 2, "lr_backbone": 1e-3, "lr_head": 0.05}
    ims = run(registry, LIBRARY, "ims-f", five_shot_manifest, tmp_path / "ims", **config)
    records = adapter_records(tmp_path / "ims")
    assert sorted(records) == sorted(set(ims.config_matrix()[0].tolist()))  # every episode
    sizes = []
    for per_config in records.values():
        record = per_config[0]
        assert record["models"] == ["demo-cnn.digits", "demo-cnn.random"]
        assert record["layers"] == [3, 3] and record["cv"] == "5-fold"
        chosen = {(s["model"], s["layer"]) for s in record["selected"]}
        assert chosen <= {(m, layer) for m in range(2) for layer in range(3)}
        # the best stage-1 layer always starts the selection
        best = min(record["stage1"], key=lambda s: s["cv_loss"])
        assert (best["model"], best["layer"]) == (
            record["selected"][0]["model"],
            record["selected"][0]["layer"],
        )
        sizes.append(len(chosen))
    assert max(sizes) < 6  # a strict subset of the 6 candidate layers
    everything = run(
        registry, LIBRARY, "all-embeddings", five_shot_manifest, tmp_path / "all", **config
    )
    all_records = adapter_records(tmp_path / "all")
    assert all(len(r[0]["selected"]) == 6 for r in all_records.values())
    assert all(r[0]["feature_dim"] == 2 * (32 + 64 + 64) for r in all_records.values())
    assert everything.aggregations()["hpe"].mean() > 20.0  # above chance (5-way)


def test_random_baseline_reinitialises_once_and_leaves_the_global_rng_alone(registry) -> None:  # type: ignore[no-untyped-def]
    import torch

    from fewtrans_board.methods.adapters.random_embedding import reinitialized
    from fewtrans_board.testing.tiny import tiny_vit_backbone

    encoder = tiny_vit_backbone().image_encoder
    state = torch.random.get_rng_state()
    a, b, c = reinitialized(encoder, 0), reinitialized(encoder, 0), reinitialized(encoder, 1)
    assert torch.equal(torch.random.get_rng_state(), state)
    pairs = list(zip(encoder.state_dict().items(), a.state_dict().items(), strict=True))
    assert all(
        torch.equal(x, y)
        for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True)
    )
    assert not torch.equal(a.pos_embed, c.pos_embed)
    changed = [
        name
        for (name, old), (_, new) in pairs
        if old.dtype.is_floating_point and not torch.equal(old, new)
    ]
    assert "pos_embed" in changed and "blocks.0.attn.qkv.weight" in changed


@pytest.mark.slow
def test_random_baseline_is_worse_than_the_pretrained_probe_on_digits(
    registry, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    from fewtrans_board.stats.tests import paired_ttest

    manifest = (
        Path(__file__).resolve().parents[1]
        / "leaderboard/manifests/fewtrans-fixed-5w1s--digits.parquet"
    )
    random = run(registry, "demo-cnn.digits", "random", manifest, tmp_path / "r", 40, epochs=10)
    probe = run(
        registry, "demo-cnn.digits", "linear-probe", manifest, tmp_path / "p", 40, epochs=10
    )
    gap = probe.aggregations()["hpe"] - random.aggregations()["hpe"]
    assert gap.mean() > 5.0
    assert paired_ttest(probe.aggregations()["hpe"], random.aggregations()["hpe"]).pvalue < 1e-3


def _local_model_plugin() -> object:
    """An in-process plugin registering ``local-cnn`` (the demo CNN under another name)."""
    from fewtrans_board import hookimpl
    from fewtrans_board.api.model_spec import ModelSpec
    from fewtrans_board.methods.trained.demo_cnn import load_pretrained

    class _Plugin:
        @hookimpl
        def register_models(self, register) -> None:  # type: ignore[no-untyped-def]
            register(
                ModelSpec(
                    name="local-cnn",
                    loader=load_pretrained,
                    family="demo",
                    architecture="demo-cnn",
                    source="bundled",
                )
            )

    return _Plugin()


def test_composite_models_resolve_members_in_the_callers_registry(tmp_path: Path) -> None:
    """``library:`` and ``meta-trained`` see the caller's plugins, no more and no fewer."""
    import torch

    from fewtrans_board.core.errors import UnknownNameError
    from fewtrans_board.methods.meta.checkpoint import write_checkpoint
    from fewtrans_board.registry.lookup import Registry
    from fewtrans_board.registry.manager import get_plugin_manager
    from fewtrans_board.runner.plan import plan_run
    from fewtrans_board.runner.session import RunSession
    from fewtrans_board.runner.spec import RunSpec

    local = Registry.from_plugin_manager(
        get_plugin_manager(entry_points=False, extra_plugins={"local": _local_model_plugin()})
    )
    library = local.load_model("library:local-cnn+demo-cnn.random")
    assert library.feature_dim == 2 * local.load_model("local-cnn").feature_dim
    manifest = REPO / "leaderboard/manifests/fewtrans-varied--digits.parquet"
    spec = RunSpec(model="library:local-cnn+demo-cnn.random", adapter="mean-centroid",
                   manifest=str(manifest), limit=1)  # fmt: skip
    runner = RunSession(plan_run(spec, local)).backbone  # the runner loads it alike
    assert runner.feature_dim == library.feature_dim

    encoder = local.load_model("local-cnn").image_encoder.state_dict()
    checkpoint = tmp_path / "meta.safetensors"
    write_checkpoint(checkpoint, encoder, {}, {"method": "protonet", "base_model": "local-cnn"})
    meta = local.load_model("meta-trained", checkpoint)
    x = torch.randn(2, 3, 32, 32)
    assert torch.equal(meta.embed(x), local.load_model("local-cnn").embed(x))

    # The example plugin is installed, but this caller's allow-list excludes it.
    excluding = Registry.from_plugin_manager(get_plugin_manager(allow=["something-else"]))
    member = "example-resnet10t.c3_in1k"
    assert member in Registry.from_plugin_manager(get_plugin_manager()).models
    with pytest.raises(UnknownNameError, match=member):
        excluding.load_model(f"library:{member}+demo-cnn.random")
    checkpoint_excluded = tmp_path / "excluded.safetensors"
    write_checkpoint(checkpoint_excluded, encoder, {}, {"method": "protonet", "base_model": member})
    with pytest.raises(UnknownNameError, match=member):
        excluding.load_model("meta-trained", checkpoint_excluded)


def test_a_selection_fit_runs_with_one_blas_thread_and_restores_the_pools(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Tiny logistic regressions run single-threaded (threads only contend); the pools are
    found once per process and given back their sizes after each fit."""
    from sklearn.linear_model import LogisticRegression
    from threadpoolctl import threadpool_info, threadpool_limits

    from fewtrans_board.methods.adapters.layer_selection import lbfgs_loss

    def pools() -> dict[str, int]:
        return {p["filepath"]: p["num_threads"] for p in threadpool_info()}

    seen: list[dict[str, int]] = []
    real_fit = LogisticRegression.fit

    def recording(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(pools())
        return real_fit(self, *args, **kwargs)

    monkeypatch.setattr(LogisticRegression, "fit", recording)
    rng = np.random.default_rng(0)
    features, labels = rng.normal(size=(12, 4)), np.arange(12) % 3
    with threadpool_limits(2):  # two threads each, whatever this machine's default
        before = pools()
        for _ in range(2):
            lbfgs_loss(features, labels, features, labels)
        after = pools()
    assert before and set(before.values()) == {2}
    assert len(seen) == 2 and all(s == dict.fromkeys(before, 1) for s in seen)
    assert after == before
