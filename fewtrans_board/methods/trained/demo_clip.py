"""The demo dual encoder: a tiny open_clip CLIP trained contrastively on the digits.

It is an ordinary open_clip ``CLIP`` (ViT image tower, OpenAI-style text tower with a
causal mask and end-of-text pooling) with a small word-level tokenizer, so every CLIP
adapter that accepts ``open-clip:ViT-B-16/openai`` accepts it too. Two checkpoints ship
with the package (each well under 2 MB), both reproduced within tolerance by
``python -m fewtrans_board.methods.trained.demo_clip_train``:

- ``demo-clip.digits``: trained on the train halves of all ten digits;
- ``demo-clip.digits-0-4``: the same recipe without the digits 5-9, the oracle the
  inductive miniature compares unlearning against.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fewtrans_board.api.backbone import Backbone

if TYPE_CHECKING:
    import torch
    from torch import nn

IMAGE_SIZE = 32
EMBED_DIM = 32
CONTEXT_LENGTH = 32
UNKNOWN_BUCKETS = 64
"""Unknown words are hashed (crc32) into this many shared ids instead of one ``<unk>``."""

CHECKPOINTS = {
    "demo-clip.digits": "demo-clip-digits.safetensors",
    "demo-clip.digits-0-4": "demo-clip-digits-0-4.safetensors",
}
"""Model name -> shipped weights file."""

TRAINED_DIGITS = {"demo-clip.digits": tuple(range(10)), "demo-clip.digits-0-4": tuple(range(5))}
"""The digit classes each checkpoint was trained on."""

VOCABULARY = (
    *("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"),
    *("a", "an", "the", "of", "photo", "picture", "image", "digit", "number", "numeral"),
    *("handwritten", "written", "drawing", "drawn", "scan", "low", "resolution", "small"),
    *("white", "black", "on", "with", "stroke", "strokes", "loop", "loops", "line", "lines"),
    *("curve", "curved", "straight", "vertical", "horizontal", "top", "bottom", "closed"),
    *("open", "round", "oval", "circle", "shape", "bar", "hook", "tail", "diagonal"),
    *("x", ".", ",", "-"),
)
"""Words with their own token id (duplicates are ignored); every other word is hashed."""

_WORD = re.compile(r"[a-z0-9]+|[^\sa-z0-9]")


class WordTokenizer:
    """Word-level tokenizer with OpenAI CLIP's token layout.

    Text is lowercased and split into words and single punctuation marks. Ids: ``0`` is
    padding, then the vocabulary words, then ``UNKNOWN_BUCKETS`` hash buckets for other
    words, then the start token and the end token, which has the largest id (open_clip's
    ``argmax`` pooling finds it). Sequences longer than the context keep their first
    ``context_length - 2`` tokens.

    Args:
        vocabulary: the known words.
        buckets: number of hash buckets for unknown words.
        context_length: token sequence length.
    """

    def __init__(
        self,
        vocabulary: Sequence[str] = VOCABULARY,
        buckets: int = UNKNOWN_BUCKETS,
        context_length: int = CONTEXT_LENGTH,
    ) -> None:
        words = list(dict.fromkeys(vocabulary))
        self.ids = {word: i + 1 for i, word in enumerate(words)}
        self.first_bucket = len(words) + 1
        self.buckets = buckets
        self.sot_token_id = self.first_bucket + buckets
        self.eot_token_id = self.sot_token_id + 1
        self.vocab_size = self.eot_token_id + 1
        self.context_length = context_length

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` without start and end tokens."""
        return [self._id(word) for word in _WORD.findall(text.lower())]

    def _id(self, word: str) -> int:
        known = self.ids.get(word)
        if known is not None:
            return known
        return self.first_bucket + zlib.crc32(word.encode()) % self.buckets

    def __call__(self, texts: str | Sequence[str]) -> torch.Tensor:
        """Token ids ``[N, context_length]``: start, words, end, zero padding."""
        import torch

        if isinstance(texts, str):
            texts = [texts]
        out = torch.zeros(len(texts), self.context_length, dtype=torch.long)
        for row, text in enumerate(texts):
            ids = self.encode(text)[: self.context_length - 2]
            tokens = [self.sot_token_id, *ids, self.eot_token_id]
            out[row, : len(tokens)] = torch.tensor(tokens)
        return out


def build_demo_clip(tokenizer: WordTokenizer | None = None) -> nn.Module:
    """The untrained dual encoder: ViT 32 px / patch 8, width 64, 3 blocks; text 2 blocks."""
    from open_clip.model import CLIP

    tokenizer = tokenizer or WordTokenizer()
    model: nn.Module = CLIP(
        embed_dim=EMBED_DIM,
        vision_cfg={
            "image_size": IMAGE_SIZE,
            "patch_size": 8,
            "width": 64,
            "layers": 3,
            "head_width": 16,
        },
        text_cfg={
            "context_length": tokenizer.context_length,
            "vocab_size": tokenizer.vocab_size,
            "width": 64,
            "heads": 4,
            "layers": 2,
        },
    )
    return model


def weights_path(name: str) -> Path:
    """Location of the shipped weights of ``demo-clip.digits`` or ``demo-clip.digits-0-4``."""
    return Path(
        str(
            resources.files("fewtrans_board.default_plugins").joinpath("weights", CHECKPOINTS[name])
        )
    )


def backbone_from_model(
    model: nn.Module, name: str, weights_id: str, device: str, info: dict[str, Any]
) -> Backbone:
    """Wrap a demo dual encoder as a CLIP backbone."""
    from fewtrans_board.models.open_clip_family import backbone_from_open_clip

    return backbone_from_open_clip(
        model,
        WordTokenizer(),
        name=name,
        weights_id=weights_id,
        architecture="demo-clip",
        device=device,
        info={"family": "demo", **info},
    )


def load_demo_clip(name: str, weights: Path | None, device: str) -> Backbone:
    """Load a shipped checkpoint (or a given one) into the demo dual encoder.

    Raises:
        FewtransError: the checkpoint does not fit the architecture.
    """
    from fewtrans_board.models.weights import fit_checkpoint

    path = weights if weights is not None else weights_path(name)
    model = build_demo_clip()
    weights_id = fit_checkpoint(model, path, f"demo dual encoder {name!r}")
    return backbone_from_model(
        model,
        name,
        weights_id,
        device,
        {"weights": path.name, "trained_digits": list(TRAINED_DIGITS.get(name, ()))},
    )
