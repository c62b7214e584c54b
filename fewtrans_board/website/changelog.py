"""The index's changelog of entries and the site's build date, both read from the store.

Nothing here reads a clock: an entry's date is its results' (the latest ``created_at`` of
its runs' provenance; the store records no merge date), a supersession is dated by the
superseding entry, a re-verification by its stored verification record (a dated ``re-run``
in the shared vocabulary of :mod:`~fewtrans_board.leaderboard.status`), and the build date
is the latest of these unless ``--build-date`` or ``SOURCE_DATE_EPOCH`` names one. The same
store therefore builds the same pages on any day.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fewtrans_board.core.errors import FewtransError
from fewtrans_board.leaderboard.status import (
    RERUN,
    STORED_VERIFIED,
    UNRANKED,
    VerificationStatus,
    entry_status,
)
from fewtrans_board.website.model import MethodView

KINDS = ("added", "superseded", "re-verified")
"""The kinds of change, in the order listed on one day."""


class BuildDateError(FewtransError):
    """A build date that is not a date (``--build-date`` or ``SOURCE_DATE_EPOCH``)."""


@dataclass(frozen=True)
class Change:
    """One line of the changelog.

    Attributes:
        date: ``YYYY-MM-DD``.
        kind: one of :data:`KINDS`.
        entry: the entry the change is about.
        detail: what changed, in words (``by <entry>``, ``3 episodes re-run``).
    """

    date: str
    kind: str
    entry: MethodView
    detail: str = ""


@dataclass(frozen=True)
class BuildDate:
    """The date a site is built as of, and where it came from.

    Attributes:
        date: ``YYYY-MM-DD``, or ``""`` when the store dates nothing and none was given.
        source: ``--build-date``, ``SOURCE_DATE_EPOCH`` or ``the store's latest change``.
    """

    date: str
    source: str

    @property
    def text(self) -> str:
        """The sentence the pages show."""
        if not self.date:
            return "Build date: none (the store dates no entry; give --build-date)."
        return f"Data as of {self.date} ({self.source})."


def _day(value: Any) -> str:
    """The ``YYYY-MM-DD`` of an ISO date or timestamp, or ``""`` when it is not one."""
    if not isinstance(value, str):
        return ""
    try:
        return dt.date.fromisoformat(value[:10]).isoformat()
    except ValueError:
        return ""


def entry_date(method: MethodView) -> str:
    """The day an entry's results were made: the latest ``created_at`` of its runs."""
    days = [_day(run.run.meta.get("created_at")) for run in method.runs.values()]
    return max((d for d in days if d), default="")


def rerun_status(method: MethodView) -> VerificationStatus | None:
    """The entry's dated ``re-run`` status, or ``None`` (not re-run, or its date not recorded).

    Read with the shared vocabulary (:func:`~fewtrans_board.leaderboard.status.entry_status`)
    so that the changelog calls re-verified exactly what every other surface calls re-run.
    """
    if method.status in UNRANKED:
        return None
    status = entry_status(STORED_VERIFIED, method.verification)
    return status if status.kind == RERUN and status.date else None


def _rerun_detail(status: VerificationStatus) -> str:
    parts = []
    if status.rerun_episodes is not None and status.episodes is not None:
        parts.append(f"{status.rerun_episodes} of {status.episodes} episodes re-run")
    if status.mode:
        parts.append(status.mode)
    return ", ".join(parts) or "re-run"


def changelog(methods: Sequence[MethodView]) -> list[Change]:
    """Every dated change of the stored entries, newest first.

    Local (unsubmitted) runs are left out. On one day, additions come before
    supersessions and re-verifications; then entries by id.
    """
    stored = [m for m in methods if m.status != "local"]
    by_id = {m.id: m for m in stored}
    changes = []
    for method in stored:
        added = entry_date(method)
        if added:
            changes.append(Change(added, "added", method, f"to {method.meta.benchmark}"))
        newer = by_id.get(method.superseded_by or "")
        if newer is not None and entry_date(newer):
            changes.append(Change(entry_date(newer), "superseded", method, f"by {newer.label}"))
        rerun = rerun_status(method)
        if rerun is not None and rerun.date:
            changes.append(Change(rerun.date, "re-verified", method, _rerun_detail(rerun)))
    changes.sort(key=lambda c: (KINDS.index(c.kind), c.entry.id))
    changes.sort(key=lambda c: c.date, reverse=True)  # stable: the order above within a day
    return changes


def build_date(
    changes: Sequence[Change],
    explicit: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> BuildDate:
    """The date the site is built as of: ``explicit``, else ``SOURCE_DATE_EPOCH``, else the store's.

    Args:
        changes: the store's :func:`changelog`.
        explicit: ``YYYY-MM-DD`` (``site build --build-date``).
        environ: where to read ``SOURCE_DATE_EPOCH`` (default ``os.environ``).

    Raises:
        BuildDateError: ``explicit`` is not a date, or ``SOURCE_DATE_EPOCH`` not an integer.
    """
    if explicit is not None:
        day = _day(explicit) if len(explicit) == 10 else ""
        if not day:
            raise BuildDateError(
                f"--build-date {explicit[:40]!r} is not a date; give it as YYYY-MM-DD"
            )
        return BuildDate(day, "--build-date")
    epoch = (os.environ if environ is None else environ).get("SOURCE_DATE_EPOCH", "").strip()
    if epoch:
        try:
            moment = dt.datetime.fromtimestamp(int(epoch), tz=dt.UTC)
        except (ValueError, OverflowError, OSError) as exc:
            raise BuildDateError(
                f"SOURCE_DATE_EPOCH={epoch[:40]!r} is not a Unix time in seconds; "
                "unset it or give an integer"
            ) from exc
        return BuildDate(moment.date().isoformat(), "SOURCE_DATE_EPOCH")
    latest = max((c.date for c in changes), default="")
    return BuildDate(latest, "the store's latest change" if latest else "")
