"""Selective Synaptic Dampening (Foster et al., AAAI 2024) as adapted to CLIP.

For every parameter element ``i`` with forget importance ``F_f`` and retain importance
``F_r`` (the mean over the retain datasets): if ``F_f > alpha * F_r`` the element is
multiplied by ``beta = min(1, lambda * F_r / F_f)``; otherwise it is left alone. One pass,
no retraining; ``logit_scale`` (and ``logit_bias``) are never touched.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fewtrans_board.core.errors import FewtransError

if TYPE_CHECKING:
    import torch

EXCLUDED = ("logit_scale", "logit_bias")
"""Parameters SSD never dampens (the temperature is not knowledge of any class)."""


@dataclass(frozen=True)
class DampeningStats:
    """What a dampening pass changed.

    Attributes:
        selected: parameter elements that were dampened.
        total: eligible parameter elements.
        zeroed: selected elements whose factor was 0 (no retain importance at all).
        per_tensor: selected element count per parameter name (non-zero only).
    """

    selected: int
    total: int
    zeroed: int
    per_tensor: dict[str, int]

    def to_dict(self) -> dict[str, object]:
        """JSON-friendly form."""
        return {
            "selected": self.selected,
            "total": self.total,
            "zeroed": self.zeroed,
            "selected_fraction": self.selected / max(self.total, 1),
            "per_tensor": self.per_tensor,
        }


def dampening_factors(
    forget: torch.Tensor, retain: torch.Tensor, alpha: float, lam: float
) -> torch.Tensor:
    """Per-element factor: ``min(1, lam * F_r / F_f)`` where ``F_f > alpha * F_r``, else 1."""
    import torch

    selected = forget > alpha * retain
    safe = torch.where(selected, forget, torch.ones_like(forget))
    beta = torch.clamp(lam * retain / safe, max=1.0)
    return torch.where(selected, beta, torch.ones_like(forget))


def dampen(
    parameters: Mapping[str, torch.Tensor],
    forget: Mapping[str, torch.Tensor],
    retain: Mapping[str, torch.Tensor],
    alpha: float,
    lam: float,
    exclude: Sequence[str] = EXCLUDED,
) -> DampeningStats:
    """Dampen ``parameters`` in place.

    Args:
        parameters: the model's named parameters (a copy the caller owns).
        forget: importances on the forget set.
        retain: mean importances on the retain sets.
        alpha: selection weighting (30 in the CLIP paper).
        lam: dampening constant (1 in the CLIP paper).
        exclude: parameter names never changed.

    Raises:
        FewtransError: importances that do not cover the model's parameters or have other
            shapes, or non-positive ``alpha``/``lam``.
    """
    import torch

    if alpha <= 0 or lam <= 0:
        raise FewtransError(f"SSD needs alpha > 0 and lambda > 0, got {alpha} and {lam}")
    missing = [n for n in parameters if n not in exclude and (n not in forget or n not in retain)]
    if missing:
        raise FewtransError(
            f"importances lack {len(missing)} parameters of the model (e.g. {missing[:3]}); "
            "they were computed for another architecture"
        )
    selected = total = zeroed = 0
    per_tensor: dict[str, int] = {}
    with torch.no_grad():
        for name, param in parameters.items():
            if name in exclude:
                continue
            f, r = forget[name], retain[name]
            if tuple(f.shape) != tuple(param.shape) or tuple(r.shape) != tuple(param.shape):
                raise FewtransError(
                    f"importance of {name} has shape {tuple(f.shape)}/{tuple(r.shape)}, "
                    f"the parameter {tuple(param.shape)}"
                )
            factors = dampening_factors(f.float(), r.float(), alpha, lam).to(param.device)
            param.mul_(factors.to(param.dtype))
            changed = int((factors < 1).sum())
            selected += int((f.float() > alpha * r.float()).sum())
            zeroed += int((factors == 0).sum())
            total += param.numel()
            if changed:
                per_tensor[name] = changed
    return DampeningStats(selected, total, zeroed, per_tensor)
