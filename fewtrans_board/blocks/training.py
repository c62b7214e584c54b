"""The FewTrans training recipe shared by the baseline adapters, and its published variants.

Features are L2-normalised and fed to a linear head whose weight starts at all ones and
bias at zero; Adam optimises each parameter group with its own learning rate, no weight
decay, and a per-step cosine decay to zero without warm-up; the support order of every
epoch comes from a fresh ``RandomState(11)``, so every configuration and episode sees the
same shuffle sequence; the backbone stays in eval mode (frozen BN statistics, no dropout).

A method run as published may change the optimiser (SGD with momentum, AdamW, weight
decay) and the schedule (Dassl's per-epoch cosine after a constant warm-up):
:class:`OptimiserConfig` declares those choices as ``Config`` fields (FewTrans's values by
default) and :func:`run_training` runs them; :func:`run_adam` is the FewTrans recipe.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from fewtrans_board.api.adapter import AdapterConfig, hparam
from fewtrans_board.api.recipe import (
    FEWTRANS_OPTIMISER,
    FEWTRANS_SCHEDULE,
    OPTIMISERS,
    SCHEDULES,
    Optimiser,
    Schedule,
)
from fewtrans_board.core.errors import ConfigError

if TYPE_CHECKING:
    import torch
    from torch import nn

SHUFFLE_SEED = 11


def cosine_lr(base_lr: float, step: int, total_steps: int) -> float:
    """Per-step cosine decay from ``base_lr`` to zero: ``0.5 * lr * (1 + cos(pi * t / T))``."""
    return 0.5 * base_lr * (1.0 + math.cos(math.pi * step / max(total_steps, 1)))


def epoch_batches(n_items: int, batch_size: int, epochs: int) -> Iterator[np.ndarray]:
    """Yield support index batches: a ``RandomState(11)`` permutation per epoch, chunked."""
    rng = np.random.RandomState(SHUFFLE_SEED)
    for _ in range(epochs):
        order = rng.permutation(n_items)
        for start in range(0, n_items, batch_size):
            yield order[start : start + batch_size]


def total_steps(n_items: int, batch_size: int, epochs: int) -> int:
    """Optimiser steps of a run: ``epochs * ceil(n / batch_size)``."""
    return epochs * math.ceil(n_items / batch_size)


HEAD_INITS = ("fewtrans", "default")
"""``fewtrans``: weight 1, bias 0 (FewTrans); ``default``: torch's ``nn.Linear`` initialisation
(Kaiming-uniform weight, uniform bias; BSCD-FSL's ``Classifier``)."""


def make_head(dim: int, n_way: int, device: str, init: str = "fewtrans") -> nn.Linear:
    """Linear head, initialised as :data:`HEAD_INITS` says (FewTrans: weight 1 and bias 0).

    Both draw torch's ``nn.Linear`` initialisation from the global generator (on the CPU),
    so the generator moves the same way whichever is chosen.

    Args:
        dim: feature dimension.
        n_way: number of classes.
        device: torch device.
        init: ``"fewtrans"`` or ``"default"``.
    """
    import torch
    from torch import nn

    if init not in HEAD_INITS:
        raise ConfigError(f"head initialisation {init!r} is not one of {', '.join(HEAD_INITS)}")
    head = nn.Linear(dim, n_way).to(device)
    if init == "fewtrans":
        with torch.no_grad():
            head.weight.fill_(1.0)
            head.bias.zero_()
    return head


def train_only(
    parameters: Iterable[torch.Tensor], trainable: Sequence[torch.Tensor]
) -> list[torch.Tensor]:
    """Let exactly the ``trainable`` tensors among ``parameters`` receive gradients.

    Args:
        parameters: the parameters to set, e.g. ``module.parameters()`` of a copy the
            adapter owns (never the caller's: their flags would change too).
        trainable: the tensors that train; the other ``parameters`` are frozen.

    Returns:
        ``trainable`` as a list.
    """
    ids = {id(p) for p in trainable}
    for p in parameters:
        p.requires_grad_(id(p) in ids)
    return list(trainable)


def autocast(device: str) -> AbstractContextManager[object]:
    """bf16 autocast on CUDA (fp32 master weights); plain fp32 elsewhere."""
    import torch

    if device.startswith("cuda"):
        return torch.autocast(device_type="cuda", dtype=torch.bfloat16)
    return nullcontext()


@dataclass(frozen=True)
class OptimiserConfig(AdapterConfig):
    """``Config`` fields choosing the optimiser and the schedule (FewTrans's by default).

    Mix it in after a config's own fields (``class Config(OptimiserConfig, MyFields)``) so
    listings show the method's hyperparameters first.
    """

    optimizer: str = hparam(
        "adam",
        "Optimiser: adam (FewTrans), adamw (decoupled weight decay) or sgd.",
        choices=OPTIMISERS,
    )
    momentum: float = hparam(0.0, "SGD momentum (0: plain SGD; sgd only).", min=0, below=1)
    weight_decay: float = hparam(
        0.0, "Weight decay (an L2 term for adam and sgd, decoupled for adamw).", min=0
    )
    adam_eps: float = hparam(1e-8, "Adam's denominator epsilon (adam and adamw).", above=0)
    schedule: str = hparam(
        "cosine",
        "Learning-rate schedule: cosine (per step to 0, FewTrans), cosine-epoch (Dassl: per "
        "epoch, after the warm-up) or constant.",
        choices=SCHEDULES,
    )
    warmup_epochs: int = hparam(0, "Epochs at warmup_lr before the schedule starts.", min=0)
    warmup_lr: float = hparam(0.0, "Learning rate during the warm-up epochs.", min=0)

    def __post_init__(self) -> None:
        """Refuse settings the optimiser does not have (e.g. momentum with adam).

        Raises:
            ConfigError: naming the config class and the setting.
        """
        try:
            optimiser_of(self)
        except ConfigError as exc:
            raise ConfigError(f"{type(self).__qualname__}: {exc}") from None


BACKBONE_OPTIMIZERS = ("same", "sgd")
"""``same``: the backbone trains with the configuration's optimiser (FewTrans: Adam on both);
``sgd``: plain SGD (no momentum, dampening or weight decay; BSCD-FSL's ``finetune.py``)."""


@dataclass(frozen=True)
class HeadTrainingConfig(OptimiserConfig):
    """:class:`OptimiserConfig` plus how a linear head on backbone features trains.

    The defaults are FewTrans's (L2-normalised features, head weight 1 and bias 0, Adam);
    BSCD-FSL's transfer baselines train ``nn.Linear`` (torch's initialisation) on the raw
    features with SGD (momentum 0.9, dampening 0.9, weight decay 1e-3).
    """

    dampening: float = hparam(
        0.0, "SGD dampening of the momentum buffer (sgd only; BSCD-FSL: 0.9).", min=0, max=1
    )
    normalize_features: bool = hparam(
        True, "L2-normalise the backbone features the head reads (FewTrans; BSCD-FSL: off)."
    )
    head_init: str = hparam(
        "fewtrans",
        "Head initialisation: fewtrans (weight 1, bias 0) or default (torch's nn.Linear: "
        "Kaiming-uniform weight, uniform bias; BSCD-FSL).",
        choices=HEAD_INITS,
    )


@dataclass(frozen=True)
class EncoderTrainingConfig(HeadTrainingConfig):
    """:class:`HeadTrainingConfig` plus how the backbone trains alongside the head.

    FewTrans: the backbone's own Adam (``same``) in eval mode (frozen BatchNorm statistics,
    no dropout). BSCD-FSL's ``finetune.py``: plain SGD on the backbone (``sgd``) in train
    mode, so BatchNorm normalises with the statistics of each support batch and its
    running statistics move with them; the queries are predicted in eval mode.
    """

    backbone_optimizer: str = hparam(
        "same",
        "Backbone optimiser: same (the head's optimizer, momentum and weight decay) or sgd "
        "(plain SGD: no momentum, dampening or weight decay; BSCD-FSL).",
        choices=BACKBONE_OPTIMIZERS,
    )
    backbone_train_mode: bool = hparam(
        False,
        "Run the backbone copy in train mode while fitting (BatchNorm uses and updates the "
        "support batches' statistics; BSCD-FSL); queries are predicted in eval mode.",
    )


def optimiser_of(config: Any) -> Optimiser:
    """The optimiser a configuration asks for (FewTrans's Adam if it declares none).

    Raises:
        ConfigError: settings torch would refuse (e.g. momentum with adam).
    """
    if not hasattr(config, "optimizer"):
        return FEWTRANS_OPTIMISER
    return Optimiser(
        name=config.optimizer,
        momentum=config.momentum,
        dampening=getattr(config, "dampening", 0.0),
        weight_decay=config.weight_decay,
        eps=config.adam_eps,
    )


PLAIN_SGD = Optimiser("sgd")
"""Plain SGD: ``torch.optim.SGD(params, lr)`` (BSCD-FSL's backbone optimiser)."""


def backbone_optimiser_of(config: Any) -> Optimiser:
    """The optimiser of the backbone's group (:data:`BACKBONE_OPTIMIZERS`)."""
    if getattr(config, "backbone_optimizer", "same") == "sgd":
        return PLAIN_SGD
    return optimiser_of(config)


def head_features(features: torch.Tensor, config: Any) -> torch.Tensor:
    """What the head reads: L2-normalised features (FewTrans) or the raw ones, upcast."""
    if getattr(config, "normalize_features", True):
        return normalized(features)
    return upcast(features)


def schedule_of(config: Any) -> Schedule:
    """The schedule a configuration asks for (FewTrans's per-step cosine if it declares none)."""
    if not hasattr(config, "schedule"):
        return FEWTRANS_SCHEDULE
    return Schedule(
        name=config.schedule, warmup_epochs=config.warmup_epochs, warmup_lr=config.warmup_lr
    )


def make_optimiser(
    params: Sequence[torch.Tensor], lr: float, optimiser: Optimiser
) -> torch.optim.Optimizer:
    """The ``torch.optim`` optimiser of ``optimiser`` over ``params``."""
    import torch

    if optimiser.name == "sgd":
        return torch.optim.SGD(
            list(params),
            lr=lr,
            momentum=optimiser.momentum,
            dampening=optimiser.dampening,
            nesterov=optimiser.nesterov,
            weight_decay=optimiser.weight_decay,
        )
    kind = torch.optim.AdamW if optimiser.name == "adamw" else torch.optim.Adam
    return kind(
        list(params),
        lr=lr,
        betas=optimiser.betas,
        eps=optimiser.eps,
        weight_decay=optimiser.weight_decay,
    )


def run_training(
    groups: Sequence[tuple[Sequence[torch.Tensor], float]],
    loss_of_batch: Callable[[np.ndarray], torch.Tensor],
    n_items: int,
    batch_size: int,
    epochs: int,
    optimiser: Optimiser = FEWTRANS_OPTIMISER,
    schedule: Schedule = FEWTRANS_SCHEDULE,
    group_optimisers: Sequence[Optimiser] | None = None,
) -> None:
    """Optimise parameter groups, one optimiser each, under one schedule.

    Args:
        groups: ``(parameters, base learning rate)`` pairs; groups with lr 0 or no
            parameters are skipped.
        loss_of_batch: computes the loss of a batch of support indices.
        n_items: support size.
        batch_size: optimiser batch size.
        epochs: number of passes over the support set.
        optimiser: the optimiser of every group (FewTrans: Adam).
        schedule: the learning-rate schedule (FewTrans: per-step cosine to zero).
        group_optimisers: one optimiser per group, in place of ``optimiser`` (e.g. BSCD-FSL:
            plain SGD on the backbone, SGD with momentum on the head).
    """
    kinds = list(group_optimisers) if group_optimisers is not None else [optimiser] * len(groups)
    if len(kinds) != len(groups):
        raise ConfigError(f"{len(groups)} parameter groups but {len(kinds)} optimisers")
    optimisers = [
        (make_optimiser(params, lr, kind), lr)
        for (params, lr), kind in zip(groups, kinds, strict=True)
        if params and lr > 0
    ]
    steps = total_steps(n_items, batch_size, epochs)
    per_epoch = math.ceil(n_items / batch_size)
    for step, batch in enumerate(epoch_batches(n_items, batch_size, epochs)):
        for torch_optimiser, base_lr in optimisers:
            rate = schedule.lr(base_lr, step, per_epoch, steps)
            for group in torch_optimiser.param_groups:
                group["lr"] = rate
            torch_optimiser.zero_grad(set_to_none=True)
        loss = loss_of_batch(batch)
        loss.backward()  # type: ignore[no-untyped-call]
        for torch_optimiser, _ in optimisers:
            torch_optimiser.step()


def run_adam(
    groups: Sequence[tuple[Sequence[torch.Tensor], float]],
    loss_of_batch: Callable[[np.ndarray], torch.Tensor],
    n_items: int,
    batch_size: int,
    epochs: int,
) -> None:
    """Optimise parameter groups with one Adam each under the shared cosine schedule.

    The FewTrans recipe: :func:`run_training` (same arguments) with its default optimiser
    and schedule.
    """
    run_training(groups, loss_of_batch, n_items, batch_size, epochs)


def train_linear_head(
    features: torch.Tensor, labels: torch.Tensor, n_way: int, config: Any, epochs: int | None = None
) -> nn.Linear:
    """A linear head trained with cross-entropy on fixed ``features``, as ``config`` says.

    :func:`make_head` (``head_init``, FewTrans's by default) on the features' device, then
    :func:`run_training` with ``lr_head``, ``batch_size``, ``epochs`` (unless given) and the
    configuration's optimiser and schedule (FewTrans's where it declares none).
    """
    import torch.nn.functional as F

    init = getattr(config, "head_init", "fewtrans")
    head = make_head(features.shape[1], n_way, str(features.device), init)

    def loss_of(batch: Any) -> torch.Tensor:
        return F.cross_entropy(head(features[batch]), labels[batch])

    run_training(
        [(list(head.parameters()), config.lr_head)],
        loss_of,
        len(labels),
        config.batch_size,
        config.epochs if epochs is None else epochs,
        optimiser_of(config),
        schedule_of(config),
    )
    return head


def upcast(x: torch.Tensor) -> torch.Tensor:
    """At least float32: bf16/fp16 autocast outputs become float32, float64 stays float64.

    Float64 end to end is what the batched-vs-loop exactness tests run in.
    """
    import torch

    return x if x.dtype in (torch.float32, torch.float64) else x.float()


def normalized(x: torch.Tensor) -> torch.Tensor:
    """L2-normalise rows (in at least float32)."""
    import torch.nn.functional as F

    return F.normalize(upcast(x), dim=-1)


BSCD_HEAD: dict[str, object] = {
    "lr_head": 0.01,
    "epochs": 100,
    "batch_size": 4,
    "optimizer": "sgd",
    "momentum": 0.9,
    "dampening": 0.9,
    "weight_decay": 1e-3,
    "schedule": "constant",
    "normalize_features": False,
    "head_init": "default",
}
"""BSCD-FSL's linear classifier: ``classifier_opt`` of ``finetune.py``, 100 epochs of batch 4."""
