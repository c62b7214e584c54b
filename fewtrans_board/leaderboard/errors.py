"""Submission errors carry a stable code so tests and CI can tell faults apart.

The error and its message helpers live in :mod:`fewtrans_board.core.errors` (the
provenance records below the leaderboard raise them too); this module is their
leaderboard name.
"""

from __future__ import annotations

from fewtrans_board.core.errors import MAX_MESSAGE, SubmissionError, one_line, shown

__all__ = ["MAX_MESSAGE", "SubmissionError", "one_line", "shown"]
