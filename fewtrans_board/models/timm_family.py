"""timm backbones: any timm architecture, weights from the hub or a local checkpoint."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fewtrans_board.api.backbone import Backbone
from fewtrans_board.core.errors import FewtransError
from fewtrans_board.models.weights import fit_checkpoint, fit_state_dict

RANDOM_TAG = "random"
"""``timm:ARCH.random``: the architecture with seeded random-init weights, no download."""

CheckpointReader = Callable[[Path, Any], dict[str, Any]]
"""``read(path, model) -> state dict`` under the model's names (a release format mapped)."""


def load_timm_backbone(
    architecture: str,
    weights: Path | None,
    device: str = "cpu",
    *,
    name: str | None = None,
    model_kwargs: dict[str, Any] | None = None,
    random_init: bool = False,
    checkpoint: CheckpointReader | None = None,
) -> Backbone:
    """Create a timm feature extractor and wrap it as a :class:`Backbone`.

    Args:
        architecture: a timm model name, optionally with a pretrained tag
            (``"resnet10t.c3_in1k"``).
        weights: local checkpoint; ``None`` downloads the pretrained tag from the hub
            (failing at once when the hub is unreachable and the cache lacks it).
        device: torch device.
        name: registry name recorded on the backbone (defaults to ``architecture``).
        model_kwargs: extra ``timm.create_model`` arguments (``img_size``, ...).
        random_init: no weights at all: timm's initialisation under torch seed 0 (the
            global random state is left untouched); the weights id hashes the tensors.
        checkpoint: reads ``weights`` for this model (a release's own format converted to
            timm's names); default: the file's state dict as it is.

    Raises:
        FewtransError: unknown architecture, failed download, a checkpoint whose keys
            do not match the architecture, or weights given for a random-init model.
    """
    kwargs = dict(model_kwargs or {})
    if random_init and weights is not None:
        raise FewtransError(
            f"timm {architecture!r} is requested random-init ('.{RANDOM_TAG}') and with "
            "--weights; drop one of them"
        )
    model = _create_model(architecture, weights, kwargs, random_init)
    weights_id, source = _load_weights(model, architecture, weights, random_init, checkpoint)
    model.reset_classifier(0)
    model = model.to(device).eval()
    input_size = model.pretrained_cfg.get("input_size", (3, 224, 224))
    image_size = int(kwargs.get("img_size", input_size[-1]))
    return Backbone(
        name=name or architecture,
        image_encoder=model,
        feature_dim=int(getattr(model, "head_hidden_size", model.num_features)),
        image_size=image_size,
        weights_id=weights_id,
        device=device,
        info={"family": "timm", "architecture": architecture, "weights": source},
    )


def _create_model(
    architecture: str, weights: Path | None, kwargs: dict[str, Any], random_init: bool
) -> Any:
    """The timm model: seeded random init, pretrained from the hub, or empty for ``weights``."""
    import timm
    import torch

    from fewtrans_board.models.hub import hub_access, offline_hint

    online = True
    try:
        if random_init:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(0)
                return timm.create_model(architecture, pretrained=False, **kwargs)
        if weights is None:
            with hub_access() as online:
                return timm.create_model(architecture, pretrained=True, **kwargs)
        return timm.create_model(architecture, pretrained=False, **kwargs)
    except RuntimeError as exc:
        raise FewtransError(f"timm does not know architecture {architecture!r}: {exc}") from exc
    except Exception as exc:
        raise FewtransError(
            f"cannot download pretrained weights for {architecture!r} "
            f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}). "
            f"{offline_hint(online)} Or use timm:{architecture.partition('.')[0]}.{RANDOM_TAG} "
            "for random-init weights."
        ) from exc


def _load_weights(
    model: Any,
    architecture: str,
    weights: Path | None,
    random_init: bool,
    checkpoint: CheckpointReader | None = None,
) -> tuple[str, str]:
    """The weights id and source, a local checkpoint loaded first (its classifier may differ)."""
    if weights is not None:
        head = model.pretrained_cfg.get("classifier") or ""
        heads = head if isinstance(head, (list, tuple)) else [head]

        def is_head(key: str) -> bool:
            return any(h and (key == h or key.startswith(h + ".")) for h in heads)

        label = f"timm {architecture!r}"
        if checkpoint is None:
            weights_id = fit_checkpoint(model, weights, label, ignore=is_head, mark_truncation=True)
        else:
            state = checkpoint(weights, model)
            weights_id = fit_state_dict(
                model, state, weights, label, ignore=is_head, mark_truncation=True
            )
        return weights_id, str(weights)
    if random_init:
        return f"random-init:{tensor_digest(model.state_dict())[:16]}", "random-init (torch seed 0)"
    return f"timm:{architecture}", "hub"


def tensor_digest(state: dict[str, Any]) -> str:
    """sha256 over a state dict's names, shapes, dtypes and bytes, in name order."""
    import torch

    digest = hashlib.sha256()
    for key in sorted(state):
        tensor = state[key].detach().cpu().contiguous()
        digest.update(f"{key}:{tuple(tensor.shape)}:{tensor.dtype};".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()
