"""Exceptions raised by fewtrans-board.

Every error a user can trigger derives from :class:`FewtransError`, so the CLI can turn
it into a one-paragraph message and a non-zero exit instead of a traceback. Messages say
what is wrong, where (file, episode, field, plugin), and how to fix it.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from typing import Any


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
        super().__init__(
            f"unknown {kind} {name!r}.{did_you_mean(suggestions)} "
            f"Run 'fewtrans-board {kind}s' to list the registered {kind}s."
        )

    def __str__(self) -> str:
        # LookupError would otherwise repr() the message (KeyError-style quoting).
        return str(self.args[0])


def natural_key(text: str) -> list[Any]:
    """Sort key that orders ``vit-b16`` before ``vit-b32`` and ``x2`` before ``x10``."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]


def close_names(name: str, names: Iterable[str], n: int = 3) -> list[str]:
    """Up to ``n`` of ``names`` close to a mistyped ``name``: near spellings, then containers.

    The one rule for every "did you mean" of the command line (registered datasets, models
    and adapters, adapter hyperparameters).
    """
    known = list(names)
    close = difflib.get_close_matches(name, known, n=n, cutoff=0.6)
    contains = [k for k in known if name and name in k and k not in close]
    return (close + sorted(contains, key=natural_key))[:n]


def did_you_mean(suggestions: Iterable[str]) -> str:
    """`` Did you mean 'a', 'b'?`` (with a leading space), or ``""`` without suggestions."""
    shown_names = ", ".join(repr(s) for s in suggestions)
    return f" Did you mean {shown_names}?" if shown_names else ""


class ConfigError(FewtransError):
    """An adapter configuration has unknown keys or values of the wrong type."""


class ContractError(FewtransError):
    """A plugin object broke the contract checked by :mod:`fewtrans_board.testing`."""


def describe(exc: BaseException) -> str:
    """``Type: message`` of an exception on one line (decoder messages span several)."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


MAX_MESSAGE = 1000
"""Longest message shown: a refusal quotes bundle text, which may be megabytes long."""

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def one_line(text: str, limit: int = MAX_MESSAGE) -> str:
    """``text`` on one line, control characters escaped, at most ``limit`` characters.

    Messages quote untrusted bundle text; a terminal must never receive its escape
    sequences or line breaks, and a 2 MB field must not become a 2 MB error.
    """
    flat = " ".join(text.split())
    flat = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", flat)
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def shown(value: object, limit: int = 60) -> str:
    """A short ``repr`` of an untrusted value for a message (truncated, one line)."""
    text = repr(value)
    return one_line(text if len(text) <= limit else f"{text[: limit - 1]}…", limit + 1)


class SubmissionError(FewtransError):
    """Submitted or stored metadata is rejected: a bundle, a store entry, a provenance record.

    The message is always one line (whitespace collapsed, control characters escaped,
    length bounded), prefixed with the code. It lives on the ground floor so that the
    provenance records (:mod:`fewtrans_board.results.documents`) raise the same error
    the leaderboard does (:mod:`fewtrans_board.core.errors` re-exports it).

    Attributes:
        code: a short stable identifier of the fault (``"unsafe-path"``, ``"grid-mismatch"``).
    """

    def __init__(self, code: str, message: str) -> None:
        self.code = code
        self.message = one_line(message)
        super().__init__(f"[{code}] {self.message}")

    def __reduce__(self) -> tuple[type[SubmissionError], tuple[str, str]]:
        return (type(self), (self.code, self.message))  # picklable across processes
