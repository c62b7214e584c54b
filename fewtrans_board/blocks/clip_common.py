"""Shared pieces of CLIP transfer methods: text tower access, prompt encoding, predictors.

CLIP methods score ``logit_scale * normalize(f(x)) @ normalize(t_c)`` with image features
``f`` and class text features ``t_c``. Predictors here also implement ``predict_names``,
which scores query images against *any* class names: base-to-novel evaluation uses it to
test on classes the adapter never saw.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from fewtrans_board.blocks.training import normalized, upcast
from fewtrans_board.core.errors import FewtransError

if TYPE_CHECKING:
    import torch
    from torch import nn

    from fewtrans_board.api.backbone import Backbone, TextEncoder
    from fewtrans_board.api.episode_data import ImageSet

TEMPLATE = "a photo of a {}."
"""FewTrans's template for CLIP methods."""

INDUCTIVE_CLIP_CODE = (
    "akres001/Rethinking-Few-Shot-CLIP-Benchmarks-A-Critical-Analysis-in-the-Inductive-Setting"
)
"""The GitHub repository of the inductive-CLIP paper's code ("Rethinking Few-Shot CLIP
Benchmarks: A Critical Analysis in the Inductive Setting")."""

INDUCTIVE_CLIP_TEMPLATES: dict[str, str] = {
    "clip-caltech101": "a photo of a {}.",
    "clip-stanford-cars": "a photo of a {}.",
    "clip-stanford-dogs": "a photo of a {}.",
    "clip-oxford-flowers": "a photo of a {}, a type of flower.",
    "clip-food101": "a photo of {}, a type of food.",
    "clip-fgvc-aircraft": "a photo of a {}, a type of aircraft.",
    "clip-sun397": "a photo of a {}.",
    "clip-dtd": "{} texture.",
    "clip-eurosat": "a centered satellite photo of {}.",
    "clip-ucf101": "a photo of a person doing {}.",
    "clip-cub": "a photo of a {}.",
    "clip-plantdoc": "a photo of a {}.",
    "digits-5-9": TEMPLATE,
}
"""Each CLIP dataset's template in the inductive-CLIP code: ``CUSTOM_TEMPLATES`` of
``FSL/trainers/clip_adapter.py`` and ``FSL/trainers/taskres.py`` (CoOp's table plus PLANTDOC,
CUB and StanfordDogs). The embedded miniature ``digits-5-9`` is not in the paper and keeps
:data:`TEMPLATE`. Other trainers of that code change a few entries
(:data:`INDUCTIVE_CLIP_TEMPLATE_CHANGES`)."""

INDUCTIVE_CLIP_TEMPLATE_CHANGES: dict[str, dict[str, str]] = {
    "clip_adapter": {},
    "kgcoop": {"clip-dtd": "a photo of a {}, a type of texture."},
    "prograd": {
        "clip-oxford-flowers": "a type of flower, a photo of a {}.",
        "clip-fgvc-aircraft": "a type of aircraft, a photo of a {}.",
        "clip-dtd": "a texture of {}.",
        "clip-food101": "a type of food, a photo of {}.",
    },
    "tcp": {
        "clip-fgvc-aircraft": "a photo of an aircraft {}.",
        "clip-dtd": "a photo of a {}, a type of texture.",
        "clip-food101": "a photo of a {}, a type of food.",
    },
    "sep": {
        "clip-stanford-cars": "a photo of a {}, a type of car.",
        "clip-fgvc-aircraft": "a photo of an aircraft {}.",
        "clip-dtd": "a photo of a {}, a type of texture.",
        "clip-food101": "a photo of a {}, a type of food.",
    },
}
"""How each trainer's hand-crafted template table differs from
:data:`INDUCTIVE_CLIP_TEMPLATES`, by the ``FSL/trainers`` file that holds it: ``clip_adapter``
(also ``taskres.py``), ``kgcoop`` (also ``coprompt.py``), ``prograd``, ``tcp``
(``CUSTOM_TEMPLATES_ori``; also ``FSL/CLIP-LoRA/main.py``) and ``sep`` (``CUSTOM_TEMPLATES_ori``
of ``sep.py`` and ``sepres.py``)."""


def inductive_clip_templates(table: str) -> dict[str, dict[str, str]]:
    """Per-dataset recipe values ``{dataset: {"template": ...}}`` of one trainer's table.

    Args:
        table: a key of :data:`INDUCTIVE_CLIP_TEMPLATE_CHANGES` (the trainer file).

    Returns:
        Every dataset of :data:`INDUCTIVE_CLIP_TEMPLATES` with that trainer's template.
    """
    changes = INDUCTIVE_CLIP_TEMPLATE_CHANGES[table]
    return {
        dataset: {"template": changes.get(dataset, template)}
        for dataset, template in INDUCTIVE_CLIP_TEMPLATES.items()
    }


DASSL_SGD: dict[str, object] = {
    "optimizer": "sgd",
    "momentum": 0.9,
    "weight_decay": 5e-4,
    "schedule": "cosine-epoch",
    "warmup_epochs": 1,
    "warmup_lr": 1e-5,
}
"""The optimiser and schedule of the inductive-CLIP paper's Dassl trainers where a config
names SGD: Dassl's defaults (``OPTIM.MOMENTUM`` 0.9, ``OPTIM.WEIGHT_DECAY`` 5e-4) and the
configs' cosine schedule after one constant warm-up epoch at 1e-5."""

DASSL_RECIPE_NOTE = (
    "Not reproduced from the paper's Dassl runs: the config's train-time augmentation "
    "(INPUT.TRANSFORMS; adapters train on the preprocessed support images, cached "
    "features where the image tower is frozen), CLIP's fp16 weights where "
    "the trainer keeps them (PREC fp16; here float32 with bf16 autocast on CUDA) and "
    "Dassl's RandomSampler batch order (here RandomState(11) permutations)."
)
"""What no CLIP adapter's recipe can take from the paper's Dassl trainers."""

TEXT_TOWER_PARTS = (
    "token_embedding",
    "positional_embedding",
    "transformer",
    "ln_final",
    "text_projection",
    "attn_mask",
)


@runtime_checkable
class NamePredictor(Protocol):
    """A predictor that can also score images against arbitrary class names."""

    def predict(self, query: ImageSet) -> torch.Tensor:
        """Logits over the episode's classes."""
        ...

    def predict_names(self, query: ImageSet, class_names: Sequence[str]) -> torch.Tensor:
        """Logits over ``class_names`` (e.g. novel classes never seen in training)."""
        ...


def require_text(backbone: Backbone, method: str) -> TextEncoder:
    """The text tower of ``backbone``, or an error naming the method that needs it.

    Args:
        backbone: the caller's backbone.
        method: adapter name, for the error message.

    Raises:
        FewtransError: the backbone has no text tower (a vision-only model).
    """
    if backbone.text is None:
        raise FewtransError(
            f"{method} needs a CLIP-style model with a text tower; {backbone.name} has none"
        )
    return backbone.text


def clip_model(backbone: Backbone, method: str) -> nn.Module:
    """The full CLIP model of a backbone with an OpenAI-style text tower.

    Raises:
        FewtransError: no text tower, or one without the token-level parts prompt methods
            hook into (e.g. a Hugging Face text tower).
    """
    text = require_text(backbone, method)
    model = text.model
    missing = [p for p in TEXT_TOWER_PARTS if not hasattr(model, p)]
    if missing:
        raise FewtransError(
            f"{method} needs an OpenAI-style open_clip text tower (token_embedding, transformer, "
            f"ln_final, text_projection); {backbone.name} lacks {', '.join(missing)}"
        )
    pooling = getattr(model, "text_pool_type", "argmax")
    if pooling != "argmax" or not _openai_token_layout(text.tokenize):
        raise FewtransError(
            f"{method} needs an OpenAI-style text tower: a start token at position 0 and "
            f"end-of-text pooling by the largest token id ('argmax'); {backbone.name} has "
            f"text_pool_type={pooling!r} and a tokenizer with another layout (e.g. a Hugging "
            "Face tokenizer). Use an OpenAI-style model such as ViT-B-16 or a CLIP method "
            "that does not edit tokens (taskres, clip-adapter, vpt-clip, zero-shot-clip)"
        )
    return model


def _openai_token_layout(tokenize: Callable[[Sequence[str]], torch.Tensor]) -> bool:
    """Whether ``tokenize`` writes [start, word, word, end, 0...] with end the largest id.

    Prompt learners overwrite the positions after the start token and find the end token
    by ``argmax``; other layouts would silently overwrite class-name tokens.
    """
    tokens = [int(t) for t in tokenize(["photo photo"])[0]]
    used = [t for t in tokens if t != 0]
    return (
        len(used) == 4
        and tokens[:4] == used
        and used[1] == used[2] != used[0]
        and max(tokens) == used[3]
        and tokens.index(used[3]) == 3
    )


def encode_text_embeddings(
    model: nn.Module, embeddings: torch.Tensor, tokens: torch.Tensor
) -> torch.Tensor:
    """``encode_text`` from token embeddings onwards (the CoOp family edits the embeddings).

    Args:
        model: an open_clip ``CLIP`` model.
        embeddings: ``[N, L, W]`` token embeddings (possibly with learned context).
        tokens: ``[N, L]`` token ids, used to find the end-of-text position.

    Returns:
        Unnormalised text features ``[N, D]``, equal to ``model.encode_text(tokens)`` when
        ``embeddings == model.token_embedding(tokens)``.
    """
    from open_clip.transformer import text_global_pool

    clip: Any = model  # open_clip's attributes are untyped nn.Module members
    cast = clip.transformer.get_cast_dtype()
    x = embeddings.to(cast) + clip.positional_embedding.to(cast)
    x = clip.transformer(x, attn_mask=clip.attn_mask)
    x = clip.ln_final(x)
    pooled: torch.Tensor = text_global_pool(
        x, tokens, clip.text_pool_type, eos_token_id=getattr(clip, "text_eos_id", None)
    )
    projection = clip.text_projection
    if projection is None:
        return pooled
    features: torch.Tensor = (
        projection(pooled) if hasattr(projection, "weight") else pooled @ projection
    )
    return features


def class_prompts(class_names: Sequence[str], template: str = TEMPLATE) -> list[str]:
    """The class prompts ``template.format(name)``, in the order of ``class_names``."""
    return [template.format(name) for name in class_names]


def handcrafted_text_features(
    backbone: Backbone, class_names: Sequence[str], template: str = TEMPLATE
) -> torch.Tensor:
    """Frozen, normalised text features ``[C, D]`` of ``template.format(name)``."""
    import torch

    assert backbone.text is not None
    with torch.no_grad():
        features = backbone.text.encode(
            backbone.text.tokenize(class_prompts(class_names, template))
        )
    return normalized(features)


def cached_for(
    class_names: Sequence[str],
    compute: Callable[[Sequence[str]], torch.Tensor],
    episode_features: torch.Tensor | None = None,
) -> Callable[[Sequence[str]], torch.Tensor]:
    """Wrap ``compute`` so that the episode's own class names are computed at most once.

    Args:
        class_names: the episode's class names, in label order.
        compute: ``class names -> [C, D]`` text features.
        episode_features: ``compute(class_names)`` if the caller already has it (then
            ``compute`` never runs for the episode's names).

    Returns:
        ``compute`` with the result for ``class_names`` memoised.
    """
    episode = list(class_names)
    memo: dict[str, torch.Tensor] = {}
    if episode_features is not None:
        memo["episode"] = episode_features

    def text_features(names: Sequence[str]) -> torch.Tensor:
        if list(names) != episode:
            return compute(names)
        if "episode" not in memo:
            memo["episode"] = compute(names)
        return memo["episode"]

    return text_features


class ClipPredictor:
    """Scores images against text features produced for any class names.

    Args:
        image_features: ``pixels -> [N, D]`` (need not be normalised).
        text_features: ``class names -> [C, D]`` (need not be normalised).
        class_names: the episode's class names, in label order.
        logit_scale: CLIP's frozen temperature.
    """

    def __init__(
        self,
        image_features: Callable[[ImageSet], torch.Tensor],
        text_features: Callable[[Sequence[str]], torch.Tensor],
        class_names: Sequence[str],
        logit_scale: float,
    ) -> None:
        self.image_features = image_features
        self.text_features = text_features
        self.class_names = list(class_names)
        self.logit_scale = logit_scale

    def predict_names(self, query: ImageSet, class_names: Sequence[str]) -> torch.Tensor:
        """``logit_scale * cos(image, text)`` for every query and class name."""
        import torch

        with torch.no_grad():
            images = normalized(self.image_features(query))
            texts = normalized(self.text_features(class_names)).to(images.device)
        return self.logit_scale * images @ texts.t()

    def predict(self, query: ImageSet) -> torch.Tensor:
        """Logits over the episode's classes."""
        return self.predict_names(query, self.class_names)


def batched_images(
    encoder: nn.Module, pixels: torch.Tensor, device: str, batch_size: int = 256
) -> torch.Tensor:
    """Run an image encoder over pixels in batches (no gradient)."""
    import torch

    from fewtrans_board.blocks.training import autocast

    outputs = []
    with torch.no_grad(), autocast(device):
        for start in range(0, pixels.shape[0], batch_size):
            outputs.append(upcast(encoder(pixels[start : start + batch_size].to(device))))
    return torch.cat(outputs)
