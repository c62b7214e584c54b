"""Submission errors carry a stable code so tests and CI can tell faults apart."""

from __future__ import annotations

import re

from fewtrans_board.core.errors import FewtransError

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
    """A submission bundle or store entry is rejected.

    The message is always one line (whitespace collapsed, control characters escaped,
    length bounded), prefixed with the code.

    Attributes:
        code: a short stable identifier of the fault (``"unsafe-path"``, ``"grid-mismatch"``).
    """

    def __init__(self, code: str, message: str) -> None:
        self.code = code
        self.message = one_line(message)
        super().__init__(f"[{code}] {self.message}")

    def __reduce__(self) -> tuple[type[SubmissionError], tuple[str, str]]:
        return (type(self), (self.code, self.message))  # picklable across processes
