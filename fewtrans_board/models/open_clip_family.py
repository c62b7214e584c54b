"""open_clip backbones: image tower as the image encoder, plus the text tower."""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fewtrans_board.api.backbone import Backbone
from fewtrans_board.core.errors import FewtransError
from fewtrans_board.models.weights import fit_checkpoint

if TYPE_CHECKING:
    import torch
    from torch import nn


def tokenizer_for(architecture: str) -> Any:
    """open_clip's tokenizer of ``architecture``, its vocabulary read once per process.

    Building one reads and parses the 1.3 MB BPE vocabulary (0.1-0.2 s); every model of an
    architecture gets a shallow copy of the first, so setting an attribute on one (the
    context length) leaves the others alone, and they share only the vocabulary tables and
    the encoding memo. The cache is keyed by open_clip's factory too: a replaced factory is
    never served what the real one built.
    """
    import open_clip

    return copy.copy(_first_tokenizer(architecture, open_clip.get_tokenizer))


@functools.lru_cache(maxsize=16)
def _first_tokenizer(architecture: str, factory: Callable[[str], Any]) -> Any:
    return factory(architecture)


class OpenClipText:
    """:class:`~fewtrans_board.api.backbone.TextEncoder` over an open_clip model.

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


def load_open_clip_backbone(
    argument: str, weights: Path | None, device: str = "cpu", *, name: str | None = None
) -> Backbone:
    """Create an open_clip model ``ARCH[/PRETRAINED_TAG]`` and wrap it as a :class:`Backbone`.

    Args:
        argument: architecture and optional pretrained tag, e.g. ``"ViT-B-16/openai"``.
        weights: local checkpoint (state dict of the whole CLIP model); ``None`` downloads
            the pretrained tag. With both, the tag decides how the model is built (e.g.
            QuickGELU for ``openai`` weights), so name it: ``ViT-B-16/openai --weights F``.
        device: torch device.
        name: registry name recorded on the backbone.

    Raises:
        FewtransError: unknown architecture, missing tag, failed download or a checkpoint
            that does not fit.
    """
    import open_clip

    from fewtrans_board.models.hub import hub_access, offline_hint

    arch, _, tag = argument.partition("/")
    if arch not in open_clip.list_models():
        raise FewtransError(f"open_clip has no architecture {arch!r}; see open_clip.list_models()")
    if weights is None and not tag:
        raise FewtransError(
            f"open-clip:{argument}: give a pretrained tag (ARCH/TAG, see "
            "open_clip.list_pretrained()) or a local checkpoint with --weights"
        )
    # A local checkpoint of a tagged model must be built the way the tag is: OpenAI's
    # weights need QuickGELU, and plain create_model(arch) would silently use GELU.
    pretrained_cfg = open_clip.get_pretrained_cfg(arch, tag) if tag else {}
    if tag and not pretrained_cfg:
        known = [t for a, t in open_clip.list_pretrained() if a == arch]
        raise FewtransError(
            f"open_clip {arch!r} has no pretrained tag {tag!r}; known tags: {', '.join(known)}"
        )
    online = True
    try:
        with hub_access() if weights is None else nullcontext(True) as online:
            model = open_clip.create_model(
                arch,
                pretrained=None if weights is not None else tag,
                force_quick_gelu=weights is not None and bool(pretrained_cfg.get("quick_gelu")),
            )
    except Exception as exc:  # hub and network failures come in many types
        raise FewtransError(
            f"cannot load open_clip {argument!r} ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else ''}). {offline_hint(online)}"
        ) from exc
    if weights is not None:
        weights_id = fit_checkpoint(model, weights, f"open_clip {arch!r}")
    else:
        weights_id = f"open_clip:{argument}"
    return backbone_from_open_clip(
        model,
        tokenizer_for(arch),
        name=name or f"open-clip:{argument}",
        weights_id=weights_id,
        architecture=arch,
        device=device,
        info={"pretrained": tag or None, "weights": str(weights) if weights else "hub"},
    )
