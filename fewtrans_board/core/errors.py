"""Exceptions raised by fewtrans-board.

Every error a user can trigger derives from :class:`FewtransError`, so the CLI can turn
it into a one-paragraph message and a non-zero exit instead of a traceback. Messages say
what is wrong, where (file, episode, field, plugin), and how to fix it.
"""

from __future__ import annotations


class FewtransError(Exception):
    """Base class of every user-facing error in fewtrans-board."""


class PluginError(FewtransError):
    """A plugin could not be loaded or implements hooks wrongly."""


class RegistrationError(FewtransError):
    """A plugin registered an invalid object (bad name, wrong type, bad config)."""


class DuplicateNameError(RegistrationError):
    """Two plugins registered the same name for the same kind of object."""


class UnknownNameError(FewtransError, LookupError):
    """A dataset, model or adapter name that nobody registered.

    Attributes:
        kind: ``"dataset"``, ``"model"`` or ``"adapter"``.
        name: the name that was asked for.
        suggestions: close matches among registered names.
    """

    def __init__(self, kind: str, name: str, suggestions: list[str]) -> None:
        self.kind = kind
        self.name = name
        self.suggestions = suggestions
        hint = f" Did you mean {', '.join(repr(s) for s in suggestions)}?" if suggestions else ""
        super().__init__(
            f"unknown {kind} {name!r}.{hint} "
            f"Run 'fewtrans-board {kind}s' to list the registered {kind}s."
        )

    def __str__(self) -> str:
        # LookupError would otherwise repr() the message (KeyError-style quoting).
        return str(self.args[0])


class ConfigError(FewtransError):
    """An adapter configuration has unknown keys or values of the wrong type."""


class ContractError(FewtransError):
    """A plugin object broke the contract checked by :mod:`fewtrans_board.testing`."""


def describe(exc: BaseException) -> str:
    """``Type: message`` of an exception on one line (decoder messages span several)."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
