"""The ``meta-trained`` model: a meta-trained checkpoint loaded as an ordinary backbone.

The checkpoint names its base model; the base model's own loader builds the architecture
and checks the encoder weights (they are handed to it as a local safetensors file), and the
learned head travels with the backbone for the meta-learning adapters.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fewtrans_board.api.backbone import Backbone
from fewtrans_board.core.errors import FewtransError
from fewtrans_board.models.weights import file_sha256

if TYPE_CHECKING:
    import torch

    from fewtrans_board.api.model_spec import ModelRegistry


@dataclass
class MetaBackbone(Backbone):
    """A backbone from a meta-trained checkpoint.

    Attributes:
        method: the meta-learning method it was trained with (``protonet`` ...).
        head: the learned head tensors (relation module, FCE LSTMs, MetaOpt scale, MAML
            head init).
    """

    method: str = ""
    head: dict[str, torch.Tensor] = field(default_factory=dict)


def current_method_name(meta: dict[str, Any]) -> str:
    """The method a checkpoint's record names, in today's names.

    Checkpoints written before the faithful defaults (no ``methods_revision``) used
    ``matchingnet``, ``relationnet``, ``metaopt`` and ``maml`` for what are now
    ``matchingnet-nofce``, ``relationnet-mlp``, ``metaopt-ridge`` and ``proto-maml``.
    """
    from fewtrans_board.methods.meta.methods import LEGACY_NAMES

    name = str(meta["method"])
    if int(meta.get("methods_revision", 1)) < 2:
        return LEGACY_NAMES.get(name, name)
    return name


def load_meta_trained(
    weights: Path | None, device: str, *, registry: ModelRegistry | None = None
) -> MetaBackbone:
    """Load a ``meta-train`` checkpoint (required) onto its base architecture.

    Args:
        weights: the checkpoint.
        device: torch device string.
        registry: where the base model is resolved (the registry ``meta-trained`` was
            loaded from; ``None``: the installed plugins).

    Raises:
        FewtransError: no checkpoint given, an unreadable one, or a base model that is not
            installed.
    """
    from safetensors.torch import save_file

    from fewtrans_board.methods.meta.checkpoint import read_checkpoint
    from fewtrans_board.registry.lookup import registry_or_installed

    if weights is None:
        raise FewtransError(
            "model 'meta-trained' needs --weights CHECKPOINT written by 'fewtrans-board meta-train'"
        )
    encoder, head, meta = read_checkpoint(weights)
    base = registry_or_installed(registry)
    with tempfile.TemporaryDirectory() as folder:
        encoder_file = Path(folder) / "encoder.safetensors"
        save_file(encoder, str(encoder_file))
        loaded = base.load_model(meta["base_model"], encoder_file, device)
    info: dict[str, Any] = {
        **loaded.info,
        "meta_trained": {k: v for k, v in meta.items() if k != "losses"},
        "checkpoint": weights.name,
    }
    return MetaBackbone(
        name="meta-trained",
        image_encoder=loaded.image_encoder,
        feature_dim=loaded.feature_dim,
        image_size=loaded.image_size,
        text=loaded.text,
        weights_id="sha256:" + file_sha256(weights),
        device=device,
        info=info,
        method=current_method_name(meta),
        head={k: v.to(device) for k, v in head.items()},
    )
