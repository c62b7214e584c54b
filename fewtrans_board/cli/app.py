"""Per-invocation application state shared by commands (``ctx.obj``)."""

from __future__ import annotations

import click

from fewtrans_board.registry.lookup import Registry
from fewtrans_board.registry.manager import PluginManager


class App:
    """The plugin manager and a registry built on first use.

    Args:
        pm: the plugin manager the CLI was built from.
        debug: whether ``--debug`` was given (full tracebacks).
    """

    def __init__(self, pm: PluginManager, debug: bool = False) -> None:
        self.pm = pm
        self.debug = debug
        self._registry: Registry | None = None

    @property
    def registry(self) -> Registry:
        """The registry, built from the plugin manager on first access."""
        if self._registry is None:
            self._registry = Registry.from_plugin_manager(self.pm)
        return self._registry


pass_app = click.make_pass_decorator(App)
"""Decorator passing the :class:`App` to a command."""
