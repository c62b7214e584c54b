"""The one status vocabulary of a stored entry, computed from its stored verification record.

Every surface that shows whether an entry was checked (``index.json``,
``leaderboard.parquet`` and its CSV, the site's badges, tooltips and method pages) takes
it from :func:`entry_status`; none decides on its own. Three statuses:

- ``re-run`` (:data:`RERUN`): the maintainers re-ran a secret sample of the entry's
  episodes with today's verification (the report lists every dataset: episodes re-run,
  exact or statistical mode) and it passed; shown with its date, sample and mode.
- ``legacy check`` (:data:`LEGACY_CHECK`): passed an earlier, weaker check (a seeded sample
  of three episodes and an agreement threshold) and not re-run since. Still ranked, never
  called re-run; ``fewtrans-board leaderboard reverify`` turns it into ``re-run``.
- ``not verified`` (:data:`NOT_VERIFIED`): stored without a passed re-run
  (``--unsafe-no-verify``, or a record that shows no passed check): listed apart, not ranked.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

RERUN = "re-run"
LEGACY_CHECK = "legacy check"
NOT_VERIFIED = "not verified"
STATUSES = (RERUN, LEGACY_CHECK, NOT_VERIFIED)
"""Every status an entry can have, in order of strength."""
STORED_VERIFIED = "verified"
"""The word ``status.json`` stores for an entry whose verification passed (either kind)."""
UNRANKED = (NOT_VERIFIED, "validated")
"""Statuses listed apart and never ranked (``validated``: ``status.json``'s own word)."""

EXPLANATIONS = {
    RERUN: "Re-run by the maintainers: a secret sample of its episodes re-run with the pinned "
    "plugin in a fresh worker under today's verification rules, and the claim held",
    LEGACY_CHECK: "Verified by an earlier, weaker check (a seeded sample and an agreement "
    "threshold) and not re-run since",
    NOT_VERIFIED: "Passed validation only; stored without a re-run, so not ranked",
}
"""One sentence per status: the badges' tooltips and the method pages say this."""


@dataclass(frozen=True)
class VerificationStatus:
    """What an entry's stored verification record says, in the shared vocabulary.

    Attributes:
        kind: one of :data:`STATUSES`.
        date: ``re-run``: the UTC date of the re-run (``YYYY-MM-DD``; ``None`` for reports
            written before dates were recorded).
        rerun_episodes: ``re-run``: episodes re-run, over every dataset.
        episodes: ``re-run``: episodes of the entry's frozen manifests, over every dataset.
        mode: ``re-run``: ``exact`` (predictions equal the stored ones), ``statistical``
            (another numeric environment: claimed minus re-run accuracy bounded), or
            ``mixed`` (datasets judged differently).
        isolation: ``re-run``: the worker's isolation (``sandbox``, or ``process`` when run
            unsandboxed).
    """

    kind: str
    date: str | None = None
    rerun_episodes: int | None = None
    episodes: int | None = None
    mode: str | None = None
    isolation: str | None = None

    @property
    def ranked(self) -> bool:
        """Whether an entry with this status is ranked (``re-run`` and ``legacy check``)."""
        return self.kind not in UNRANKED

    @property
    def explanation(self) -> str:
        """The status's sentence (:data:`EXPLANATIONS`)."""
        return EXPLANATIONS[self.kind]

    @property
    def summary(self) -> str:
        """One line: ``re-run 2026-12-07, 45 of 600 episodes, exact`` (or the bare status)."""
        if self.kind != RERUN:
            return self.kind
        parts = [f"re-run {self.date}" if self.date else "re-run (date not recorded)"]
        if self.rerun_episodes is not None and self.episodes is not None:
            parts.append(f"{self.rerun_episodes} of {self.episodes} episodes")
        if self.mode:
            parts.append(self.mode)
        if self.isolation == "process":
            parts.append("unsandboxed")
        return ", ".join(parts)

    @property
    def sentence(self) -> str:
        """What a tooltip says: the explanation, with a re-run's date, sample and mode."""
        return f"{self.explanation} ({self.summary})" if self.kind == RERUN else self.explanation

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form (``index.json``'s ``status_detail``)."""
        return {
            "status": self.kind,
            "date": self.date,
            "rerun_episodes": self.rerun_episodes,
            "episodes": self.episodes,
            "mode": self.mode,
            "isolation": self.isolation,
            "summary": self.summary,
        }


def _count(datasets: list[Mapping[str, Any]], key: str) -> int | None:
    """The sum of an integer field over the datasets (``None`` if one lacks it)."""
    values = [d.get(key) for d in datasets]
    counts = [v for v in values if isinstance(v, int) and not isinstance(v, bool)]
    return sum(counts) if len(counts) == len(values) else None


def _rerun(record: Mapping[str, Any]) -> VerificationStatus | None:
    """The ``re-run`` status of a passed report of today's verification, else ``None``."""
    datasets = record.get("datasets")
    if record.get("passed") is not True or not isinstance(datasets, list) or not datasets:
        return None
    if not all(isinstance(d, Mapping) and d.get("passed") is not False for d in datasets):
        return None
    modes = {d.get("mode") for d in datasets}
    if not modes <= {"exact", "statistical"}:
        return None
    date = record.get("date")
    return VerificationStatus(
        RERUN,
        date=date[:10] if isinstance(date, str) and len(date) >= 10 else None,
        rerun_episodes=_count(datasets, "rerun_episodes"),
        episodes=_count(datasets, "episodes"),
        mode=modes.pop() if len(modes) == 1 else "mixed",
        isolation=str(record["isolation"]) if isinstance(record.get("isolation"), str) else None,
    )


def _legacy(record: Mapping[str, Any]) -> bool:
    """Whether ``record`` is a passed report of the earlier check (sample and threshold)."""
    return (
        record.get("passed") is True
        and isinstance(record.get("episodes"), list)
        and "threshold" in record
        and "datasets" not in record
    )


def entry_status(stored: str, record: Mapping[str, Any] | None) -> VerificationStatus:
    """An entry's status from its ``status.json``: its word and its verification record.

    Only a passed report of today's verification makes ``re-run``, and only a passed
    report of the earlier check makes ``legacy check``; anything else (``validated``, a
    skipped or failed verification, a record of no known shape) is ``not verified``.

    Args:
        stored: ``status.json``'s ``status`` (``verified`` or ``validated``).
        record: its ``verification`` (``None`` when it has none).
    """
    if stored != STORED_VERIFIED or not isinstance(record, Mapping):
        return VerificationStatus(NOT_VERIFIED)
    rerun = _rerun(record)
    if rerun is not None:
        return rerun
    return VerificationStatus(LEGACY_CHECK if _legacy(record) else NOT_VERIFIED)
