"""timm backbones: any timm architecture, weights from the hub or a local checkpoint."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fewtrans_board.errors import FewtransError
from fewtrans_board.models.backbone import Backbone
from fewtrans_board.models.weights import fit_checkpoint


def load_timm_backbone(
    architecture: str,
    weights: Path | None,
    device: str = "cpu",
    *,
    name: str | None = None,
    model_kwargs: dict[str, Any] | None = None,
) -> Backbone:
    """Create a timm feature extractor and wrap it as a :class:`Backbone`.

    Args:
        architecture: a timm model name, optionally with a pretrained tag
            (``"resnet10t.c3_in1k"``).
        weights: local checkpoint; ``None`` downloads the pretrained tag from the hub.
        device: torch device.
        name: registry name recorded on the backbone (defaults to ``architecture``).
        model_kwargs: extra ``timm.create_model`` arguments (``img_size``, ...).

    Raises:
        FewtransError: unknown architecture, failed download, or a checkpoint whose keys
            do not match the architecture.
    """
    import timm

    kwargs = dict(model_kwargs or {})
    try:
        model: Any = timm.create_model(architecture, pretrained=weights is None, **kwargs)
    except RuntimeError as exc:
        raise FewtransError(f"timm does not know architecture {architecture!r}: {exc}") from exc
    except Exception as exc:
        raise FewtransError(
            f"cannot download pretrained weights for {architecture!r} "
            f"({type(exc).__name__}: {exc}). Offline? Pass --weights FILE with a local "
            "checkpoint (safetensors preferred)."
        ) from exc

    if weights is not None:
        head = model.pretrained_cfg.get("classifier") or ""
        heads = head if isinstance(head, (list, tuple)) else [head]

        def is_head(key: str) -> bool:
            return any(h and (key == h or key.startswith(h + ".")) for h in heads)

        weights_id = fit_checkpoint(
            model, weights, f"timm {architecture!r}", ignore=is_head, mark_truncation=True
        )
        source = str(weights)
    else:
        weights_id = f"timm:{architecture}"
        source = "hub"
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
