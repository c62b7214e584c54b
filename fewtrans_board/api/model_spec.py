"""``ModelSpec``: metadata of a pretrained backbone plus a lazy loader."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

from fewtrans_board.core.errors import ContractError, FewtransError
from fewtrans_board.core.plugin_calls import accepts_keyword, plugin_code

if TYPE_CHECKING:
    from fewtrans_board.api.backbone import Backbone

ModelLoader = Callable[[Path | None, str], "Backbone"]
"""``loader(weights, device) -> Backbone``; ``weights`` is a local file or ``None`` (hub).

A loader that builds its model from other models also declares a keyword-only
``registry: ModelRegistry | None = None`` and gets the registry the model was resolved in."""

FamilyLoader = Callable[[str, Path | None, str], "Backbone"]
"""``loader(argument, weights, device) -> Backbone`` for parametric families (``timm:ARCH``)."""


class ModelRegistry(Protocol):
    """What a loader that builds its model from other models gets as ``registry``.

    The plugins' ``Registry`` the model was resolved in; a loader declaring a ``registry``
    keyword (``library:A+B``, ``meta-trained``) loads the models it names through it, so
    they come from exactly the plugins the caller selected.
    """

    def load_model(
        self, name: str, weights: Path | str | None = None, device: str = "cpu"
    ) -> Backbone:
        """Resolve ``name`` and load it (passing this registry on)."""
        ...


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
        family_loader: set for a parametric family; the model is then used as
            ``NAME:ARGUMENT`` (``timm:vit_small_patch16_224.augreg_in21k``).
        argument_help: what ``ARGUMENT`` means, for listings.
        argument_check: raises :class:`FewtransError` for an ``ARGUMENT`` the family cannot
            load, without loading it (commands refuse a bad name before any work).
    """

    name: str
    loader: ModelLoader | None
    family: str
    architecture: str
    source: str
    license: str = "unknown"
    description: str = ""
    paper: str = ""
    modalities: tuple[str, ...] = ("image",)
    family_loader: FamilyLoader | None = None
    argument_help: str = ""
    argument_check: Callable[[str], None] | None = None

    @property
    def parametric(self) -> bool:
        """Whether this entry is a family used as ``NAME:ARGUMENT``."""
        return self.family_loader is not None

    def variant(self, argument: str) -> ModelSpec:
        """Return the concrete spec ``NAME:ARGUMENT`` of a parametric family.

        Raises:
            FewtransError: the model is not parametric or the argument is malformed.
        """
        if self.family_loader is None:
            raise FewtransError(f"model {self.name!r} takes no ':ARGUMENT'")
        if not argument or any(ch.isspace() for ch in argument):
            raise FewtransError(
                f"model {self.name}:{argument!r}: the argument must be non-empty without "
                f"spaces ({self.argument_help})"
            )
        if self.argument_check is not None:
            self.argument_check(argument)
        family_loader = self.family_loader
        return dataclasses.replace(
            self,
            name=f"{self.name}:{argument}",
            loader=functools.partial(family_loader, argument),
            architecture=argument,
            family_loader=None,
        )

    def load(
        self,
        weights: Path | str | None = None,
        device: str = "cpu",
        *,
        registry: ModelRegistry | None = None,
    ) -> Backbone:
        """Load the backbone (heavy: imports torch and reads weights).

        Args:
            weights: local checkpoint to use instead of the pinned source.
            device: torch device string.
            registry: the registry the model was resolved in. Passed on only to a loader
                that declares a ``registry`` keyword (one that loads other models); such a
                loader falls back to the installed plugins when it gets ``None``.

        Returns:
            The loaded backbone in eval mode on ``device``.

        Raises:
            ContractError: the loader returned something that is not a ``Backbone``.
            PluginCallError: the loader raised an exception that is not a FewtransError.
        """
        from fewtrans_board.api.backbone import Backbone

        if self.loader is None:
            raise FewtransError(
                f"model {self.name!r} is a family: use it as '{self.name}:ARGUMENT' "
                f"({self.argument_help})"
            )
        path = Path(weights) if weights is not None else None
        loader = getattr(self.loader, "func", self.loader)  # a family variant is a partial
        with plugin_code(f"model {self.name!r}", "loading", owner=loader):
            if accepts_keyword(self.loader, "registry"):
                backbone = cast(Callable[..., Any], self.loader)(path, device, registry=registry)
            else:
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
            "argument": self.argument_help or None,
        }
