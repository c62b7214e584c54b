"""The contract checks: ``check_dataset``, ``check_model``, ``check_adapter``."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from fewtrans_board.api.adapter import Adapter, AdapterConfig, Predictor
from fewtrans_board.api.backbone import Backbone
from fewtrans_board.api.dataset_spec import DatasetReader, DatasetSpec
from fewtrans_board.api.model_spec import ModelSpec
from fewtrans_board.core.errors import ContractError, FewtransError
from fewtrans_board.core.plugin_calls import plugin_code
from fewtrans_board.registry.lookup import validate_name

if TYPE_CHECKING:
    import torch

    from fewtrans_board.testing.tiny import ToyEpisode


@dataclass
class CheckReport:
    """What a passing check verified.

    Attributes:
        subject: the checked object's name.
        passed: the checks that ran, in order.
        details: measured values worth printing (shapes, accuracy, counts).
    """

    subject: str
    passed: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)


def _require(condition: bool, subject: str, message: str) -> None:
    if not condition:
        raise ContractError(f"{subject}: {message}")


# --- datasets ---------------------------------------------------------------------------


def check_dataset(spec: DatasetSpec, root: Path | str | None = None) -> CheckReport:
    """Check a dataset spec's metadata and, given a local copy, its reader.

    Args:
        spec: the spec to check.
        root: a local copy of the dataset (optional); embedded datasets accept ``None``.

    Returns:
        A report of what was checked.

    Raises:
        ContractError: naming the dataset and the broken rule.
    """
    subject = f"dataset {spec.name!r}"
    report = CheckReport(subject)
    try:
        validate_name("dataset", spec.name)
    except FewtransError as exc:
        raise ContractError(f"{subject}: {exc}") from exc
    for attr in ("title", "domain", "layout", "license", "source_url", "download"):
        _require(bool(str(getattr(spec, attr)).strip()), subject, f"empty {attr!r}")
    _require(spec.num_classes >= 2, subject, "needs at least two classes")
    for cid, cname in zip(spec.class_ids, spec.class_names, strict=True):
        _require(bool(cname.strip()), subject, f"class {cid!r} has an empty name")
    _require(len(spec.split.base) >= 2, subject, "needs at least two base classes")
    _require(isinstance(spec.reader, DatasetReader), subject, "reader lacks list_items/load_image")
    report.passed.append("metadata")

    if root is None and not spec.extra.get("embedded"):
        return report
    listing = spec.reader.list_items(Path(root) if root is not None else None, spec)
    _require(
        len(listing) == spec.num_classes,
        subject,
        f"reader returned {len(listing)} classes, expected {spec.num_classes}",
    )
    for cid, items in zip(spec.class_ids, listing, strict=True):
        _require(len(set(items)) == len(items), subject, f"class {cid!r} lists duplicates")
        for item in items:
            path = PurePosixPath(item)
            _require(
                not path.is_absolute() and ".." not in path.parts and "\\" not in item,
                subject,
                f"item id {item!r} must be a relative POSIX path without '..'",
            )
    first = next((items[0] for items in listing if items), None)
    _require(first is not None, subject, "reader found no items at all")
    assert first is not None
    image = spec.reader.load_image(Path(root) if root is not None else None, first)
    _require(image.mode == "RGB", subject, f"load_image returned mode {image.mode}, want RGB")
    report.passed.append("reader")
    report.details["items"] = sum(len(items) for items in listing)
    return report


# --- models -----------------------------------------------------------------------------


def _random_pixels(n: int, size: int, seed: int = 0) -> torch.Tensor:
    import torch

    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 3, size, size, generator=g)


def check_backbone(backbone: Backbone, subject: str) -> CheckReport:
    """Check a loaded backbone: feature shape, finiteness, determinism, text tower."""
    import torch

    report = CheckReport(subject)
    _require(backbone.feature_dim > 0, subject, "feature_dim must be positive")
    _require(not backbone.image_encoder.training, subject, "image encoder must be in eval mode")
    pixels = _random_pixels(3, backbone.image_size)
    first = backbone.embed(pixels)
    _require(
        tuple(first.shape) == (3, backbone.feature_dim),
        subject,
        f"embed returned shape {tuple(first.shape)}, expected (3, {backbone.feature_dim})",
    )
    _require(bool(torch.isfinite(first).all()), subject, "embed returned non-finite features")
    second = backbone.embed(pixels)
    _require(torch.equal(first, second), subject, "embed is not deterministic")
    single = backbone.embed(pixels[:1])
    _require(
        torch.allclose(single, first[:1], atol=1e-4, rtol=1e-4),
        subject,
        "features depend on the other images in the batch",
    )
    report.passed.append("image features")
    if backbone.text is not None:
        tokens = backbone.text.tokenize(["a photo of a cat.", "a photo of a dog."])
        text = backbone.text.encode(tokens)
        _require(
            text.ndim == 2 and text.shape[0] == 2,
            subject,
            f"text.encode returned shape {tuple(text.shape)}, expected (2, D)",
        )
        _require(
            text.shape[1] == backbone.feature_dim,
            subject,
            "text and image features must share one embedding size",
        )
        _require(backbone.text.logit_scale > 0, subject, "logit_scale must be positive")
        report.passed.append("text features")
    report.details["feature_dim"] = backbone.feature_dim
    return report


def check_model(
    spec: ModelSpec, weights: Path | str | None = None, device: str = "cpu"
) -> CheckReport:
    """Load a model spec and check the resulting backbone.

    Args:
        spec: the spec to check.
        weights: a local checkpoint (needed offline for hub-backed models).
        device: torch device.

    Raises:
        ContractError: naming the model and the broken rule.
    """
    subject = f"model {spec.name!r}"
    try:
        # A resolved family variant ("timm:ARCH") is checked by its family's name.
        validate_name("model", spec.name.partition(":")[0])
    except FewtransError as exc:
        raise ContractError(f"{subject}: {exc}") from exc
    for attr in ("family", "architecture", "source"):
        _require(bool(getattr(spec, attr)), subject, f"empty {attr!r}")
    backbone = spec.load(weights=weights, device=device)
    report = check_backbone(backbone, subject)
    _require(
        spec.has_text == (backbone.text is not None),
        subject,
        f"modalities {spec.modalities} disagree with the loaded backbone's text tower",
    )
    report.passed.insert(0, "metadata")
    return report


# --- adapters ---------------------------------------------------------------------------


def _fit_and_predict(
    adapter: Adapter,
    backbone: Backbone,
    episode: ToyEpisode,
    config: AdapterConfig,
    seed: int,
) -> torch.Tensor:
    import torch

    torch.manual_seed(seed)
    subject = f"adapter {adapter.name!r}"
    with plugin_code(subject, "fit", "a toy episode of the contract check", type(adapter)):
        predictor = adapter.fit(backbone, episode.support, episode.class_names, config)
    return _predicted(adapter, predictor, episode)


def _predicted(adapter: Adapter, predictor: Any, episode: ToyEpisode) -> torch.Tensor:
    """Checked query logits of a fitted predictor, as a float CPU tensor."""
    import torch

    subject = f"adapter {adapter.name!r}"
    if not isinstance(predictor, Predictor):
        raise ContractError(
            f"{subject}: fit returned {type(predictor).__name__}, "
            "which has no predict(query) method"
        )
    with (
        torch.no_grad(),
        plugin_code(subject, "predict", "a toy episode of the contract check", type(predictor)),
    ):
        logits = predictor.predict(episode.query)
    if not isinstance(logits, torch.Tensor):
        raise ContractError(
            f"{subject}: predict returned {type(logits).__name__}; return a torch.Tensor of "
            "logits [queries, ways] (e.g. torch.from_numpy(...) for a numpy array)"
        )
    return logits.detach().float().cpu()


def _state_fingerprint(backbone: Backbone) -> list[torch.Tensor]:
    modules = [backbone.image_encoder]
    if backbone.text is not None:
        modules.append(backbone.text.model)
    return [t.detach().clone() for m in modules for t in m.state_dict().values()]


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


def _check_fit_many(
    adapter: Adapter,
    backbone: Backbone,
    probe: ToyEpisode,
    cfg: AdapterConfig,
    seed: int,
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
      (:func:`~fewtrans_board.testing.fit_many.fit_many_gain`), paired by query here since
      one support set is fitted: ``fit_many`` must not score significantly above ``fit``.

    Raises:
        ContractError: naming the adapter, the configuration and the counts.
    """
    import numpy as np
    import torch

    from fewtrans_board.testing.fit_many import (
        FIT_MANY_CONFIDENCE,
        FIT_MANY_MARGIN,
        fit_many_gain,
    )

    subject = f"adapter {adapter.name!r}"
    configs = [cfg, _neighbour_config(cfg)]
    seeds = [seed, seed + 1]
    with plugin_code(subject, "fit_many", "a toy episode of the contract check", type(adapter)):
        many = adapter.fit_many(backbone, probe.support, probe.class_names, configs, seeds)
    _require(
        len(many) == len(configs),
        subject,
        f"fit_many returned {len(many)} predictors for {len(configs)} configs",
    )
    batched = [_predicted(adapter, p, probe) for p in many]
    alone = [
        _fit_and_predict(adapter, backbone, probe, c, s)
        for c, s in zip(configs, seeds, strict=True)
    ]
    n_query, n_way = len(probe.query), probe.support.n_way
    for i, logits in enumerate(batched):
        _require(
            tuple(logits.shape) == (n_query, n_way) and bool(torch.isfinite(logits).all()),
            subject,
            f"fit_many's predictor {i} gave logits of shape {tuple(logits.shape)} (expected "
            f"({n_query}, {n_way})) or non-finite values",
        )
    many_pred = [b.argmax(1) for b in batched]
    fit_pred = [a.argmax(1) for a in alone]
    agreement = []
    for i in range(len(configs)):
        j = 1 - i
        mine, own, other = many_pred[i], fit_pred[i], fit_pred[j]
        differ = own != other
        sides_other = int((differ & (mine == other)).sum())
        sides_own = int((differ & (mine == own)).sum())
        p_mixed = _sign_test(sides_other, sides_own)
        _require(
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
        _require(
            p_diverged >= FIT_MANY_SIGNIFICANCE,
            subject,
            f"fit_many's predictor for configuration {i} disagrees with fit on the same "
            f"configuration and seed on {int((mine != own).sum())} of {n_query} toy queries, "
            f"more often than configuration {j}'s fit does (sign test p = {p_diverged:.2g}); "
            "fit_many must compute what fit computes",
        )
        agreement.append(float((mine == own).float().mean()))
    labels = probe.query_labels.numpy()
    per_query = range(n_query)
    gain, bound = fit_many_gain(
        [[b.numpy()[q : q + 1] for b in batched] for q in per_query],
        [[a.numpy()[q : q + 1] for a in alone] for q in per_query],
        [labels[q : q + 1] for q in per_query],
    )
    _require(
        not bound > FIT_MANY_MARGIN,
        subject,
        f"fit_many scores {gain:+.2f} accuracy points above fitting each configuration alone "
        f"with fit on {n_query} toy queries (at least {bound:+.2f} at "
        f"{FIT_MANY_CONFIDENCE:.0%} confidence): fit_many must compute what fit computes",
    )
    return {
        "configs": len(configs),
        "queries": n_query,
        "prediction_agreement": float(np.mean(agreement)),
        "accuracy_gain": gain,
    }


def check_adapter(
    adapter_cls: type[Adapter],
    backbone: Backbone | None = None,
    config: AdapterConfig | None = None,
    seed: int = 0,
) -> CheckReport:
    """Check an adapter class on a toy episode.

    Verifies the class declarations, config round-trip, logits shape and finiteness,
    determinism under a fixed seed, that the backbone is left unmodified, and that
    ``fit_many`` agrees with ``fit``.

    Args:
        adapter_cls: the adapter class.
        backbone: the backbone to use; defaults to a tiny random ViT, or a tiny CLIP for
            adapters that need text.
        config: the config to use; defaults to ``adapter_cls.Config()``.
        seed: torch seed set before each fit.

    Raises:
        ContractError: naming the adapter and the broken rule.
    """
    import torch

    from fewtrans_board.testing.tiny import tiny_clip_backbone, tiny_vit_backbone, toy_episode

    try:
        validate_name("adapter", getattr(adapter_cls, "name", None))
    except FewtransError as exc:
        raise ContractError(f"adapter class {adapter_cls.__qualname__}: {exc}") from exc
    try:
        adapter_cls.check_class()  # its messages name the class already
    except FewtransError as exc:
        raise ContractError(str(exc)) from exc
    subject = f"adapter {adapter_cls.name!r}"
    report = CheckReport(subject)
    cfg = config if config is not None else adapter_cls.Config()
    _require(isinstance(cfg, adapter_cls.Config), subject, "config is not an instance of Config")
    round_trip = adapter_cls.Config.from_dict(cfg.to_dict())
    _require(round_trip == cfg, subject, "Config.from_dict(to_dict()) changed the values")
    report.passed.append("declarations")

    if backbone is None:
        backbone = tiny_clip_backbone() if adapter_cls.needs_text else tiny_vit_backbone()
    if adapter_cls.needs_text:
        _require(backbone.text is not None, subject, "needs a text tower; got a vision backbone")
    episode = toy_episode(image_size=backbone.image_size, seed=seed)
    adapter = adapter_cls()
    before = _state_fingerprint(backbone)

    logits = _fit_and_predict(adapter, backbone, episode, cfg, seed)
    n_query, n_way = len(episode.query), episode.support.n_way
    _require(
        tuple(logits.shape) == (n_query, n_way),
        subject,
        f"logits have shape {tuple(logits.shape)}, expected ({n_query}, {n_way})",
    )
    _require(bool(torch.isfinite(logits).all()), subject, "logits contain NaN or inf")
    report.passed.append("logits shape and finiteness")

    again = _fit_and_predict(adapter, backbone, episode, cfg, seed)
    _require(
        torch.equal(logits, again),
        subject,
        "two fits with the same seed gave different logits; seed every random choice "
        "from torch's global generator so results can be re-run and verified",
    )
    report.passed.append("determinism")

    after = _state_fingerprint(backbone)
    _require(
        len(before) == len(after)
        and all(torch.equal(a, b) for a, b in zip(before, after, strict=True)),
        subject,
        "fit modified the shared backbone in place; deep-copy the modules you train",
    )
    report.passed.append("backbone untouched")

    if adapter_cls.overrides_fit_many():
        probe = toy_episode(
            image_size=backbone.image_size, seed=seed, n_query_per_class=FIT_MANY_QUERIES_PER_CLASS
        )
        report.details["fit_many"] = _check_fit_many(adapter, backbone, probe, cfg, seed)
    else:  # the inherited fit_many is the loop of fit, and the runner loops fit itself
        report.details["fit_many"] = "inherited: the loop of fit"
    report.passed.append("fit_many agrees with fit")
    accuracy = float((logits.argmax(1) == episode.query_labels).float().mean())
    report.details.update({"toy_accuracy": accuracy, "n_query": n_query, "n_way": n_way})
    return report


def check_import_is_light(module: str, *more: str) -> None:
    """Check, in a fresh interpreter, that importing modules does not import torch.

    Args:
        module: a module name, e.g. a plugin's entry-point module.
        *more: further modules, imported in the same interpreter after ``module``.

    Raises:
        ContractError: if torch, timm, open_clip or peft is imported, or an import fails.
    """
    modules = [module, *more]
    code = (
        "import importlib, sys\n"
        "for name in sys.argv[1:]:\n"
        "    importlib.import_module(name)\n"
        "heavy = sorted({'torch', 'timm', 'open_clip', 'peft'} & set(sys.modules))\n"
        "print(','.join(heavy))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, *modules], capture_output=True, text=True, check=False
    )
    names = ", ".join(modules)
    if result.returncode != 0:
        lines = result.stderr.strip().splitlines()
        raise ContractError(f"importing {names} failed: {lines[-1] if lines else 'no message'}")
    heavy = result.stdout.strip()
    if heavy:
        raise ContractError(
            f"importing {names} imports {heavy}; move heavy imports inside load()/fit()"
        )
