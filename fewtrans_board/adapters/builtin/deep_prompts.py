"""Deep visual prompt tokens (VPT-deep) for timm and open_clip ViTs, attached with hooks.

``n`` prompt tokens are appended to the token sequence entering the first block; before
each of the next ``depth - 1`` blocks the prompt slice is replaced by that layer's own
prompts; after the last block the prompts are removed, so pooling, final norms and
projections see the original tokens only (any pooling type works). With ``depth = 1``
this is VPT-shallow. Prompts come from a trainable parameter, or from a provider (MaPLe
derives vision prompts from text prompts).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fewtrans_board.adapters.builtin.vit_parts import vit_parts

if TYPE_CHECKING:
    import torch
    from torch import nn

PromptProvider = Callable[[], "torch.Tensor"]
"""Returns prompts ``[depth, n_tokens, width]``."""


def _module_base() -> type:
    from torch import nn

    return nn.Module


class DeepVisualPrompts(_module_base()):  # type: ignore[misc]
    """Learned prompt tokens for the first ``depth`` blocks of a ViT.

    Args:
        n_tokens: prompts per layer.
        depth: number of blocks that receive their own prompts (1 = shallow).
        width: token width of the ViT.
        init_std: std of the normal initialisation (VPT/FewTrans: 0.02).
    """

    def __init__(self, n_tokens: int, depth: int, width: int, init_std: float = 0.02) -> None:
        import torch

        super().__init__()
        self.n_tokens, self.depth = n_tokens, depth
        self.prompts = torch.nn.Parameter(torch.randn(depth, n_tokens, width) * init_std)
        self._handles: list[Any] = []

    def attach(self, encoder: nn.Module, provider: PromptProvider | None = None) -> None:
        """Register the hooks on ``encoder`` (a deep copy the adapter owns)."""
        parts = vit_parts(encoder)
        if self.depth > len(parts.blocks):
            from fewtrans_board.errors import FewtransError

            raise FewtransError(f"prompt depth {self.depth} exceeds the {len(parts.blocks)} blocks")
        get = provider or (lambda: self.prompts)
        n, token_axis = self.n_tokens, 1 if parts.batch_first else 0

        def expand(layer_prompts: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
            batch = like.shape[0] if parts.batch_first else like.shape[1]
            shaped = layer_prompts.to(like.dtype).unsqueeze(0).expand(batch, -1, -1)
            return shaped if parts.batch_first else shaped.transpose(0, 1)

        def append_first(module: nn.Module, args: Any, output: torch.Tensor) -> torch.Tensor:
            import torch

            return torch.cat([output, expand(get()[0], output)], dim=token_axis)

        def replace(layer: int) -> Callable[..., Any]:
            def hook(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
                import torch

                x = args[0]
                kept = x.narrow(token_axis, 0, x.shape[token_axis] - n)
                return (
                    torch.cat([kept, expand(get()[layer], x)], dim=token_axis),
                    *args[1:],
                ), kwargs

            return hook

        def strip(module: nn.Module, args: Any, output: torch.Tensor) -> torch.Tensor:
            return output.narrow(token_axis, 0, output.shape[token_axis] - n)

        self._handles.append(parts.token_start.register_forward_hook(append_first))
        for layer in range(1, self.depth):
            self._handles.append(
                parts.blocks[layer].block.register_forward_pre_hook(
                    replace(layer), with_kwargs=True
                )
            )
        self._handles.append(parts.blocks[-1].block.register_forward_hook(strip))

    def detach(self) -> None:
        """Remove the hooks."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
