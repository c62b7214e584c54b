"""MAML's inner loop (Proto-MAML head), shared by meta-training and the test-time adapter."""

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
) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    """MAML's inner loop: full-batch SGD on a copy of the encoder and a linear head.

    The head starts from the support prototypes ``c_k`` of the copy's features as
    ``w_k = 2 c_k``, ``b_k = -||c_k||^2`` (Proto-MAML; Triantafillou et al., ICLR 2020), so
    the meta-learned initialisation serves any number of ways and arbitrary label orders.
    BatchNorm normalises with support-batch statistics while adapting; the returned copy is
    in eval mode with the adapted weights' support statistics (:func:`use_support_statistics`).

    Returns:
        The adapted encoder copy and head (``weight [n_way, D]``, ``bias [n_way]``).
    """
    import torch
    import torch.nn.functional as F

    from fewtrans_board.methods.meta.heads import prototypes

    fast = copy.deepcopy(encoder).train()
    fast.requires_grad_(True)
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
