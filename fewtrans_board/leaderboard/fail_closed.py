"""Reading untrusted data fails closed: an unanticipated error becomes a refusal.

Every reader of a bundle or a stored entry (the intake pipelines, recording CI's status)
wraps its reads in :func:`fail_closed`, so a fault the checks did not name is refused as
``unexpected-fault`` with the exception named, never escaping as a traceback.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from fewtrans_board.core.errors import FewtransError, SubmissionError, describe


@contextlib.contextmanager
def fail_closed(what: str) -> Iterator[None]:
    """Turn an unanticipated error while reading untrusted data into a refusal.

    Args:
        what: the bundle or entry being read, named in the message.

    Raises:
        SubmissionError: unchanged; ``cannot-check`` for another user-facing error (e.g. a
            damaged frozen manifest in the store); ``unexpected-fault`` for anything else.
    """
    try:
        yield
    except SubmissionError:
        raise
    except FewtransError as exc:
        raise SubmissionError("cannot-check", f"{what} cannot be checked: {exc}") from exc
    except Exception as exc:  # fail closed on untrusted input
        raise SubmissionError(
            "unexpected-fault",
            f"{what} is refused: reading it stopped on {describe(exc)} (please report this "
            "with the bundle: the checks should have named the fault)",
        ) from exc
