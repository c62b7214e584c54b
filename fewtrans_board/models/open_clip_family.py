"""open_clip backbones: image tower as the image encoder, plus the text tower."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from fewtrans_board.models.backbone import Backbone

if TYPE_CHECKING:
    import torch
    from torch import nn


class OpenClipText:
    """:class:`~fewtrans_board.models.backbone.TextEncoder` over an open_clip model.

    Args:
        model: the full open_clip model.
        tokenizer: the model's tokenizer (callable on a list of strings).
    """

    def __init__(self, model: nn.Module, tokenizer: Callable[..., torch.Tensor]) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.logit_scale = float(model.logit_scale.exp().item())  # type: ignore[operator]

    def tokenize(self, texts: Sequence[str]) -> torch.Tensor:
        """Tokenize prompts to ``[N, context_length]`` token ids."""
        return self.tokenizer(list(texts))

    def encode(self, tokens: torch.Tensor) -> torch.Tensor:
        """Encode tokens with the model's text tower (unnormalised features)."""
        device = next(self.model.parameters()).device
        return self.model.encode_text(tokens.to(device))  # type: ignore[operator,no-any-return]


def backbone_from_open_clip(
    model: nn.Module,
    tokenizer: Callable[..., Any],
    *,
    name: str,
    weights_id: str,
    architecture: str,
    device: str = "cpu",
    info: dict[str, Any] | None = None,
) -> Backbone:
    """Wrap an open_clip model as a :class:`Backbone` with a text encoder.

    Args:
        model: an open_clip ``CLIP``/``CustomTextCLIP`` model.
        tokenizer: its tokenizer.
        name: registry name of the model.
        weights_id: content hash of the weights.
        architecture: the open_clip architecture name.
        device: device the model lives on.
        info: extra provenance.
    """
    model = model.to(device).eval()
    visual: Any = model.visual
    image_size = visual.image_size
    side = int(image_size[0] if isinstance(image_size, (tuple, list)) else image_size)
    feature_dim = int(visual.output_dim)
    return Backbone(
        name=name,
        image_encoder=visual,
        feature_dim=feature_dim,
        image_size=side,
        text=OpenClipText(model, tokenizer),
        weights_id=weights_id,
        device=device,
        info={"family": "open_clip", "architecture": architecture, **(info or {})},
    )
