"""SSD unlearning of CLIP: dampening rule, importances and their cache, records, model names,
and the inductive miniature on the embedded digits (unlearning, oracle check, site)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fewtrans_board.core.errors import FewtransError
from fewtrans_board.models.unlearned_records import UnlearnedStore, read_record, write_record
from fewtrans_board.registry.lookup import Registry
from fewtrans_board.unlearning.data import LabeledSplit, load_split
from fewtrans_board.unlearning.importance import ImportanceCache, compute_importance
from fewtrans_board.unlearning.ssd import dampen, dampening_factors
from fewtrans_board.unlearning.tkl import knowledge_loss
from fewtrans_board.unlearning.zeroshot import zero_shot

SHIPPED_SHA256 = {
    "demo-clip.digits": "6e68d926b72532ca4393525bcf550d5c0ba32a3c1ad181d482226c128960fff5",
    "demo-clip.digits-0-4": "47c9fa4b8c2df3869268b8a5190b4675ae284e12dafaea5c7a39678e5986d9da",
}
RETAIN_DROP_BOUND = 3.0
"""Upper 95% bound (points) on the retain-set zero-shot drop the miniature must stay under."""
FORGET_CHANCE_MARGIN = 5.0
"""The forget-set zero-shot accuracy after unlearning must be within this of chance (points)."""


@pytest.fixture(scope="module")
def registry() -> Registry:
    from fewtrans_board.registry.manager import get_plugin_manager

    return Registry.from_plugin_manager(get_plugin_manager())


@pytest.fixture(scope="module")
def miniature(tmp_path_factory: pytest.TempPathFactory, registry: Registry):  # type: ignore[no-untyped-def]
    """The inductive miniature with CoOp on the first three episodes (K = 1, seeds 1-3)."""
    from fewtrans_board.jobs.inductive_demo import run_inductive_demo

    out = tmp_path_factory.mktemp("inductive")
    return run_inductive_demo(registry, out, adapters=("coop",), episodes=3, progress=False)


# --- SSD rule -----------------------------------------------------------------------------


def test_dampening_factors_follow_the_selection_and_bound() -> None:
    forget = torch.tensor([0.0, 1.0, 10.0, 31.0, 60.0, 5.0])
    retain = torch.tensor([0.0, 1.0, 1.0, 1.0, 1.0, 0.0])
    factors = dampening_factors(forget, retain, alpha=30.0, lam=1.0)
    # selected where F_f > 30 F_r: elements 3, 4 (and 5, with no retain importance at all)
    expected = [1.0, 1.0, 1.0, 1.0 / 31.0, 1.0 / 60.0, 0.0]
    assert torch.allclose(factors, torch.tensor(expected))
    # lambda large enough that lam * F_r / F_f > 1: selected but bounded at 1 (never amplified)
    assert torch.equal(dampening_factors(forget, retain, alpha=30.0, lam=100.0)[:5], torch.ones(5))


def test_dampen_changes_only_selected_elements_and_never_logit_scale() -> None:
    g = torch.Generator().manual_seed(0)
    params = {"w": torch.randn(4, 3, generator=g), "logit_scale": torch.tensor(4.6)}
    forget = {"w": torch.rand(4, 3, generator=g) * 100, "logit_scale": torch.tensor(1e9)}
    retain = {"w": torch.rand(4, 3, generator=g), "logit_scale": torch.tensor(0.0)}
    before = copy.deepcopy(params)
    stats = dampen(params, forget, retain, alpha=30.0, lam=1.0)
    selected = forget["w"] > 30.0 * retain["w"]
    beta = torch.clamp(retain["w"] / forget["w"], max=1.0)
    assert torch.allclose(params["w"], torch.where(selected, before["w"] * beta, before["w"]))
    assert params["logit_scale"] == before["logit_scale"]
    assert stats.selected == int(selected.sum()) and stats.total == 12
    with pytest.raises(FewtransError, match="shape"):
        dampen(params, {"w": torch.ones(2)}, {"w": torch.ones(2)}, 30.0, 1.0)
    with pytest.raises(FewtransError, match="lack"):
        dampen({"v": torch.ones(1)}, forget, retain, 30.0, 1.0)


# --- importances --------------------------------------------------------------------------


def small_split(registry: Registry, n_per_class: int = 3) -> LabeledSplit:
    spec = registry.datasets.get("digits-5-9").obj
    split = load_split(spec, None, "train", 32)
    keep = [
        i
        for c in range(5)
        for i in [j for j, lab in enumerate(split.labels) if lab == c][:n_per_class]
    ]
    return LabeledSplit(
        spec,
        None,
        "train",
        [split.items[i] for i in keep],
        [split.labels[i] for i in keep],
        split.preprocessing,
    )


def test_importance_is_the_mean_squared_batch_gradient(registry: Registry) -> None:
    backbone = registry.model("demo-clip.digits").obj.load()
    split = small_split(registry)
    got = compute_importance(backbone, split, batch_size=4, seed=0)
    model = copy.deepcopy(backbone.text.model).requires_grad_(True)  # type: ignore[union-attr]
    tokens = backbone.text.tokenize([f"a photo of a {n}." for n in split.class_names])  # type: ignore[union-attr]
    order = np.random.RandomState(0).permutation(len(split.items))
    expected = {n: torch.zeros_like(p) for n, p in model.named_parameters()}
    batches = [order[i : i + 4] for i in range(0, len(order), 4)]
    for index in batches:
        model.zero_grad()
        images = F.normalize(model.encode_image(split.pixels(index)), dim=-1)
        texts = F.normalize(model.encode_text(tokens), dim=-1)
        logits = model.logit_scale.exp() * images @ texts.t()
        F.cross_entropy(logits, torch.tensor([split.labels[i] for i in index])).backward()
        for n, p in model.named_parameters():
            expected[n] += p.grad.pow(2)
    assert set(got) == set(expected)
    for n in expected:
        assert torch.allclose(got[n], expected[n] / len(batches), rtol=1e-4, atol=1e-12), n
    assert float(got["token_embedding.weight"].abs().sum()) > 0  # gradients reach the text tower
    assert float(got["visual.conv1.weight"].abs().sum()) > 0  # and the image tower


def test_importance_cache_reuses_results_and_refuses_tampered_files(
    registry: Registry, tmp_path: Path
) -> None:
    backbone = registry.model("demo-clip.digits").obj.load()
    split = small_split(registry, 2)
    cache = ImportanceCache(tmp_path)
    first = cache.get(backbone, split, batch_size=5)
    second = cache.get(backbone, split, batch_size=5)
    assert not first.cached and second.cached
    assert all(torch.equal(first.values[k], second.values[k]) for k in first.values)
    assert first.record["key"]["dataset"] == "digits-5-9" and first.record["key"]["batch_size"] == 5
    assert not cache.get(backbone, split, batch_size=4).cached  # batch size is part of the key
    tensors = tmp_path / f"{first.record['digest']}.safetensors"
    tensors.write_bytes(tensors.read_bytes()[:-1] + b"\0")
    with pytest.raises(FewtransError, match="does not match its record"):
        cache.get(backbone, split, batch_size=5)


# --- the miniature: unlearning, names, oracle check ----------------------------------------


def test_shipped_demo_clip_weights_are_small_and_pinned() -> None:
    from fewtrans_board.methods.trained.demo_clip import CHECKPOINTS, weights_path
    from fewtrans_board.models.weights import file_sha256

    for name in CHECKPOINTS:
        path = weights_path(name)
        assert path.stat().st_size < 2 * 1024 * 1024, name
        assert file_sha256(path) == SHIPPED_SHA256[name], name


@pytest.mark.slow
def test_unlearning_forgets_5_9_and_keeps_0_4(miniature, registry: Registry) -> None:  # type: ignore[no-untyped-def]
    from fewtrans_board.jobs.inductive_demo import UNLEARNED, unlearned_weights

    record = miniature.unlearning
    assert record["name"] == UNLEARNED and record["retain"] == ["digits-0-4"]
    assert (record["alpha"], record["lambda"], record["importance_batch_size"]) == (30.0, 1.0, 64)
    forget = record["zero_shot"]["digits-5-9"]
    assert forget["before"]["mean"] > 90.0
    after = forget["after"]
    assert abs(after["mean"] - after["chance"]) < FORGET_CHANCE_MARGIN
    assert after["mean"] + after["ci95"] < forget["before"]["mean"] - forget["before"]["ci95"]
    # the retain drop, paired over the same test images, with its CI
    original = registry.model("demo-clip.digits").obj.load()
    unlearned = registry.model(UNLEARNED).obj.load(unlearned_weights(miniature.out))
    retain = load_split(registry.datasets.get("digits-0-4").obj, None, "test", 32)
    loss = knowledge_loss(zero_shot(original, retain), zero_shot(unlearned, retain))
    assert loss.drop + 1.96 * loss.variance**0.5 < RETAIN_DROP_BOUND
    assert unlearned.info["unlearning"]["forget"] == "digits-5-9"
    assert unlearned.weights_id == "sha256:" + record["weights"]["sha256"]


@pytest.mark.slow
def test_oracle_check_directions(miniature) -> None:  # type: ignore[no-untyped-def]
    zs = miniature.zero_shot["digits-5-9"]
    # the model trained without 5-9 and the unlearned one are both near chance on 5-9 ...
    for role in ("unlearned", "scratch"):
        assert abs(zs[role]["mean"] - 20.0) < 10.0, role
    # ... while the original knows them; on 0-4 all three are strong
    assert zs["original"]["mean"] - zs["original"]["ci95"] > 90.0
    for role, stats in miniature.zero_shot["digits-0-4"].items():
        assert stats["mean"] - stats["ci95"] > 90.0, role
    # CoOp (text prompts) loses its head start once 5-9 are unlearned, like the oracle
    gaps = miniature.gaps["coop"]
    original_gap = gaps["original - unlearned"]
    assert original_gap["mean"] - original_gap["ci95"] > 30.0
    scratch_gap = gaps["scratch - unlearned"]
    assert abs(scratch_gap["mean"]) < original_gap["mean"] - original_gap["ci95"]


def test_results_carry_the_unlearning_record(miniature) -> None:  # type: ignore[no-untyped-def]
    from fewtrans_board.results.load import load_run

    run = load_run(miniature.out / "results" / "unlearned" / "coop")
    model = run.meta["model"]
    assert model["name"] == "demo-clip.digits+unlearn:digits-5-9"
    assert model["info"]["unlearning"]["forget"] == "digits-5-9"
    assert (
        model["info"]["unlearning"]["weights"]["sha256"]
        == miniature.unlearning["weights"]["sha256"]
    )
    assert "per_tensor" not in model["info"]["unlearning"]["dampening"]


def test_site_shows_both_clip_settings(miniature) -> None:  # type: ignore[no-untyped-def]
    html = (miniature.site_index.parent / "clip-settings-demo-clip-inductive.html").read_text()
    assert "partially transductive" in html.lower() and "inductive" in html.lower()
    assert "demo-clip.digits+unlearn:digits-5-9" in html and "coop" in html
    assert "<svg" in html  # the scatter of inductive vs original accuracy
    index = miniature.site_index.read_text()
    assert "clip-settings-demo-clip-inductive.html" in index


@pytest.mark.slow
def test_unlearn_and_tkl_commands(
    miniature, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    from click.testing import CliRunner

    from fewtrans_board.cli import make_cli
    from fewtrans_board.registry.manager import get_plugin_manager

    monkeypatch.setenv("FEWTRANS_BOARD_CACHE", str(miniature.out / "cache"))  # reuse importances
    monkeypatch.setenv("FEWTRANS_BOARD_UNLEARNED", str(tmp_path / "store"))
    cli = make_cli(get_plugin_manager())
    out = tmp_path / "u.safetensors"
    args = ["unlearn", "--model", "demo-clip.digits", "--forget", "digits-5-9"]
    result = CliRunner().invoke(cli, [*args, "--out", str(out), "--device", "cpu", "--json"])
    assert result.exit_code == 0, result.output
    record = json.loads(result.output)
    assert all(p["cached"] for p in record["importances"].values())
    assert record["weights"]["sha256"] == miniature.unlearning["weights"]["sha256"]
    assert (tmp_path / "store").is_dir()
    tkl = CliRunner().invoke(
        cli,
        [
            "tkl",
            "--model",
            "demo-clip.digits",
            "--forget",
            "digits-5-9",
            "--validation",
            "digits-0-4",
            "--json",
            "--device",
            "cpu",
        ],
    )
    assert tkl.exit_code == 0, tkl.output
    report = json.loads(tkl.output)
    by_weighting = {t["weighting"]: t for t in report["tkl"]}
    assert set(by_weighting) == {"mmd", "wordnet", "pad", "uniform"}
    assert abs(by_weighting["uniform"]["value"]) < RETAIN_DROP_BOUND
    assert by_weighting["mmd"]["weights"] == {"digits-0-4": 1.0}
    bad = CliRunner().invoke(cli, [*args, "--out", str(tmp_path / "x.pt")])
    assert bad.exit_code != 0 and "Error: --out must be a .safetensors file" in bad.output


def test_unlearned_names_resolve_only_to_their_own_record(
    miniature,
    registry: Registry,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,  # type: ignore[no-untyped-def]
) -> None:
    from fewtrans_board.jobs.inductive_demo import UNLEARNED, unlearned_weights

    monkeypatch.setenv("FEWTRANS_BOARD_UNLEARNED", str(tmp_path / "empty"))
    weights = unlearned_weights(miniature.out)
    with pytest.raises(FewtransError, match="no unlearned model"):
        registry.model(UNLEARNED).obj.load()  # nothing registered in this store
    other = registry.model("demo-clip.digits-0-4+unlearn:digits-5-9").obj
    with pytest.raises(FewtransError, match="holds"):
        other.load(weights)
    copied = tmp_path / "w.safetensors"
    copied.write_bytes(weights.read_bytes()[:-2] + b"  ")
    write_record(copied, read_record(weights))
    with pytest.raises(FewtransError, match="changed after unlearning"):
        registry.model(UNLEARNED).obj.load(copied)
    store = UnlearnedStore(tmp_path / "store")
    store.register(weights)
    path, record = store.lookup(UNLEARNED)
    assert path == weights.resolve() and record["forget"] == "digits-5-9"
    with pytest.raises(FewtransError, match="image-only"):
        registry.model("demo-cnn.digits+unlearn:digits-5-9")
    with pytest.raises(FewtransError, match="MODEL\\+unlearn:DATASET"):
        registry.model("demo-clip.digits+unlearn:")


@pytest.mark.slow
def test_retraining_the_oracle_reproduces_its_accuracy(registry: Registry) -> None:
    from fewtrans_board.methods.trained.demo_clip import backbone_from_model, build_demo_clip
    from fewtrans_board.methods.trained.demo_clip_train import train

    model = build_demo_clip()
    model.load_state_dict(train(range(5)))
    retrained = backbone_from_model(model, "retrained", "retrained", "cpu", {})
    shipped = registry.model("demo-clip.digits-0-4").obj.load()
    split = load_split(registry.datasets.get("digits-0-4").obj, None, "test", 32)
    a, b = zero_shot(shipped, split), zero_shot(retrained, split)
    # other CPUs may differ in the last bits; the trained model must not
    assert abs(a.accuracy - b.accuracy) < 2.0 and b.accuracy > 95.0
    assert (a.correct == b.correct).mean() > 0.97


@pytest.mark.slow
def test_demo_inductive_command_prints_both_tables(miniature) -> None:  # type: ignore[no-untyped-def]
    from click.testing import CliRunner

    from fewtrans_board.cli import make_cli
    from fewtrans_board.registry.manager import get_plugin_manager

    args = ["demo", "--inductive", "--out", str(miniature.out), "--adapters", "coop"]
    result = CliRunner().invoke(
        make_cli(get_plugin_manager()), [*args, "--episodes", "3", "--quiet"]
    )
    assert result.exit_code == 0, result.output  # resumes the fixture's finished runs
    assert "Zero-shot accuracy on the test halves" in result.output
    assert "original - unlearned" in result.output and "digits-5-9" in result.output
    assert "site: " in result.output
