"""Per-block features of an image encoder: each block's output, pooled to one vector per image.

Used by the CKA analysis (pretrained vs adapted features per layer) and by IMS-f (which
selects among the layers of several models). Blocks are found as last-k fine-tuning finds
them (timm ``blocks``, ``stages``, ResNet ``layer1-4``, open_clip ``transformer.resblocks``).
Pooling: the mean over spatial positions of a ``[N, C, H, W]`` map, or over tokens of a
``[N, T, D]`` sequence (``[T, N, D]`` for sequence-first open_clip towers).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fewtrans_board.core.errors import FewtransError

if TYPE_CHECKING:
    import torch
    from torch import nn


def encoder_blocks(encoder: nn.Module) -> list[nn.Module]:
    """The encoder's residual blocks / stages in forward order.

    Raises:
        FewtransError: no known block structure.
    """
    from fewtrans_board.blocks.finetune import block_list

    return block_list(encoder)


def _sequence_first(encoder: nn.Module) -> bool:
    from fewtrans_board.blocks.vit_parts import vit_parts

    try:
        return not vit_parts(encoder).batch_first
    except FewtransError:
        return False


def pool_output(output: Any, sequence_first: bool) -> torch.Tensor:
    """One vector per image from a block's output (see the module docstring)."""
    tensor: torch.Tensor = output[0] if isinstance(output, tuple | list) else output
    if tensor.ndim == 4:
        return tensor.float().mean(dim=(2, 3))
    if tensor.ndim == 3:
        return tensor.float().mean(dim=0 if sequence_first else 1)
    if tensor.ndim == 2:
        return tensor.float()
    raise FewtransError(f"cannot pool a block output of shape {tuple(tensor.shape)}")


def block_features(
    encoder: nn.Module, pixels: torch.Tensor, device: str, batch_size: int = 128
) -> list[torch.Tensor]:
    """Pooled outputs of every block for ``pixels``, in eval mode without gradients.

    Args:
        encoder: the image encoder (left in the training mode it had).
        pixels: preprocessed images ``[N, 3, H, W]``.
        device: where the encoder lives.
        batch_size: forward batch size.

    Returns:
        One float32 tensor ``[N, D_l]`` per block, on ``device``.
    """
    import torch

    from fewtrans_board.blocks.training import autocast

    blocks = encoder_blocks(encoder)
    sequence_first = _sequence_first(encoder)
    captured: list[list[torch.Tensor]] = [[] for _ in blocks]

    def hook_for(i: int) -> Any:
        def hook(module: nn.Module, inputs: Any, output: Any) -> None:
            captured[i].append(pool_output(output, sequence_first))

        return hook

    handles = [block.register_forward_hook(hook_for(i)) for i, block in enumerate(blocks)]
    was_training = encoder.training
    encoder.eval()
    try:
        with torch.no_grad(), autocast(device):
            for start in range(0, pixels.shape[0], batch_size):
                encoder(pixels[start : start + batch_size].to(device))
    finally:
        for handle in handles:
            handle.remove()
        encoder.train(was_training)
    return [torch.cat(chunks) for chunks in captured]
