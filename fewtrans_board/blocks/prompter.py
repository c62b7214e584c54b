"""Text-side prompt machinery: learnable context in class prompts, deep text prompts by hooks.

A class prompt is ``[SOS][v_1 .. v_n][class tokens][.][EOS]``. It is built from a
placeholder prompt (``"X X ... X {name}."``, or ``"{prefix words} {name}."`` when the context
starts from real words) embedded with the frozen token embedding; positions ``1..n`` are
overwritten with the context and the result goes through
:func:`~fewtrans_board.blocks.clip_common.encode_text_embeddings`, so EOT pooling,
the causal mask and the projection are open_clip's own.

Deep text prompts (IVLP, MaPLe) replace the same positions ``1..n`` of the input of text
blocks ``1..J-1`` with per-layer vectors, through forward pre-hooks on
``model.transformer.resblocks[i]``. Under the causal mask the hidden states at positions
``1..n`` depend only on ``[SOS]`` and the context, never on the class name, which is why one
vector per layer serves every class.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from fewtrans_board.blocks.training import upcast
from fewtrans_board.core.errors import FewtransError

if TYPE_CHECKING:
    import torch
    from torch import nn

PLACEHOLDER = "X"
"""The word whose embedding marks a context position before it is overwritten (as in CoOp)."""


def frozen_text_copy(model: nn.Module) -> nn.Module:
    """Deep-copy a CLIP model without its image tower, with every parameter frozen.

    The copy serves text passes that need gradients with respect to prompts; gradients
    then never accumulate on the caller's parameters.
    """
    visual = getattr(model, "visual", None)
    memo: dict[int, Any] = {} if visual is None else {id(visual): None}  # skip the image tower
    clone = copy.deepcopy(model, memo)
    return clone.requires_grad_(False).eval()


def frozen_copy(module: nn.Module) -> nn.Module:
    """Deep-copy a module with every parameter frozen, in eval mode."""
    return copy.deepcopy(module).requires_grad_(False).eval()


def count_tokens(tokenize: Callable[[Sequence[str]], torch.Tensor], text: str) -> int:
    """Number of BPE tokens of ``text`` (without start and end tokens).

    The end token is found as the largest id, as open_clip's ``argmax`` pooling does.
    """
    tokens = tokenize([text])[0]
    return int(tokens.argmax()) - 1


class TextPrompter:
    """Class prompts with ``n_ctx`` learnable context vectors at positions ``1..n_ctx``.

    Args:
        model: the CLIP model (a frozen copy) whose token embedding builds the placeholder
            prompts and whose text tower encodes them.
        tokenize: the backbone's tokenizer (``texts -> [N, L]``).
        n_ctx: number of context positions.
        prefix: words the prompt starts with (``""``: ``n_ctx`` placeholder words); the
            first ``n_ctx`` of its tokens are the context, any later ones stay fixed words.

    Raises:
        FewtransError: ``prefix`` has fewer than ``n_ctx`` tokens.
    """

    def __init__(
        self,
        model: nn.Module,
        tokenize: Callable[[Sequence[str]], torch.Tensor],
        n_ctx: int,
        prefix: str = "",
    ) -> None:
        if n_ctx < 0:
            raise FewtransError(f"the number of context tokens must be >= 0, got {n_ctx}")
        self.model = model
        self.tokenize = tokenize
        self.n_ctx = n_ctx
        self.prefix = prefix.strip() or " ".join([PLACEHOLDER] * n_ctx)
        if prefix.strip() and count_tokens(tokenize, self.prefix) < n_ctx:
            raise FewtransError(
                f"context initialisation {prefix!r} has {count_tokens(tokenize, self.prefix)} "
                f"tokens, fewer than the {n_ctx} context tokens"
            )
        self._placeholders: dict[tuple[str, ...], tuple[torch.Tensor, torch.Tensor]] = {}

    @property
    def width(self) -> int:
        """Token width of the text tower."""
        model: Any = self.model
        return int(model.token_embedding.weight.shape[1])

    def prompt_texts(self, class_names: Sequence[str]) -> list[str]:
        """The placeholder prompt of every class, ``"{prefix} {name}."``."""
        return [f"{self.prefix} {name}.".strip() for name in class_names]

    def placeholders(self, class_names: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """Token ids ``[C, L]`` and frozen token embeddings ``[C, L, W]`` of the prompts."""
        import torch

        key = tuple(class_names)
        if key not in self._placeholders:
            model: Any = self.model
            device = model.positional_embedding.device
            tokens = self.tokenize(self.prompt_texts(class_names)).to(device)
            with torch.no_grad():
                embeddings = model.token_embedding(tokens)
            self._placeholders[key] = (tokens, embeddings)
        return self._placeholders[key]

    def initial_context(self) -> torch.Tensor:
        """Embeddings ``[n_ctx, W]`` of the prefix's first ``n_ctx`` tokens (a fresh copy)."""
        _, embeddings = self.placeholders(["x"])
        return upcast(embeddings[0, 1 : 1 + self.n_ctx].detach()).cpu().clone()

    def embed(
        self, class_names: Sequence[str], context: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Insert the context into the placeholder prompts.

        Args:
            class_names: the classes.
            context: ``[n_ctx, W]`` shared context, or ``[B, n_ctx, W]`` one context per image.

        Returns:
            Token ids and embeddings, ``[C, L]`` / ``[C, L, W]`` for a shared context or
            ``[B * C, L]`` / ``[B * C, L, W]`` (image-major) for per-image contexts.
        """
        import torch

        tokens, embeddings = self.placeholders(class_names)
        n_classes, n = len(class_names), self.n_ctx
        if context.dim() == 2:
            context = context.unsqueeze(0)
        n_images = context.shape[0]
        context = context.to(embeddings.dtype)
        head = embeddings[:, :1].unsqueeze(0).expand(n_images, -1, -1, -1)
        tail = embeddings[:, 1 + n :].unsqueeze(0).expand(n_images, -1, -1, -1)
        middle = context.unsqueeze(1).expand(-1, n_classes, -1, -1)
        prompts = torch.cat([head, middle, tail], dim=2).flatten(0, 1)
        return tokens.repeat(n_images, 1), prompts

    def encode(self, class_names: Sequence[str], context: torch.Tensor) -> torch.Tensor:
        """Unnormalised text features of the prompts.

        Args:
            class_names: the classes.
            context: ``[n_ctx, W]`` or ``[B, n_ctx, W]``.

        Returns:
            ``[C, D]`` for a shared context, ``[B, C, D]`` for per-image contexts.
        """
        from fewtrans_board.blocks.clip_common import encode_text_embeddings

        tokens, prompts = self.embed(class_names, context)
        features = encode_text_embeddings(self.model, prompts, tokens)
        if context.dim() == 2:
            return features
        return features.view(context.shape[0], len(class_names), -1)


def attach_deep_text_prompts(
    model: nn.Module, prompts: Callable[[], torch.Tensor], n_ctx: int, depth: int
) -> list[Any]:
    """Overwrite positions ``1..n_ctx`` of the input of text blocks ``1..depth-1``.

    Args:
        model: a CLIP model the caller owns (a deep copy); its ``transformer.resblocks``
            get forward pre-hooks.
        prompts: returns ``[depth - 1, n_ctx, W]``; row ``i - 1`` enters block ``i``.
        n_ctx: number of prompt positions (starting after the start token).
        depth: number of blocks with prompts, counting the first (whose prompts are the
            context in the token embeddings).

    Returns:
        The hook handles (``handle.remove()`` detaches).

    Raises:
        FewtransError: ``depth`` exceeds the number of text blocks.
    """
    transformer: Any = model.transformer
    blocks = transformer.resblocks
    if depth > len(blocks):
        raise FewtransError(f"text prompt depth {depth} exceeds the {len(blocks)} text blocks")
    axis = 1 if getattr(transformer, "batch_first", True) else 0

    def replace(layer: int) -> Callable[..., Any]:
        def hook(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            import torch

            x = args[0]
            batch = x.shape[1 - axis]
            layer_prompts = prompts()[layer - 1].to(x.dtype).unsqueeze(0).expand(batch, -1, -1)
            if axis == 0:
                layer_prompts = layer_prompts.transpose(0, 1)
            rest = x.shape[axis] - 1 - n_ctx
            x = torch.cat(
                [x.narrow(axis, 0, 1), layer_prompts, x.narrow(axis, 1 + n_ctx, rest)], dim=axis
            )
            return (x, *args[1:]), kwargs

        return hook

    if n_ctx == 0:
        return []
    return [
        blocks[layer].register_forward_pre_hook(replace(layer), with_kwargs=True)
        for layer in range(1, depth)
    ]
