"""A plugin whose author wrote ``register_model`` instead of ``register_models``."""

from fewtrans_board import hookimpl


@hookimpl
def register_model(register):  # type: ignore[no-untyped-def]
    """Misspelled on purpose."""
