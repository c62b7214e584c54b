"""An entry's ``status.json`` is CI's own report, never a pull request's claim.

``check-pr --status-out DIR`` writes ``DIR/<id>.json`` (``{"status": "verified",
"verification": <report>}``) for every new entry it verified; after the merge
``record-status DIR`` installs a file only for a stored entry whose files are exactly the
ones its passed report verified (its ``digest``) and refuses anything else by name
(CONTRIBUTING.md, "The leaderboard store and its blobs").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fewtrans_board.core.atomic import write_bytes_atomic
from fewtrans_board.core.errors import SubmissionError
from fewtrans_board.leaderboard.fail_closed import fail_closed
from fewtrans_board.leaderboard.store import status_text

if TYPE_CHECKING:
    from fewtrans_board.leaderboard.store import LeaderboardStore

STATUS_SUFFIX = ".json"
MAX_STATUS_BYTES = 64 << 20
"""A status file larger than this is refused unread (a report is kilobytes to megabytes)."""


def write_ci_statuses(
    verifications: Mapping[str, dict[str, Any] | None], folder: Path
) -> dict[str, Path]:
    """Write ``folder/<id>.json`` for every entry the check verified (and passed).

    Args:
        verifications: ``{id: verification report}`` of the entries that passed the check
            (``None``: checked without verification); entries that failed are left out,
            and they and the unverified ones get nothing.
        folder: where to write.

    Returns:
        ``{id: path}`` of the files written.
    """
    written = {}
    folder.mkdir(parents=True, exist_ok=True)
    for ident, verification in sorted(verifications.items()):
        if verification is None:
            continue
        path = folder / f"{ident}{STATUS_SUFFIX}"
        record = {"status": "verified", "verification": verification}
        write_bytes_atomic(path, status_text(record).encode())
        written[ident] = path
    return written


@dataclass
class RecordReport:
    """What ``record-status`` did.

    Attributes:
        recorded: ``{id: status file}`` of the statuses installed.
        refused: ``{status file name: (code, message)}`` of the files refused.
    """

    recorded: dict[str, Path] = field(default_factory=dict)
    refused: dict[str, tuple[str, str]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Whether every file was recorded."""
        return not self.refused

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return {
            "ok": self.ok,
            "recorded": {i: str(p) for i, p in self.recorded.items()},
            "refused": {n: {"code": c, "error": m} for n, (c, m) in self.refused.items()},
        }


def checked_status(path: Path, store: LeaderboardStore) -> tuple[str, dict[str, Any]]:
    """Read a CI status file and check it against the stored entry it names.

    Returns:
        ``(id, status record)`` to write as the entry's ``status.json``.

    Raises:
        SubmissionError: the file names no stored entry (``unknown-submission``), is not a
            status record (``bad-status``), records no passed verification
            (``status-not-passed``), or verified other files than the entry holds now
            (``status-digest-mismatch``).
    """
    from fewtrans_board.results.documents import EntryStatus
    from fewtrans_board.results.strict_json import load_json

    name = path.name
    ident = name.removesuffix(STATUS_SUFFIX)
    if not name.endswith(STATUS_SUFFIX) or ident not in store.submission_ids():
        raise SubmissionError(
            "unknown-submission",
            f"{name}: names no stored entry of {store.root} (a status file is <id>.json, "
            "written by 'leaderboard check-pr --status-out'; merge the entry first)",
        )
    if path.is_symlink() or not path.is_file() or path.stat().st_size > MAX_STATUS_BYTES:
        raise SubmissionError("bad-status", f"{name}: not a regular file of at most 64 MiB")
    record = EntryStatus.from_json(
        load_json(path.read_bytes(), name, "bad-status"), name, code="bad-status"
    ).to_json()
    report = record.get("verification") or {}
    if record["status"] != "verified" or report.get("passed") is not True:
        raise SubmissionError(
            "status-not-passed",
            f"{name}: records no passed verification (status {record['status']!r}, passed "
            f"{report.get('passed')!r}); only a report of a check that passed is recorded",
        )
    if report.get("submission") != ident:
        raise SubmissionError(
            "status-digest-mismatch",
            f"{name}: the report verified submission {report.get('submission')!r}, not "
            f"{ident!r}; record each entry's own report",
        )
    with fail_closed(f"stored entry {ident}"):
        digest = store.entry_contents(ident).digest()
    if report.get("digest") != digest:
        raise SubmissionError(
            "status-digest-mismatch",
            f"{name}: the report verified files of digest {str(report.get('digest'))[:16]}..., "
            f"but stored entry {ident} has digest {digest[:16]}...; it checked other files "
            "than the store holds (re-run 'leaderboard check-pr --status-out' on the merged "
            "entry, or 'leaderboard check ID --verify')",
        )
    return ident, record


def record_statuses(folder: Path, store: LeaderboardStore) -> RecordReport:
    """Install the CI status files of ``folder`` into the store, then rebuild its index.

    Every file is checked first (:func:`checked_status`); those that pass become their
    entries' ``status.json`` (each written atomically), those that do not are refused by
    name and change nothing. The index is rebuilt when anything was recorded; if it cannot
    be (another stored entry is unreadable), the statuses written are put back as they
    were and the error is raised.

    Raises:
        SubmissionError: the index cannot be rebuilt.
    """
    from fewtrans_board.leaderboard.index import build_index
    from fewtrans_board.leaderboard.summary_cache import SummaryCache, default_root

    outcome = RecordReport()
    accepted: dict[str, tuple[Path, dict[str, Any]]] = {}
    for path in sorted(folder.iterdir()):
        try:
            ident, record = checked_status(path, store)
        except SubmissionError as exc:
            outcome.refused[path.name] = (exc.code, str(exc))
            continue
        accepted[ident] = (path, record)
    if not accepted:
        return outcome
    previous: dict[Path, bytes | None] = {}
    for ident, (path, record) in accepted.items():
        target = store.submissions_dir / ident / "status.json"
        previous[target] = target.read_bytes() if target.is_file() else None
        write_bytes_atomic(target, status_text(record).encode())
        outcome.recorded[ident] = path
    try:
        index = build_index(store, cache=SummaryCache(default_root()))
    except SubmissionError:
        for target, data in previous.items():
            if data is None:
                target.unlink()
            else:
                write_bytes_atomic(target, data)
        raise
    store.write_index(index)
    return outcome
