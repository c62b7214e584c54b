"""``ModelSpec``: metadata of a pretrained backbone plus a lazy loader."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fewtrans_board.errors import ContractError

if TYPE_CHECKING:
    from fewtrans_board.models.backbone import Backbone

ModelLoader = Callable[[Path | None, str], "Backbone"]
"""``loader(weights, device) -> Backbone``; ``weights`` is a local file or ``None`` (hub)."""


@dataclass(frozen=True)
class ModelSpec:
    """A registered backbone: cheap metadata and a loader that runs only when needed.

    Attributes:
        name: registry name in ``arch.tag`` form, e.g. ``"vit-b16.openai"``.
        loader: ``loader(weights, device) -> Backbone``. Import torch/timm/open_clip
            inside it. ``weights`` is a local checkpoint (safetensors preferred) or ``None``
            to use the pinned source (hub download when online).
        family: ``"timm"``, ``"open_clip"`` or another family label.
        architecture: the architecture identifier inside that family.
        source: pinned weights source (``"hf-hub:org/repo"``, ``"bundled"``,
            ``"random-init"``, a URL ...).
        license: license of the weights.
        description: one line for listings.
        paper: citation or URL of the paper that introduced the weights.
        modalities: ``("image",)`` or ``("image", "text")`` for CLIP-style models.
    """

    name: str
    loader: ModelLoader
    family: str
    architecture: str
    source: str
    license: str = "unknown"
    description: str = ""
    paper: str = ""
    modalities: tuple[str, ...] = ("image",)

    def load(self, weights: Path | str | None = None, device: str = "cpu") -> Backbone:
        """Load the backbone (heavy: imports torch and reads weights).

        Args:
            weights: local checkpoint to use instead of the pinned source.
            device: torch device string.

        Returns:
            The loaded backbone in eval mode on ``device``.

        Raises:
            ContractError: the loader returned something that is not a ``Backbone``.
        """
        from fewtrans_board.models.backbone import Backbone

        path = Path(weights) if weights is not None else None
        backbone = self.loader(path, device)
        if not isinstance(backbone, Backbone):
            raise ContractError(
                f"model {self.name!r}: loader returned {type(backbone).__name__}, "
                "expected fewtrans_board.Backbone"
            )
        return backbone

    @property
    def has_text(self) -> bool:
        """Whether the model has a text tower (CLIP-style)."""
        return "text" in self.modalities

    def summary(self) -> dict[str, object]:
        """Return a JSON-friendly summary for listings."""
        return {
            "name": self.name,
            "family": self.family,
            "architecture": self.architecture,
            "source": self.source,
            "license": self.license,
            "modalities": list(self.modalities),
            "description": self.description,
            "paper": self.paper,
        }
