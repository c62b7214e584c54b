"""Submission errors carry a stable code so tests and CI can tell faults apart."""

from __future__ import annotations

from fewtrans_board.errors import FewtransError


class SubmissionError(FewtransError):
    """A submission bundle or store entry is rejected.

    Attributes:
        code: a short stable identifier of the fault (``"unsafe-path"``, ``"grid-mismatch"``).
    """

    def __init__(self, code: str, message: str) -> None:
        self.code = code
        super().__init__(f"[{code}] {message}")
