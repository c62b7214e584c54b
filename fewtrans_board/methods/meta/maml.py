"""MAML's inner loop, shared by meta-training and the test-time adapters.

``maml`` (CloserLook's MAML) starts every task's linear head from a meta-learned
initialisation (``[n_way, D]`` weight, bias; the untrained init is PyTorch's ``Linear`` init
with bias 0); ``proto-maml`` starts it from the support prototypes (Triantafillou et al.).
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch
    from torch import nn


def use_support_statistics(encoder: nn.Module, support: torch.Tensor) -> None:
    """Set every BatchNorm's statistics to those of the support set, then switch to eval mode.

    Queries are then normalised with support statistics only: no query affects another.
    """
    import torch
    from torch import nn

    norms = [m for m in encoder.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    saved = [m.momentum for m in norms]
    for m in norms:
        m.reset_running_stats()
        m.momentum = None  # cumulative average: one pass gives the exact batch statistics
    encoder.train()
    with torch.no_grad():
        encoder(support)
    for m, momentum in zip(norms, saved, strict=True):
        m.momentum = momentum
    encoder.eval()


def maml_adapt(
    encoder: nn.Module,
    support: torch.Tensor,
    labels: torch.Tensor,
    n_way: int,
    steps: int,
    lr: float,
    head: dict[str, torch.Tensor] | None = None,
) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    """MAML's inner loop: full-batch SGD on a copy of the encoder and a linear head.

    ``head`` given (``maml``): the linear head starts from a copy of it (``weight [n_way,
    D]``, ``bias [n_way]``). ``head=None`` (``proto-maml``): it starts from the support
    prototypes ``c_k`` of the copy's features as ``w_k = 2 c_k``, ``b_k = -||c_k||^2``
    (Proto-MAML; Triantafillou et al., ICLR 2020), so the initialisation serves any number of
    ways. BatchNorm normalises with support-batch statistics while adapting; the returned copy
    is in eval mode with the adapted weights' support statistics
    (:func:`use_support_statistics`).

    Returns:
        The adapted encoder copy and head (``weight [n_way, D]``, ``bias [n_way]``), both
        leaves whose ``.grad`` the caller may read after a query-loss backward (first order).
    """
    import torch
    import torch.nn.functional as F

    from fewtrans_board.methods.meta.heads import prototypes

    fast = copy.deepcopy(encoder).train()
    fast.requires_grad_(True)
    if head is not None:
        rows = {
            k: head[k].detach().clone().float().requires_grad_(True) for k in ("weight", "bias")
        }
    else:
        with torch.no_grad():
            centres = prototypes(fast(support).float(), labels, n_way)
        rows = {
            "weight": (2.0 * centres).requires_grad_(True),
            "bias": (-centres.pow(2).sum(dim=1)).requires_grad_(True),
        }
    optimiser = torch.optim.SGD([*fast.parameters(), *rows.values()], lr=lr)
    for _ in range(steps):
        optimiser.zero_grad(set_to_none=True)
        logits = fast(support).float() @ rows["weight"].T + rows["bias"]
        F.cross_entropy(logits, labels).backward()  # type: ignore[no-untyped-call]
        optimiser.step()
    use_support_statistics(fast, support)
    return fast, rows
