"""A test plugin registering ``tiny-clip.test``: a random-init tiny CLIP with a text tower."""

from __future__ import annotations

from collections.abc import Callable

from fewtrans_board import ModelSpec, hookimpl


@hookimpl
def register_models(register: Callable[[ModelSpec], None]) -> None:
    """Register the tiny CLIP."""
    from fewtrans_board.testing import tiny_clip_backbone

    register(
        ModelSpec(
            name="tiny-clip.test",
            loader=lambda w, d: tiny_clip_backbone(),
            family="open_clip",
            architecture="tiny",
            source="random-init",
            modalities=("image", "text"),
        )
    )
