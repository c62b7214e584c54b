"""The contract checks: ``check_dataset``, ``check_model``, ``check_adapter``."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from fewtrans_board.api.adapter import Adapter, AdapterConfig
from fewtrans_board.api.backbone import Backbone
from fewtrans_board.api.dataset_spec import DatasetReader, DatasetSpec
from fewtrans_board.api.model_spec import ModelSpec
from fewtrans_board.core.errors import ContractError, FewtransError
from fewtrans_board.registry.lookup import validate_name
from fewtrans_board.testing.adapter_calls import fit_and_predict, require
from fewtrans_board.testing.fit_many import FIT_MANY_QUERIES_PER_CLASS, check_fit_many

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
        require(bool(str(getattr(spec, attr)).strip()), subject, f"empty {attr!r}")
    require(spec.num_classes >= 2, subject, "needs at least two classes")
    for cid, cname in zip(spec.class_ids, spec.class_names, strict=True):
        require(bool(cname.strip()), subject, f"class {cid!r} has an empty name")
    require(len(spec.split.base) >= 2, subject, "needs at least two base classes")
    require(isinstance(spec.reader, DatasetReader), subject, "reader lacks list_items/load_image")
    report.passed.append("metadata")

    if root is None and not spec.extra.get("embedded"):
        return report
    listing = spec.reader.list_items(Path(root) if root is not None else None, spec)
    require(
        len(listing) == spec.num_classes,
        subject,
        f"reader returned {len(listing)} classes, expected {spec.num_classes}",
    )
    for cid, items in zip(spec.class_ids, listing, strict=True):
        require(len(set(items)) == len(items), subject, f"class {cid!r} lists duplicates")
        for item in items:
            path = PurePosixPath(item)
            require(
                not path.is_absolute() and ".." not in path.parts and "\\" not in item,
                subject,
                f"item id {item!r} must be a relative POSIX path without '..'",
            )
    first = next((items[0] for items in listing if items), None)
    require(first is not None, subject, "reader found no items at all")
    assert first is not None
    image = spec.reader.load_image(Path(root) if root is not None else None, first)
    require(image.mode == "RGB", subject, f"load_image returned mode {image.mode}, want RGB")
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
    require(backbone.feature_dim > 0, subject, "feature_dim must be positive")
    require(not backbone.image_encoder.training, subject, "image encoder must be in eval mode")
    pixels = _random_pixels(3, backbone.image_size)
    first = backbone.embed(pixels)
    require(
        tuple(first.shape) == (3, backbone.feature_dim),
        subject,
        f"embed returned shape {tuple(first.shape)}, expected (3, {backbone.feature_dim})",
    )
    require(bool(torch.isfinite(first).all()), subject, "embed returned non-finite features")
    second = backbone.embed(pixels)
    require(torch.equal(first, second), subject, "embed is not deterministic")
    single = backbone.embed(pixels[:1])
    require(
        torch.allclose(single, first[:1], atol=1e-4, rtol=1e-4),
        subject,
        "features depend on the other images in the batch",
    )
    report.passed.append("image features")
    if backbone.text is not None:
        tokens = backbone.text.tokenize(["a photo of a cat.", "a photo of a dog."])
        text = backbone.text.encode(tokens)
        require(
            text.ndim == 2 and text.shape[0] == 2,
            subject,
            f"text.encode returned shape {tuple(text.shape)}, expected (2, D)",
        )
        require(
            text.shape[1] == backbone.feature_dim,
            subject,
            "text and image features must share one embedding size",
        )
        require(backbone.text.logit_scale > 0, subject, "logit_scale must be positive")
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
        require(bool(getattr(spec, attr)), subject, f"empty {attr!r}")
    backbone = spec.load(weights=weights, device=device)
    report = check_backbone(backbone, subject)
    require(
        spec.has_text == (backbone.text is not None),
        subject,
        f"modalities {spec.modalities} disagree with the loaded backbone's text tower",
    )
    report.passed.insert(0, "metadata")
    return report


# --- adapters ---------------------------------------------------------------------------


def _state_fingerprint(backbone: Backbone) -> list[torch.Tensor]:
    modules = [backbone.image_encoder]
    if backbone.text is not None:
        modules.append(backbone.text.model)
    return [t.detach().clone() for m in modules for t in m.state_dict().values()]


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
    from fewtrans_board.testing.tiny import tiny_clip_backbone, tiny_vit_backbone, toy_episode

    cfg = _checked_declarations(adapter_cls, config)
    subject = f"adapter {adapter_cls.name!r}"
    report = CheckReport(subject)
    report.passed.append("declarations")

    if backbone is None:
        backbone = tiny_clip_backbone() if adapter_cls.needs_text else tiny_vit_backbone()
    if adapter_cls.needs_text:
        require(backbone.text is not None, subject, "needs a text tower; got a vision backbone")
    episode = toy_episode(image_size=backbone.image_size, seed=seed)
    adapter = adapter_cls()
    before = _state_fingerprint(backbone)
    logits = _checked_logits(adapter, backbone, episode, cfg, seed)
    report.passed.append("logits shape and finiteness")
    _check_determinism(adapter, backbone, episode, cfg, seed, logits)
    report.passed.append("determinism")
    _check_untouched(subject, before, _state_fingerprint(backbone))
    report.passed.append("backbone untouched")

    if adapter_cls.overrides_fit_many():
        probe = toy_episode(
            image_size=backbone.image_size, seed=seed, n_query_per_class=FIT_MANY_QUERIES_PER_CLASS
        )
        report.details["fit_many"] = check_fit_many(adapter, backbone, probe, cfg, seed)
    else:  # the inherited fit_many is the loop of fit, and the runner loops fit itself
        report.details["fit_many"] = "inherited: the loop of fit"
    report.passed.append("fit_many agrees with fit")
    accuracy = float((logits.argmax(1) == episode.query_labels).float().mean())
    n_query, n_way = tuple(logits.shape)
    report.details.update({"toy_accuracy": accuracy, "n_query": n_query, "n_way": n_way})
    return report


def _checked_declarations(
    adapter_cls: type[Adapter], config: AdapterConfig | None
) -> AdapterConfig:
    """The class's name and declarations, and the config to check (its round trip too)."""
    try:
        validate_name("adapter", getattr(adapter_cls, "name", None))
    except FewtransError as exc:
        raise ContractError(f"adapter class {adapter_cls.__qualname__}: {exc}") from exc
    try:
        adapter_cls.check_class()  # its messages name the class already
    except FewtransError as exc:
        raise ContractError(str(exc)) from exc
    subject = f"adapter {adapter_cls.name!r}"
    cfg = config if config is not None else adapter_cls.Config()
    require(isinstance(cfg, adapter_cls.Config), subject, "config is not an instance of Config")
    round_trip = adapter_cls.Config.from_dict(cfg.to_dict())
    require(round_trip == cfg, subject, "Config.from_dict(to_dict()) changed the values")
    return cfg


def _checked_logits(
    adapter: Adapter, backbone: Backbone, episode: ToyEpisode, cfg: AdapterConfig, seed: int
) -> torch.Tensor:
    """One fit's query logits: one row per query, one column per way, all finite."""
    import torch

    subject = f"adapter {adapter.name!r}"
    logits = fit_and_predict(adapter, backbone, episode, cfg, seed)
    n_query, n_way = len(episode.query), episode.support.n_way
    require(
        tuple(logits.shape) == (n_query, n_way),
        subject,
        f"logits have shape {tuple(logits.shape)}, expected ({n_query}, {n_way})",
    )
    require(bool(torch.isfinite(logits).all()), subject, "logits contain NaN or inf")
    return logits


def _check_determinism(
    adapter: Adapter,
    backbone: Backbone,
    episode: ToyEpisode,
    cfg: AdapterConfig,
    seed: int,
    logits: torch.Tensor,
) -> None:
    """A second fit with the same seed gives the same logits, bit for bit."""
    import torch

    again = fit_and_predict(adapter, backbone, episode, cfg, seed)
    require(
        torch.equal(logits, again),
        f"adapter {adapter.name!r}",
        "two fits with the same seed gave different logits; seed every random choice "
        "from torch's global generator so results can be re-run and verified",
    )


def _check_untouched(subject: str, before: list[torch.Tensor], after: list[torch.Tensor]) -> None:
    """The backbone's state after the fits equals its state before them."""
    import torch

    require(
        len(before) == len(after)
        and all(torch.equal(a, b) for a, b in zip(before, after, strict=True)),
        subject,
        "fit modified the shared backbone in place; deep-copy the modules you train",
    )


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
