"""The inductive-CLIP paper's recipes of the 14 CLIP methods, and the template field.

The expected numbers are literals read from the paper's code (repository
akres001/Rethinking-Few-Shot-CLIP-Benchmarks-A-Critical-Analysis-in-the-Inductive-Setting),
each with the file it comes from: these tests are the transcription's oracle. The
template tests compare the text features an adapter builds with open_clip's own zero-shot
classifier of the same template (independent of our code) and with ``clip_common``'s.
"""

from __future__ import annotations

from typing import Any

import open_clip
import pytest
import torch

from fewtrans_board.api.adapter import Adapter
from fewtrans_board.api.recipe import Recipe
from fewtrans_board.blocks.clip_common import TEMPLATE, handcrafted_text_features
from fewtrans_board.core.errors import ConfigError, RegistrationError
from fewtrans_board.methods.adapters.clip_prompts import (
    CocoopAdapter,
    CoopAdapter,
    CopromptAdapter,
    IvlpAdapter,
    KgcoopAdapter,
    MapleAdapter,
    ProgradAdapter,
    PromptSrcAdapter,
    SepAdapter,
    SepresAdapter,
    TcpAdapter,
)
from fewtrans_board.methods.adapters.clip_tuning import (
    ClipAdapterAdapter,
    ClipLoraAdapter,
    TaskResAdapter,
)
from fewtrans_board.testing import tiny_clip_backbone, toy_episode

PAPER_REPO = (
    "akres001/Rethinking-Few-Shot-CLIP-Benchmarks-A-Critical-Analysis-in-the-Inductive-Setting"
)
RECIPE = "inductive-clip"

METHODS: dict[str, type[Adapter]] = {
    "clip-adapter": ClipAdapterAdapter,
    "coop": CoopAdapter,
    "cocoop": CocoopAdapter,
    "kgcoop": KgcoopAdapter,
    "prograd": ProgradAdapter,
    "taskres": TaskResAdapter,
    "maple": MapleAdapter,
    "promptsrc": PromptSrcAdapter,
    "ivlp": IvlpAdapter,
    "tcp": TcpAdapter,
    "coprompt": CopromptAdapter,
    "sep": SepAdapter,
    "clip-lora": ClipLoraAdapter,
    "sepres": SepresAdapter,
}
"""The 14 methods of the paper (FSL/run_process_parallel.py's 'all' list)."""

CLIP_DATASETS = (
    "clip-caltech101",
    "clip-stanford-cars",
    "clip-stanford-dogs",
    "clip-oxford-flowers",
    "clip-food101",
    "clip-fgvc-aircraft",
    "clip-sun397",
    "clip-dtd",
    "clip-eurosat",
    "clip-ucf101",
    "clip-cub",
    "clip-plantdoc",
    "digits-5-9",
)

# Dassl defaults the vit_b16.yaml files do not override
# (models_prograddassl/Dassl.pytorch/dassl/config/defaults.py, the same in
# Dassl.ProGrad.pytorch and SEP.Dassl.pytorch): OPTIM.MOMENTUM 0.9, OPTIM.WEIGHT_DECAY 5e-4;
# every vit_b16.yaml: LR_SCHEDULER cosine, WARMUP_EPOCH 1, WARMUP_TYPE constant,
# WARMUP_CONS_LR 1e-5.
DASSL_SGD = {"optimizer": "sgd", "momentum": 0.9, "weight_decay": 5e-4}
DASSL_SCHEDULE = {"schedule": "cosine-epoch", "warmup_epochs": 1, "warmup_lr": 1e-5}

PAPER_VALUES: dict[str, dict[str, Any]] = {
    # FSL/configs/trainers/CLIP_Adapter/vit_b16.yaml; FSL/trainers/clip_adapter.py (ratio 0.2)
    "clip-adapter": {
        **DASSL_SGD,
        **DASSL_SCHEDULE,
        "lr": 0.002,
        "epochs": 100,
        "batch_size": 32,
        "ratio": 0.2,
    },
    # FSL/configs/trainers/CoOp/vit_b16.yaml; FSL/train.py (TRAINER.COOP.N_CTX 16)
    "coop": {
        **DASSL_SGD,
        **DASSL_SCHEDULE,
        "lr": 0.002,
        "epochs": 100,
        "batch_size": 32,
        "n_ctx": 16,
        "ctx_init": "",
    },
    # FSL/configs/trainers/CoCoOp/vit_b16.yaml (BATCH_SIZE 1, MAX_EPOCH 10, N_CTX 16, CTX_INIT "")
    "cocoop": {
        **DASSL_SGD,
        **DASSL_SCHEDULE,
        "lr": 0.002,
        "epochs": 10,
        "batch_size": 1,
        "n_ctx": 16,
        "ctx_init": "",
    },
    # FSL/configs/trainers/KgCoOp/vit_b16.yaml; FSL/run_kgcoop.sh (NCTX=4, WEIGHT=8.0);
    # FSL/trainers/kgcoop.py (CTX_INIT -> 'a photo of a')
    "kgcoop": {
        **DASSL_SGD,
        **DASSL_SCHEDULE,
        "lr": 0.002,
        "epochs": 100,
        "batch_size": 128,
        "n_ctx": 4,
        "ctx_init": "a photo of a",
        "kg_weight": 8.0,
    },
    # FSL/configs/trainers/ProGrad/vit_b16.yaml (LOSS.T 1.0); FSL/run_prograd.sh (NCTX=16, LAMBDA=1.0)
    "prograd": {
        **DASSL_SGD,
        **DASSL_SCHEDULE,
        "lr": 0.002,
        "epochs": 100,
        "batch_size": 128,
        "n_ctx": 16,
        "prograd_lambda": 1.0,
        "temperature": 1.0,
    },
    # FSL/configs/trainers/TaskRes/vit_b16.yaml (adam, LR 0.0002, MAX_EPOCH 100, BATCH_SIZE 256);
    # FSL/train.py (RESIDUAL_SCALE 0.5)
    "taskres": {
        **DASSL_SCHEDULE,
        "optimizer": "adam",
        "weight_decay": 5e-4,
        "lr": 2e-4,
        "epochs": 100,
        "batch_size": 256,
        "alpha": 0.5,
    },
    # FSL/configs/trainers/MaPLe/vit_b16.yaml
    "maple": {
        **DASSL_SGD,
        **DASSL_SCHEDULE,
        "lr": 0.0035,
        "epochs": 5,
        "batch_size": 4,
        "n_ctx": 2,
        "depth": 9,
        "ctx_init": "a photo of a",
    },
    # FSL/configs/trainers/PromptSRC/vit_b16.yaml (GPA_MEAN 45, GPA_STD 5 of MAX_EPOCH 50)
    "promptsrc": {
        **DASSL_SGD,
        **DASSL_SCHEDULE,
        "lr": 0.0025,
        "epochs": 50,
        "batch_size": 4,
        "n_ctx_text": 4,
        "n_ctx_vision": 4,
        "depth": 9,
        "text_weight": 25.0,
        "image_weight": 10.0,
        "gpa_mean": 45 / 50,
        "gpa_std": 5 / 50,
    },
    # FSL/configs/trainers/IVLP/vit_b16.yaml
    "ivlp": {
        **DASSL_SGD,
        **DASSL_SCHEDULE,
        "lr": 0.0025,
        "epochs": 20,
        "batch_size": 4,
        "n_ctx_text": 4,
        "n_ctx_vision": 4,
        "depth": 9,
    },
    # FSL/configs/trainers/TCP/vit_b16.yaml (adam_tpc); Dassl.pytorch dassl/optim/optimizer.py
    # (adam_tpc: eps=1e-3); FSL/trainers/tcp.py (8.0 * score); clip_text_tcp/model.py (layers=[8])
    "tcp": {
        **DASSL_SCHEDULE,
        "optimizer": "adam",
        "adam_eps": 1e-3,
        "weight_decay": 5e-4,
        "lr": 0.002,
        "epochs": 50,
        "batch_size": 32,
        "n_ctx": 4,
        "ctx_init": "",
        "kg_weight": 8.0,
        "layer": 8,
    },
    # FSL/configs/trainers/CoPrompt/vit_b16.yaml (W: 1.0)
    "coprompt": {
        **DASSL_SGD,
        **DASSL_SCHEDULE,
        "lr": 0.0035,
        "epochs": 8,
        "batch_size": 4,
        "n_ctx": 2,
        "depth": 9,
        "consistency_weight": 1.0,
    },
    # FSL/configs/trainers/SEP/vit_b16.yaml (adam, EPS 1e-3); FSL/run_sep.sh (NCTX=6, NCTX_V=4,
    # WEIGHT=8.0, WEIGHT_V=6.0); SEP.Dassl.pytorch defaults (WEIGHT_DECAY 5e-4)
    "sep": {
        **DASSL_SCHEDULE,
        "optimizer": "adam",
        "adam_eps": 1e-3,
        "weight_decay": 5e-4,
        "lr": 0.0025,
        "epochs": 50,
        "batch_size": 32,
        "n_ctx_text": 6,
        "n_ctx_vision": 4,
        "text_weight": 8.0,
        "image_weight": 6.0,
    },
    # FSL/run_sepres.sh (ALPHA=0.1) over SEP's settings
    "sepres": {
        "optimizer": "adam",
        "adam_eps": 1e-3,
        "lr": 0.0025,
        "epochs": 50,
        "residual_alpha": 0.1,
    },
    # FSL/CLIP-LoRA/run_utils.py (lr 2e-4, batch 32, r 2, alpha 1, dropout 0.25);
    # FSL/CLIP-LoRA/lora.py (AdamW weight_decay=1e-2)
    "clip-lora": {
        "optimizer": "adamw",
        "weight_decay": 1e-2,
        "lr": 2e-4,
        "batch_size": 32,
        "rank": 2,
        "alpha": 1.0,
        "dropout": 0.25,
    },
}

PAPER_TEMPLATES: dict[str, dict[str, str]] = {
    # FSL/trainers/clip_adapter.py and taskres.py CUSTOM_TEMPLATES
    "clip-adapter": {
        "clip-dtd": "{} texture.",
        "clip-food101": "a photo of {}, a type of food.",
        "clip-fgvc-aircraft": "a photo of a {}, a type of aircraft.",
        "clip-stanford-dogs": "a photo of a {}.",
        "clip-plantdoc": "a photo of a {}.",
    },
    "taskres": {"clip-eurosat": "a centered satellite photo of {}.", "clip-dtd": "{} texture."},
    # FSL/trainers/kgcoop.py CUSTOM_TEMPLATES
    "kgcoop": {"clip-dtd": "a photo of a {}, a type of texture.", "clip-cub": "a photo of a {}."},
    # FSL/trainers/prograd.py CUSTOM_TEMPLATES
    "prograd": {
        "clip-oxford-flowers": "a type of flower, a photo of a {}.",
        "clip-food101": "a type of food, a photo of {}.",
        "clip-dtd": "a texture of {}.",
    },
    # FSL/trainers/tcp.py CUSTOM_TEMPLATES_ori
    "tcp": {
        "clip-fgvc-aircraft": "a photo of an aircraft {}.",
        "clip-stanford-cars": "a photo of a {}.",
    },
    # FSL/trainers/coprompt.py CUSTOM_TEMPLATES
    "coprompt": {"clip-dtd": "a photo of a {}, a type of texture."},
    # FSL/trainers/sep.py and sepres.py CUSTOM_TEMPLATES_ori
    "sep": {
        "clip-stanford-cars": "a photo of a {}, a type of car.",
        "clip-food101": "a photo of a {}, a type of food.",
    },
    "sepres": {"clip-stanford-cars": "a photo of a {}, a type of car."},
    # FSL/CLIP-LoRA/main.py CUSTOM_TEMPLATES
    "clip-lora": {
        "clip-ucf101": "a photo of a person doing {}.",
        "clip-fgvc-aircraft": "a photo of an aircraft {}.",
    },
}

NO_TEMPLATE = {"coop", "cocoop", "maple", "ivlp", "promptsrc"}
"""Methods whose paper trainer builds no hand-crafted prompt (no per-dataset template)."""


def recipe_of(name: str) -> Recipe:
    return METHODS[name].recipe(RECIPE)


@pytest.mark.parametrize("name", list(METHODS))
def test_every_method_declares_the_paper_recipe_citing_its_files(name: str) -> None:
    adapter = METHODS[name]
    assert adapter.name == name
    recipe = recipe_of(name)
    assert PAPER_REPO in recipe.source
    assert "vit_b16.yaml" in recipe.source or "CLIP-LoRA/" in recipe.source
    assert recipe.notes.strip()
    assert adapter.schema()["recipes"][0]["name"] == RECIPE


@pytest.mark.parametrize("name", list(METHODS))
def test_every_recipe_builds_a_valid_config_on_every_clip_dataset(name: str) -> None:
    adapter = METHODS[name]
    adapter.check_class()  # registration: every recipe value the Config refuses fails here
    recipe = recipe_of(name)
    assert set(recipe.per_dataset) <= set(CLIP_DATASETS)
    if name not in NO_TEMPLATE:
        assert set(recipe.per_dataset) == set(CLIP_DATASETS)
    for dataset in CLIP_DATASETS:
        config = adapter.Config.from_dict(recipe.values_for(dataset))
        assert config.template.count("{}") == 1
    assert recipe_of(name).values_for("digits-5-9").get("template", TEMPLATE) == TEMPLATE


@pytest.mark.parametrize("name", list(METHODS))
def test_transcribed_values_match_the_paper_files(name: str) -> None:
    recipe = recipe_of(name)
    config = METHODS[name].Config.from_dict(recipe.values_for("clip-caltech101"))
    for field, expected in PAPER_VALUES[name].items():
        got = getattr(config, field)
        assert got == (pytest.approx(expected) if isinstance(expected, float) else expected), field
    for dataset, template in PAPER_TEMPLATES.get(name, {}).items():
        assert recipe.values_for(dataset)["template"] == template, dataset
    if name in NO_TEMPLATE:
        assert recipe.per_dataset == {}


def test_prograd_starts_its_context_from_the_dataset_template() -> None:
    # FSL/trainers/prograd.py: ctx_init = CUSTOM_TEMPLATES[dataset].replace(" {}.", "")
    recipe = recipe_of("prograd")
    assert recipe.values_for("clip-oxford-flowers")["ctx_init"] == "a type of flower, a photo of a"
    assert recipe.values_for("clip-eurosat")["ctx_init"] == "a centered satellite photo of"
    assert recipe.values_for("clip-caltech101")["ctx_init"] == "a photo of a"


def test_clip_lora_epochs_follow_500_iterations_per_shot() -> None:
    """FSL/run_lora.sh --n_iters 500; lora.py total_iters = n_iters * shots; batch 32.

    At 16 shots an epoch of C classes is ceil(16 C / 32) steps: Caltech101 (100 classes)
    50 steps, 8000 / 50 = 160 epochs; EuroSAT (10) 5 steps, 1600 epochs; SUN397 (397) 199
    steps, 8000 / 199 = 40.2 -> 40.
    """
    from fewtrans_board.datasets.builtin_clip import clip_datasets
    from fewtrans_board.datasets.digits_subsets import DIGITS_5_9
    from fewtrans_board.methods.adapters.clip_tuning.clip_lora import CLASS_COUNTS

    recipe = recipe_of("clip-lora")
    assert recipe.values_for("clip-caltech101")["epochs"] == 160
    assert recipe.values_for("clip-eurosat")["epochs"] == 1600
    assert recipe.values_for("clip-sun397")["epochs"] == 40
    specs = {s.name: len(s.class_ids) for s in [*clip_datasets(), DIGITS_5_9]}
    assert specs == CLASS_COUNTS


def test_a_template_without_one_place_for_the_name_is_refused() -> None:
    for adapter in (TaskResAdapter, CoopAdapter, SepresAdapter):
        assert adapter.Config().template == TEMPLATE == "a photo of a {}."
        for bad in ("a photo of a cat.", "{} and {}", "a photo of {name}."):
            with pytest.raises(ConfigError, match=r"\.template: must contain exactly one"):
                adapter.Config.from_dict({"template": bad})
    recipe = Recipe(RECIPE, "a test", {}, per_dataset={"clip-dtd": {"template": "texture"}})
    broken = type("Broken", (TaskResAdapter,), {"recipes": (recipe,)})
    with pytest.raises(RegistrationError, match="on clip-dtd is not a valid configuration"):
        broken.check_class()


# ---------------------------------------------------------------------------------------
# The template reaches the text tower.

OTHER = "a centered satellite photo of {}."


@pytest.fixture(scope="module")
def backbone():  # type: ignore[no-untyped-def]
    return tiny_clip_backbone(seed=3)


@pytest.fixture(scope="module")
def episode():  # type: ignore[no-untyped-def]
    return toy_episode(shots=(2, 1, 3), seed=4)


def open_clip_text(backbone, names: list[str], template: str) -> torch.Tensor:  # type: ignore[no-untyped-def]
    """open_clip's zero-shot classifier of one template: normalised ``[C, D]``."""
    weights = open_clip.build_zero_shot_classifier(
        backbone.text.model,
        tokenizer=backbone.text.tokenizer,
        classnames=names,
        templates=[template],
        device="cpu",
        use_tqdm=False,
    )
    return weights.t()


def built_text(name: str, backbone, episode, template: str) -> torch.Tensor:  # type: ignore[no-untyped-def]
    """The hand-crafted (zero-shot) class text features the adapter builds, normalised."""
    import torch.nn.functional as F

    adapter = METHODS[name]
    torch.manual_seed(0)
    options: dict[str, Any] = {"template": template, "epochs": 1}
    if name == "coprompt":
        options["missing_descriptions"] = "template"
    config = adapter.Config.from_dict(options)
    names = episode.class_names
    if name in ("taskres", "clip-adapter", "clip-lora"):
        state = adapter().build(backbone, episode.support, names, config)  # type: ignore[attr-defined]
        features = state.predictor().text_features(names)  # zero residual / zero LoRA B
    else:
        session = adapter().session(backbone, episode.support, names, config)  # type: ignore[attr-defined]
        # CoPrompt: no shipped descriptions for 'class 0', ...: each gets the template's.
        features = torch.cat(session.descriptions) if name == "coprompt" else session.handcrafted
    return F.normalize(features.detach().double(), dim=-1)


TEMPLATED = ["taskres", "clip-adapter", "clip-lora", "kgcoop", "tcp", "sep", "sepres", "coprompt"]


@pytest.mark.parametrize("name", TEMPLATED)
def test_the_config_template_reaches_the_hand_crafted_text_features(
    name: str, backbone, episode
) -> None:  # type: ignore[no-untyped-def]
    names = episode.class_names
    results = {}
    for template in (TEMPLATE, OTHER):
        got = built_text(name, backbone, episode, template)
        expected = handcrafted_text_features(backbone, names, template).double()
        oracle = open_clip_text(backbone, names, template).double()
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)
        torch.testing.assert_close(got, oracle, atol=1e-5, rtol=0)
        results[template] = got
    assert not torch.allclose(results[TEMPLATE], results[OTHER], atol=1e-3)


def test_prograd_teacher_uses_the_config_template(backbone, episode) -> None:  # type: ignore[no-untyped-def]
    logits = {}
    for template in (TEMPLATE, OTHER):
        config = ProgradAdapter.Config.from_dict({"template": template, "epochs": 1})
        session = ProgradAdapter().session(backbone, episode.support, episode.class_names, config)
        oracle = open_clip_text(backbone, episode.class_names, template)
        expected = session.logit_scale * session.features @ oracle.t()
        torch.testing.assert_close(session.zero_shot_logits, expected, atol=1e-4, rtol=0)
        logits[template] = session.zero_shot_logits
    assert not torch.allclose(logits[TEMPLATE], logits[OTHER], atol=1e-3)


def test_prograd_recipe_context_is_the_template_words(backbone, episode) -> None:  # type: ignore[no-untyped-def]
    recipe = recipe_of("prograd")
    # 'a type of flower , a photo of a': 9 tokens; 'a texture of': 3 (FSL/trainers/prograd.py)
    for dataset, tokens in (("clip-oxford-flowers", 9), ("clip-dtd", 3)):
        config = ProgradAdapter.Config.from_dict(recipe.values_for(dataset))
        session = ProgradAdapter().session(backbone, episode.support, episode.class_names, config)
        assert session.ctx.shape[0] == tokens


def test_a_recipe_template_reaches_the_text_tower(backbone, episode) -> None:  # type: ignore[no-untyped-def]
    recipe = recipe_of("clip-adapter")
    template = recipe.values_for("clip-dtd")["template"]
    assert template == "{} texture."  # FSL/trainers/clip_adapter.py CUSTOM_TEMPLATES
    config = ClipAdapterAdapter.Config.from_dict(recipe.values_for("clip-dtd"))
    state = ClipAdapterAdapter().build(backbone, episode.support, episode.class_names, config)
    got = state.predictor().text_features(episode.class_names)
    oracle = open_clip_text(backbone, episode.class_names, template)
    torch.testing.assert_close(
        torch.nn.functional.normalize(got, dim=-1), oracle, atol=1e-5, rtol=0
    )
