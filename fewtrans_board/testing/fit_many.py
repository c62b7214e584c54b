"""The house judgement of ``fit_many`` against ``fit``: accuracy, paired, one-sided.

Preflight, verification and the contract check all ask the same question of a batched
fit: does it score significantly above fitting each configuration alone? Float rounding
makes the two paths differ in logits (by 0.2 after float32 training at lr 1.0 on real
data), so they are compared by accuracy, never by an absolute tolerance on logits. The
contract check (:func:`check_fit_many`) also asks, by predictions, whether each batched
predictor computes its own configuration.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from fewtrans_board.api.adapter import Adapter, AdapterConfig
from fewtrans_board.api.backbone import Backbone
from fewtrans_board.core.errors import FewtransError
from fewtrans_board.core.plugin_calls import plugin_code
from fewtrans_board.results.row_schema import accuracy_percent
from fewtrans_board.stats.bounds import lower_bound
from fewtrans_board.testing.adapter_calls import fit_and_predict, predicted, require

if TYPE_CHECKING:
    import torch

    from fewtrans_board.testing.tiny import ToyEpisode

FIT_MANY_MARGIN = 0.5
"""Accuracy points by which ``fit_many`` may exceed ``fit`` before the paired test flags it."""
FIT_MANY_CONFIDENCE = 0.99

Logits = list[list[np.ndarray]]
"""``logits[episode position][configuration]`` in manifest query order."""


def fit_many_gain(batched: Logits, looped: Logits, labels: list[np.ndarray]) -> tuple[float, float]:
    """Mean accuracy gain of ``fit_many`` over ``fit`` and its one-sided lower bound.

    Args:
        batched: logits of the batched fit, per episode and configuration.
        looped: logits of fitting each configuration alone.
        labels: query labels per episode.

    Returns:
        ``(mean gain, lower confidence bound)`` in accuracy points, paired by episode
        (each episode's gain averaged over its configurations).
    """
    gains = []
    for bs, ls, y in zip(batched, looped, labels, strict=True):
        accuracy = [accuracy_percent(b.argmax(axis=1), y) for b in bs]
        alone = [accuracy_percent(a.argmax(axis=1), y) for a in ls]
        gains.append(float(np.mean([b - a for b, a in zip(accuracy, alone, strict=True)])))
    bound = lower_bound(gains, FIT_MANY_CONFIDENCE)
    return bound.mean, bound.bound


FIT_MANY_QUERIES_PER_CLASS = 20
"""Toy queries per class on which ``fit_many``'s predictions are compared with ``fit``'s.

Queries only cost a predict call; the support set (and so every fit) is the toy episode's.
"""

FIT_MANY_SIGNIFICANCE = 0.01
"""One-sided significance of the sign tests between ``fit_many`` and ``fit`` predictions
(1 - the 99% confidence at which preflight and verification judge ``fit_many``)."""


def _neighbour_config(cfg: AdapterConfig) -> AdapterConfig:
    """``cfg`` with its first learning rate moved one HPE step (x1/5, else x5).

    The HPE protocols put such configurations in one grid, so ``fit_many`` must tell them
    apart; an adapter without a learning rate gets ``cfg`` itself (the seeds still differ).
    """
    lrs = [f.name for f in cfg.fields_info() if f.hpe == "lr" and f.type == "float"]
    for name in lrs[:1]:
        for factor in (0.2, 5.0):
            try:
                return cfg.replace(**{name: float(f"{getattr(cfg, name) * factor:.12g}")})
            except FewtransError:
                continue
    return cfg


def _sign_test(against: int, towards: int) -> float:
    """One-sided sign-test p-value: at least ``against`` of ``against + towards`` by a fair coin."""
    from scipy.stats import binom

    if against == 0:
        return 1.0
    return float(binom.sf(against - 1, against + towards, 0.5))


def check_fit_many(
    adapter: Adapter, backbone: Backbone, probe: ToyEpisode, cfg: AdapterConfig, seed: int
) -> dict[str, Any]:
    """Judge ``fit_many`` against ``fit`` by predictions and accuracy, never by raw logits.

    Two configurations of one HPE grid (``cfg`` and a learning-rate neighbour, with seeds
    ``seed`` and ``seed + 1``) are fitted with ``fit_many`` and each alone with ``fit``. Float
    training may differ between the two paths in the last bits, and chaotic training turns
    that into visibly different logits (0.2 on real digits at lr 1.0), so logits are never
    compared. For configuration ``i`` and the other one ``j``, on the toy queries:

    - *own configuration*: where ``fit(i)`` and ``fit(j)`` predict different classes, an
      honest batched predictor of ``i`` repeats ``fit(i)``'s class at least as often as
      ``fit(j)``'s (it computes configuration ``i``), so the queries siding with ``j`` are at
      most Binomial(n, 1/2); failing at p < 0.01 keeps false alarms under 1% per
      configuration even if the paths diverged as far as two configurations do. A
      ``fit_many`` that ignores its configurations or mixes them up sides with ``j`` on all
      ``n`` queries and fails once ``n >= 7``.
    - *agreement*: an honest batched predictor of ``i`` agrees with ``fit(i)`` at least as
      often as ``fit(j)`` does (the same sign test on the queries where exactly one of them
      does), which catches a ``fit_many`` that computes something else altogether.
    - *accuracy*: the house judgement of preflight and verification
      (:func:`fit_many_gain`), paired by query here since one support set is fitted:
      ``fit_many`` must not score significantly above ``fit``.

    Raises:
        ContractError: naming the adapter, the configuration and the counts.
    """
    subject = f"adapter {adapter.name!r}"
    configs = [cfg, _neighbour_config(cfg)]
    batched, alone = _fit_both_ways(adapter, backbone, probe, configs, [seed, seed + 1])
    many_pred = [b.argmax(1) for b in batched]
    fit_pred = [a.argmax(1) for a in alone]
    agreement = [
        _check_own_configuration(subject, i, many_pred[i], fit_pred[i], fit_pred[1 - i])
        for i in range(len(configs))
    ]
    return {
        "configs": len(configs),
        "queries": len(probe.query),
        "prediction_agreement": float(np.mean(agreement)),
        "accuracy_gain": _check_accuracy(subject, probe, batched, alone),
    }


def _fit_both_ways(
    adapter: Adapter,
    backbone: Backbone,
    probe: ToyEpisode,
    configs: list[AdapterConfig],
    seeds: list[int],
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Query logits of ``fit_many`` on ``configs`` and of ``fit`` on each alone (checked)."""
    import torch

    subject = f"adapter {adapter.name!r}"
    with plugin_code(subject, "fit_many", "a toy episode of the contract check", type(adapter)):
        many = adapter.fit_many(backbone, probe.support, probe.class_names, configs, seeds)
    require(
        len(many) == len(configs),
        subject,
        f"fit_many returned {len(many)} predictors for {len(configs)} configs",
    )
    batched = [predicted(adapter, p, probe) for p in many]
    alone = [
        fit_and_predict(adapter, backbone, probe, c, s) for c, s in zip(configs, seeds, strict=True)
    ]
    n_query, n_way = len(probe.query), probe.support.n_way
    for i, logits in enumerate(batched):
        require(
            tuple(logits.shape) == (n_query, n_way) and bool(torch.isfinite(logits).all()),
            subject,
            f"fit_many's predictor {i} gave logits of shape {tuple(logits.shape)} (expected "
            f"({n_query}, {n_way})) or non-finite values",
        )
    return batched, alone


def _check_own_configuration(
    subject: str, i: int, mine: torch.Tensor, own: torch.Tensor, other: torch.Tensor
) -> float:
    """The two sign tests of configuration ``i``'s batched predictions ``mine``.

    They are judged against ``fit``'s predictions of ``i`` (``own``) and of the other
    configuration (``other``).

    Returns:
        The share of toy queries where ``mine`` agrees with ``own``.
    """
    j = 1 - i
    differ = own != other
    sides_other = int((differ & (mine == other)).sum())
    sides_own = int((differ & (mine == own)).sum())
    p_mixed = _sign_test(sides_other, sides_own)
    require(
        p_mixed >= FIT_MANY_SIGNIFICANCE,
        subject,
        f"fit_many's predictor for configuration {i} predicts like configuration {j}: on "
        f"the {int(differ.sum())} toy queries where fit gives the two configurations "
        f"different classes, it sides with configuration {j} on {sides_other} and with "
        f"its own on {sides_own} (sign test p = {p_mixed:.2g}); fit_many must return one "
        "predictor per configuration, fitted with that configuration and seed",
    )
    lost = int(((mine != own) & (other == own)).sum())
    kept = int(((mine == own) & (other != own)).sum())
    p_diverged = _sign_test(lost, kept)
    require(
        p_diverged >= FIT_MANY_SIGNIFICANCE,
        subject,
        f"fit_many's predictor for configuration {i} disagrees with fit on the same "
        f"configuration and seed on {int((mine != own).sum())} of {len(mine)} toy queries, "
        f"more often than configuration {j}'s fit does (sign test p = {p_diverged:.2g}); "
        "fit_many must compute what fit computes",
    )
    return float((mine == own).float().mean())


def _check_accuracy(
    subject: str, probe: ToyEpisode, batched: list[torch.Tensor], alone: list[torch.Tensor]
) -> float:
    """The mean accuracy gain of ``fit_many`` (points): not significantly above ``fit``."""
    labels = probe.query_labels.numpy()
    per_query = range(len(probe.query))
    gain, bound = fit_many_gain(
        [[b.numpy()[q : q + 1] for b in batched] for q in per_query],
        [[a.numpy()[q : q + 1] for a in alone] for q in per_query],
        [labels[q : q + 1] for q in per_query],
    )
    require(
        not bound > FIT_MANY_MARGIN,
        subject,
        f"fit_many scores {gain:+.2f} accuracy points above fitting each configuration alone "
        f"with fit on {len(probe.query)} toy queries (at least {bound:+.2f} at "
        f"{FIT_MANY_CONFIDENCE:.0%} confidence): fit_many must compute what fit computes",
    )
    return gain
