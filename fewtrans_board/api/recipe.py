"""Training recipes: the optimiser, the learning-rate schedule and a method's published run.

FewTrans trains every method with one recipe (Adam, no weight decay, per-step cosine decay
to zero) and lets the HPE protocol ensemble learning rates and epochs around a searched
centre. The inductive-CLIP paper instead runs each method as it was published: its own
optimiser (often SGD with momentum), learning rate, epochs, batch size, warm-up and
templates. Both are plain data here (no torch):

* :class:`Optimiser` and :class:`Schedule` say how a configuration trains; adapters that
  train through :class:`~fewtrans_board.blocks.lockstep.TrainingPlan` read them from their
  ``Config`` (fields ``optimizer``, ``momentum``, ``weight_decay``, ``schedule``,
  ``warmup_epochs``, ``warmup_lr``), so the optimiser is recorded with every result;
* :class:`Recipe` is a published configuration, cited to the paper or code it comes from,
  with per-dataset values (templates) where the source has them. An adapter lists its
  recipes in ``Adapter.recipes``; the ``published`` HPE protocol runs one of them as the
  single configuration of a run.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fewtrans_board.core.errors import ConfigError

OPTIMISERS = ("adam", "adamw", "sgd")
"""``adam``: torch's Adam (weight decay as an L2 term); ``adamw``: decoupled weight decay;
``sgd``: torch's SGD with optional momentum, dampening and Nesterov."""

SCHEDULES = ("cosine", "cosine-epoch", "constant")
"""``cosine``: FewTrans's per-step cosine from the base rate to zero; ``cosine-epoch``:
Dassl's (CoOp and its successors) per-epoch cosine after an optional constant warm-up;
``constant``: the base rate throughout (after the warm-up, if any)."""


@dataclass(frozen=True)
class Optimiser:
    """An optimiser and its settings, as ``torch.optim`` defines them.

    Attributes:
        name: one of :data:`OPTIMISERS`.
        momentum: SGD momentum (0: plain SGD).
        dampening: SGD dampening of the momentum buffer.
        nesterov: SGD Nesterov momentum.
        weight_decay: L2 penalty (Adam, SGD) or decoupled decay (AdamW).
        eps: Adam's denominator term.
        betas: Adam's moment decay rates.
    """

    name: str = "adam"
    momentum: float = 0.0
    dampening: float = 0.0
    nesterov: bool = False
    weight_decay: float = 0.0
    eps: float = 1e-8
    betas: tuple[float, float] = (0.9, 0.999)

    def __post_init__(self) -> None:
        """Refuse settings torch would refuse, naming the setting.

        Raises:
            ConfigError: an unknown optimiser, a negative rate, or Nesterov without momentum.
        """
        if self.name not in OPTIMISERS:
            raise ConfigError(f"optimiser {self.name!r} is not one of {', '.join(OPTIMISERS)}")
        for name in ("momentum", "dampening", "weight_decay", "eps"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ConfigError(f"optimiser {self.name}: {name} must be >= 0, got {value!r}")
        if not all(0 <= b < 1 for b in self.betas):
            raise ConfigError(f"optimiser {self.name}: betas must lie in [0, 1), got {self.betas}")
        if self.nesterov and (self.momentum <= 0 or self.dampening != 0):
            raise ConfigError(
                "SGD with Nesterov momentum needs momentum > 0 and dampening 0 (as torch does)"
            )
        if self.name != "sgd" and (self.momentum or self.dampening or self.nesterov):
            raise ConfigError(
                f"momentum, dampening and nesterov are SGD settings; optimiser is {self.name!r}"
            )

    @property
    def copies(self) -> int:
        """Copies of each trained tensor the optimiser keeps (gradient and state)."""
        if self.name == "sgd":
            return 2 if self.momentum else 1
        return 3

    def describe(self) -> str:
        """One line, e.g. ``SGD (momentum 0.9, weight decay 0.0005)``."""
        parts = []
        if self.momentum:
            parts.append(f"momentum {self.momentum:g}")
        if self.dampening:
            parts.append(f"dampening {self.dampening:g}")
        if self.nesterov:
            parts.append("Nesterov")
        if self.weight_decay:
            parts.append(f"weight decay {self.weight_decay:g}")
        if self.name != "sgd" and self.eps != 1e-8:
            parts.append(f"eps {self.eps:g}")
        title = {"adam": "Adam", "adamw": "AdamW", "sgd": "SGD"}[self.name]
        return f"{title} ({', '.join(parts)})" if parts else title


@dataclass(frozen=True)
class Schedule:
    """How the learning rate moves over a run.

    Attributes:
        name: one of :data:`SCHEDULES`.
        warmup_epochs: epochs at ``warmup_lr`` before the schedule starts (Dassl's
            ``constant`` warm-up); 0 for none.
        warmup_lr: the learning rate during the warm-up.
        min_lr: the floor a cosine decays to.
    """

    name: str = "cosine"
    warmup_epochs: int = 0
    warmup_lr: float = 0.0
    min_lr: float = 0.0

    def __post_init__(self) -> None:
        """Refuse an unknown schedule or a negative setting.

        Raises:
            ConfigError: naming the setting.
        """
        if self.name not in SCHEDULES:
            raise ConfigError(f"schedule {self.name!r} is not one of {', '.join(SCHEDULES)}")
        if self.warmup_epochs < 0 or self.warmup_lr < 0 or self.min_lr < 0:
            raise ConfigError(
                f"schedule {self.name}: warm-up epochs, warm-up rate and floor must be >= 0"
            )

    def lr(self, base_lr: float, step: int, steps_per_epoch: int, total_steps: int) -> float:
        """The learning rate of optimiser step ``step`` (0-based).

        ``cosine`` (FewTrans): ``min + 0.5 (base - min) (1 + cos(pi t / T))`` per step ``t``
        of ``T`` (the warm-up, if any, counts its own steps first). ``cosine-epoch`` (Dassl's
        ``CosineAnnealingLR`` stepped once an epoch behind a ``ConstantWarmupScheduler``):
        epoch ``e < W`` runs at ``warmup_lr``; epoch ``e >= W`` at
        ``min + 0.5 (base - min) (1 + cos(pi (e - W) / E))``, ``E`` the epoch count.

        Args:
            base_lr: the configuration's learning rate.
            step: the step index.
            steps_per_epoch: optimiser steps in one epoch (at least 1).
            total_steps: optimiser steps of the whole run.
        """
        steps_per_epoch = max(steps_per_epoch, 1)
        epoch = step // steps_per_epoch
        if epoch < self.warmup_epochs:
            return self.warmup_lr
        if self.name == "constant":
            return base_lr
        if self.name == "cosine-epoch":
            done, length = (
                epoch - self.warmup_epochs,
                max(math.ceil(total_steps / steps_per_epoch), 1),
            )
        else:
            warm = self.warmup_epochs * steps_per_epoch
            done, length = step - warm, max(total_steps - warm, 1)
        # pi * done / length in this order: the FewTrans cosine rounds exactly like cosine_lr.
        cosine = 1.0 + math.cos(math.pi * done / length)
        if not self.min_lr:
            return 0.5 * base_lr * cosine
        return self.min_lr + 0.5 * (base_lr - self.min_lr) * cosine

    def describe(self) -> str:
        """One line, e.g. ``cosine per epoch after 1 warm-up epoch at 1e-05``."""
        text = {
            "cosine": "cosine per step",
            "cosine-epoch": "cosine per epoch",
            "constant": "constant",
        }[self.name]
        if self.min_lr:
            text += f" to {self.min_lr:g}"
        if self.warmup_epochs:
            text += f" after {self.warmup_epochs} warm-up epoch(s) at {self.warmup_lr:g}"
        return text


FEWTRANS_OPTIMISER = Optimiser()
"""FewTrans: Adam, no weight decay."""
FEWTRANS_SCHEDULE = Schedule()
"""FewTrans: per-step cosine decay to zero, no warm-up."""


@dataclass(frozen=True)
class Recipe:
    """A published configuration of a method, cited to where it comes from.

    Attributes:
        name: the recipe's name, unique per adapter (e.g. ``"inductive-clip"``: the
            inductive-CLIP paper's run scripts).
        source: where every value comes from: a paper section or table, or a file of the
            official code (e.g. ``"paper (b) FSL/run_coop.sh; KaiyangZhou/CoOp
            configs/trainers/CoOp/vit_b16_ep50.yaml"``).
        values: ``Config`` values of the run (fields left out keep their defaults).
        per_dataset: values that change with the dataset (e.g. ``{"eurosat": {"template":
            "a centered satellite photo of {}."}}``), over ``values``.
        notes: what differs from the source and why (e.g. a value the toolkit cannot take).
        version: bumped whenever a value changes, so results name the recipe they ran.
    """

    name: str
    source: str
    values: Mapping[str, Any]
    per_dataset: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    notes: str = ""
    version: int = 1

    def __post_init__(self) -> None:
        """Refuse a recipe without a name or a source.

        Raises:
            ConfigError: naming what is missing.
        """
        if not self.name.strip():
            raise ConfigError("a recipe needs a name")
        if not self.source.strip():
            raise ConfigError(f"recipe {self.name!r} needs a source (a paper or code citation)")

    def values_for(self, dataset: str | None = None) -> dict[str, Any]:
        """The configuration values of a run on ``dataset`` (its own values over the shared)."""
        return {**self.values, **(self.per_dataset.get(dataset, {}) if dataset else {})}

    def describe(self) -> dict[str, Any]:
        """JSON-friendly definition (recorded with results and shown on the site)."""
        return {
            "name": self.name,
            "version": self.version,
            "source": self.source,
            "values": dict(self.values),
            "per_dataset": {k: dict(v) for k, v in self.per_dataset.items()},
            "notes": self.notes,
        }
