"""Built-in adapters: hand-built oracles, zero-shot oracle, batched = loop, contract, HPE runs."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch

from fewtrans_board import Backbone, ImageSet, SupportSet, hookimpl
from fewtrans_board.blocks.finetune import (
    FinetuneAdapter,
    FinetuneLastKAdapter,
    TransductiveFinetuneAdapter,
    block_list,
)
from fewtrans_board.hpe.protocols import HPE_PROTOCOLS, get_hpe_protocol
from fewtrans_board.methods.adapters.heads import CosineClassifierAdapter, LinearProbeAdapter
from fewtrans_board.methods.adapters.prototypes import MeanCentroidAdapter
from fewtrans_board.methods.adapters.zeroshot import TEMPLATE_SETS, ZeroShotClipAdapter
from fewtrans_board.registry.lookup import Registry
from fewtrans_board.registry.manager import get_plugin_manager
from fewtrans_board.results.load import load_run
from fewtrans_board.runner.run import run_evaluation
from fewtrans_board.runner.spec import RunSpec
from fewtrans_board.testing import check_adapter, tiny_clip_backbone, toy_episode
from tests.conftest import assert_rows_score_the_manifest_labels

DIGITS_MANIFEST = (
    Path(__file__).resolve().parents[1]
    / "leaderboard"
    / "manifests"
    / "fewtrans-varied--digits.parquet"
)


def identity_backbone(dim: int = 2) -> Backbone:
    """A backbone whose 'image' is already its feature vector ([N, dim, 1, 1] pixels)."""
    return Backbone("identity", torch.nn.Flatten().eval(), dim, 1)


def images(rows: list[list[float]]) -> ImageSet:
    return ImageSet(torch.tensor(rows, dtype=torch.float32)[:, :, None, None])


def test_mean_centroid_on_a_hand_built_episode() -> None:
    support = SupportSet(
        images([[0, 0], [2, 0], [10, 10], [10, 12], [0, 10]]), torch.tensor([0, 0, 1, 1, 2]), 3
    )
    # Centroids: (1, 0), (10, 11), (0, 10).
    query = images([[1, 1], [9, 9], [0, 8], [5, 5]])
    predictor = MeanCentroidAdapter().fit(
        identity_backbone(), support, ["a", "b", "c"], MeanCentroidAdapter.Config()
    )
    logits = predictor.predict(query)
    assert logits[3].tolist() == pytest.approx([-(16 + 25), -(25 + 36), -(25 + 25)])
    assert logits.argmax(1).tolist() == [0, 1, 2, 0]  # (5,5): 41 to class 0 < 50 to class 2


@pytest.mark.slow
def test_zero_shot_equals_open_clip_classifier() -> None:
    import open_clip
    import torch.nn.functional as F

    backbone = tiny_clip_backbone(seed=3)
    model = backbone.text.model  # type: ignore[union-attr]
    tokenizer = open_clip.get_tokenizer("fewtrans-tiny-clip")
    names = ["cat", "dog", "traffic light"]
    episode = toy_episode(shots=(1, 1, 1), seed=4)
    for template_set in ("photo", "photo-ensemble"):
        config = ZeroShotClipAdapter.Config(templates=template_set)
        logits = (
            ZeroShotClipAdapter()
            .fit(backbone, episode.support, names, config)
            .predict(episode.query)
        )
        templates = [lambda c, t=t: t.format(c) for t in TEMPLATE_SETS[template_set]]
        with torch.no_grad():
            classifier = open_clip.build_zero_shot_classifier(
                model, tokenizer, names, templates, use_tqdm=False
            )
            image = F.normalize(model.encode_image(episode.query.pixels), dim=-1)
            expected = model.logit_scale.exp() * image @ classifier
        assert torch.allclose(logits, expected, atol=1e-5)


@pytest.fixture
def one_thread():  # type: ignore[no-untyped-def]
    """Tiny ops are dominated by thread synchronisation on a busy machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _heads_batched_and_looped(adapter, dtype):  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    features = torch.randn(37, 16, dtype=dtype)
    queries = torch.randn(60, 16, dtype=dtype)
    backbone = identity_backbone(16)
    support = SupportSet(ImageSet(features[:, :, None, None]), torch.arange(37) % 4, 4)
    query = ImageSet(queries[:, :, None, None])
    centre = adapter.Config(batch_size=32, epochs=1)  # epochs 4, 7, 11 of 2 steps each
    grid = HPE_PROTOCOLS["fewtrans-paper"].grid(adapter, centre)
    seeds = list(range(len(grid)))
    batched = adapter().fit_many(backbone, support, list("abcd"), grid, seeds)
    looped = []
    for config, seed in zip(grid, seeds, strict=True):
        torch.manual_seed(seed)
        looped.append(adapter().fit(backbone, support, list("abcd"), config))
    return [(b.predict(query), s.predict(query)) for b, s in zip(batched, looped, strict=True)]


@pytest.mark.parametrize("adapter", [LinearProbeAdapter, CosineClassifierAdapter])
def test_batched_heads_equal_the_loop_in_float64(adapter, one_thread) -> None:  # type: ignore[no-untyped-def]
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        pairs = _heads_batched_and_looped(adapter, torch.float64)
    finally:
        torch.set_default_dtype(previous)
    assert len(pairs) == 15  # 5 learning rates x 3 epoch counts, rows finishing at 3 times
    for batched, looped in pairs:
        assert batched.dtype == torch.float64
        assert torch.allclose(batched, looped, rtol=0, atol=1e-10)
    assert not torch.allclose(pairs[0][0], pairs[-1][0])  # the grid's heads differ


@pytest.mark.parametrize("adapter", [LinearProbeAdapter, CosineClassifierAdapter])
def test_batched_heads_agree_with_the_loop_in_float32(adapter, one_thread) -> None:  # type: ignore[no-untyped-def]
    pairs = _heads_batched_and_looped(adapter, torch.float32)
    agreement = torch.cat([(b.argmax(1) == s.argmax(1)).float() for b, s in pairs]).mean()
    assert agreement >= 0.995
    assert max(float((b - s).abs().max()) for b, s in pairs) < 1e-3


def demo_backbone() -> Backbone:
    from fewtrans_board.methods.trained.demo_cnn import load_random

    return load_random(None, "cpu")


def test_finetune_last_k_trains_only_the_last_blocks() -> None:
    backbone = demo_backbone()
    episode = toy_episode(shots=(2, 2), image_size=32)
    config = FinetuneLastKAdapter.Config(k=1, epochs=2, lr_backbone=1e-2)
    predictor = FinetuneLastKAdapter().fit(backbone, episode.support, episode.class_names, config)
    before, after = block_list(backbone.image_encoder), block_list(predictor.encoder)
    for i, (b0, b1) in enumerate(zip(before, after, strict=True)):
        changed = any(
            not torch.equal(p, q) for p, q in zip(b0.parameters(), b1.parameters(), strict=True)
        )
        assert changed == (i == len(before) - 1)


def test_full_finetune_changes_every_block() -> None:
    backbone = demo_backbone()
    episode = toy_episode(shots=(2, 2), image_size=32)
    config = FinetuneAdapter.Config(epochs=2, lr_backbone=1e-2)
    predictor = FinetuneAdapter().fit(backbone, episode.support, episode.class_names, config)
    for b0, b1 in zip(
        block_list(backbone.image_encoder), block_list(predictor.encoder), strict=True
    ):
        assert any(
            not torch.equal(p, q) for p, q in zip(b0.parameters(), b1.parameters(), strict=True)
        )


@pytest.mark.slow
def test_transductive_finetune_uses_query_batch_statistics() -> None:
    backbone = demo_backbone()
    episode = toy_episode(shots=(2, 2), n_query_per_class=4, image_size=32)
    config = FinetuneAdapter.Config(epochs=1)
    plain = FinetuneAdapter().fit(backbone, episode.support, episode.class_names, config)
    transductive = TransductiveFinetuneAdapter().fit(
        backbone, episode.support, episode.class_names, config
    )
    full = episode.query.pixels
    half = ImageSet(full[:4])
    # Inductive predictions of an image do not depend on the rest of the query batch...
    assert torch.allclose(plain.predict(half), plain.predict(ImageSet(full))[:4], atol=1e-5)
    # ...transductive ones do (batch-norm statistics come from the query batch).
    assert not torch.allclose(
        transductive.predict(half), transductive.predict(ImageSet(full))[:4], atol=1e-4
    )
    running = [
        m.running_mean.clone()
        for m in transductive.encoder.modules()
        if isinstance(m, torch.nn.BatchNorm2d)
    ]
    assert running  # the demo CNN has batch norm


def test_zero_shot_needs_a_text_tower() -> None:
    from fewtrans_board.core.errors import FewtransError

    episode = toy_episode(image_size=32)
    with pytest.raises(FewtransError, match="needs a CLIP-style model"):
        ZeroShotClipAdapter().fit(
            demo_backbone(), episode.support, episode.class_names, ZeroShotClipAdapter.Config()
        )


def builtin_adapters() -> list[type]:
    registry = Registry.from_plugin_manager(get_plugin_manager(entry_points=False))
    return [e.obj for e in registry.adapters]


@pytest.mark.slow
@pytest.mark.parametrize("adapter", builtin_adapters(), ids=lambda a: a.name)
def test_every_builtin_adapter_passes_the_contract(adapter) -> None:  # type: ignore[no-untyped-def]
    fields = {f.name for f in adapter.Config.fields_info()}
    options = {"epochs": 3} if "epochs" in fields else {}  # keep CI fast
    if "missing_descriptions" in fields:  # CoPrompt: the toy classes have no descriptions
        options["missing_descriptions"] = "template"
    config = adapter.Config(**options) if options else None
    report = check_adapter(adapter, config=config)
    assert report.passed[-1] == "fit_many agrees with fit"
    assert adapter.paper and adapter.description


def test_finetune_does_not_touch_the_shared_backbone() -> None:
    backbone = demo_backbone()
    snapshot = copy.deepcopy(backbone.image_encoder.state_dict())
    episode = toy_episode(shots=(2, 2), image_size=32)
    FinetuneAdapter().fit(
        backbone,
        episode.support,
        episode.class_names,
        FinetuneAdapter.Config(epochs=2, lr_backbone=0.1),
    )
    for key, value in backbone.image_encoder.state_dict().items():
        assert torch.equal(value, snapshot[key]), key


class TinyModelsPlugin:
    """A 32-pixel timm ViT and a tiny open_clip model, registered as a model plugin would."""

    @hookimpl
    def register_models(self, register):  # type: ignore[no-untyped-def]
        from fewtrans_board.api.model_spec import ModelSpec
        from fewtrans_board.testing import tiny_vit_backbone

        register(
            ModelSpec(
                name="tiny-vit.test",
                loader=lambda weights, device: tiny_vit_backbone(image_size=32),
                family="timm",
                architecture="vit (test size)",
                source="random-init",
            )
        )
        register(
            ModelSpec(
                name="tiny-clip.test",
                loader=lambda weights, device: tiny_clip_backbone(),
                family="open_clip",
                architecture="tiny",
                source="random-init",
                modalities=("image", "text"),
            )
        )


@pytest.mark.slow
@pytest.mark.parametrize("adapter", builtin_adapters(), ids=lambda a: a.name)
def test_every_builtin_adapter_runs_under_hpe(adapter, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """One digits episode, the whole fewtrans-reference grid, through the real runner."""
    pm = get_plugin_manager(entry_points=False, extra_plugins={"tiny-models": TinyModelsPlugin()})
    registry = Registry.from_plugin_manager(pm)
    needs_clip = adapter.needs_text or adapter.__module__.split(".")[-2] in {
        "clip_prompts",
        "clip_tuning",
    }
    fields = {f.name for f in adapter.Config.fields_info()}
    spec = RunSpec(
        model="tiny-clip.test" if needs_clip else "tiny-vit.test",
        adapter=adapter.name,
        manifest=str(DIGITS_MANIFEST),
        hpe="fewtrans-reference",
        config={"epochs": 1} if "epochs" in fields else {},
        limit=1,
        threads=1,
        device="cpu",
        isolation="inline",  # the adapters are the subject; tests/test_runner.py covers workers
    )
    expected = len(get_hpe_protocol("fewtrans-reference").grid(adapter, adapter.Config()))
    report = run_evaluation(spec, registry, tmp_path / "run", progress=False)
    assert report.episodes == 1 and report.configurations == expected
    rows = load_run(tmp_path / "run").table.to_pylist()
    assert len([r for r in rows if r["kind"] == "config"]) == expected
    assert {r["aggregation"] for r in rows if r["kind"] == "ensemble"} >= {"vote"}
    assert_rows_score_the_manifest_labels(rows, DIGITS_MANIFEST)
