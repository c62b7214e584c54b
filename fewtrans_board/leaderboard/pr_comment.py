"""The pull-request comment CI posts: the report ``check-pr --json`` wrote, as Markdown.

The report is read as untrusted data (the pull request's ids and error messages are in it):
every piece of it is shown inside an inline code span, so a submitter cannot add links,
mentions or HTML to the maintainers' comment. A missing, empty or malformed report (the
check crashed, timed out or was cancelled before writing it) gives a comment saying so and
where to look, never a crash of the comment step.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

TITLE = "### Leaderboard check"
MAX_REPORT_BYTES = 16 << 20
"""A report larger than this is not read (a check.json is kilobytes)."""
MAX_SHOWN = 300
"""Characters of one untrusted value shown in the comment."""


def code(value: object) -> str:
    """``value`` as one inline code span: backticks and line breaks removed, length capped."""
    text = " ".join(str(value).replace("`", "'").split())
    if len(text) > MAX_SHOWN:
        text = text[: MAX_SHOWN - 1] + "…"
    return f"`{text}`" if text else "`-`"


def _number(value: object, spec: str = ".2f") -> str:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return "n/a"
    return format(value, spec)


def _mapping(value: object) -> dict[str, Any]:
    """``value`` where it is a JSON object, else an empty one (the report is untrusted)."""
    return value if isinstance(value, dict) else {}


def _no_report(reason: str, run_url: str) -> str:
    where = f"the [workflow run's log]({run_url})" if run_url.startswith("https://") else "the log"
    return (
        f"{TITLE}\n**failed: no report.** {reason}: the check crashed, timed out or was "
        f"cancelled before it wrote its report. Nothing was verified; see {where}. A "
        "maintainer can re-run the workflow once the cause is fixed.\n"
    )


def read_report(path: Path) -> tuple[dict[str, Any] | None, str]:
    """The report at ``path``, or ``None`` and why it cannot be used."""
    if not path.is_file():
        return None, f"{path.name} is missing"
    if path.stat().st_size > MAX_REPORT_BYTES:
        return None, f"{path.name} is larger than 16 MiB"
    text = path.read_text(encoding="utf-8", errors="replace").strip()
    if not text:
        return None, f"{path.name} is empty"
    try:
        report = json.loads(text)
    except json.JSONDecodeError as exc:
        return None, f"{path.name} is not JSON ({exc.msg}, line {exc.lineno})"
    if not isinstance(report, dict):
        return None, f"{path.name} is not a JSON object"
    return report, ""


def _dataset_line(row: dict[str, Any]) -> str:
    catch = _number(row.get("catch_probability"), ".3f")
    return (
        f"  - {code(row.get('dataset'))}: claimed {_number(row.get('claimed'))}, re-run "
        f"{_number(row.get('rerun_accuracy'))} on {_number(row.get('rerun_episodes'), 'd')}/"
        f"{_number(row.get('episodes'), 'd')} episodes ({code(row.get('mode'))}; catches a 5% "
        f"forgery with p={catch})"
    )


def _entry_lines(ident: str, entry: dict[str, Any]) -> list[str]:
    submission = _mapping(entry.get("submission"))
    head = (
        f"- {code(ident)} ({code(submission.get('adapter'))} on "
        f"{code(submission.get('model'))}): valid"
    )
    verification = entry.get("verification")
    if not isinstance(verification, dict):
        return [head + ", not verified"]
    seed = str(verification.get("seed", ""))[:12]
    passed = "verified" if verification.get("passed") is True else "**verification failed**"
    lines = [
        f"{head}, {passed} (seed {code(seed + '...')}, {code(verification.get('seed_source'))})"
    ]
    rows = verification.get("datasets")
    for row in rows if isinstance(rows, list) else []:
        if isinstance(row, dict):
            lines.append(_dataset_line(row))
    return lines


def render_comment(report: dict[str, Any] | None, reason: str = "", run_url: str = "") -> str:
    """The Markdown comment for a ``check-pr --json`` report.

    Args:
        report: the parsed report, or ``None`` where there is none.
        reason: why there is none (e.g. ``check.json is empty``).
        run_url: the workflow run, linked from a comment on a failed check.

    Returns:
        The comment's text.
    """
    if report is None:
        return _no_report(reason or "there is no report", run_url)
    lines = [TITLE]
    if report.get("code"):
        lines.append(f"**rejected** {code(report.get('code'))}: {code(report.get('error'))}")
    failures, entries = _mapping(report.get("failures")), _mapping(report.get("entries"))
    for ident, failure in sorted(failures.items()):
        refusal = _mapping(failure)
        lines.append(
            f"- {code(ident)}: **rejected** {code(refusal.get('code'))}: "
            f"{code(refusal.get('error'))}"
        )
    for ident, entry in sorted(entries.items()):
        lines += _entry_lines(ident, _mapping(entry))
    if len(lines) == 1:
        lines.append("the pull request adds no leaderboard entry")
    if report.get("ok") is True and entries and not failures:
        lines.append(
            "\nAfter the merge, CI records this report as the entries' status "
            "(`leaderboard record-status`)."
        )
    elif run_url.startswith("https://"):
        lines.append(f"\nDetails: the [workflow run's log]({run_url}).")
    return "\n".join(lines) + "\n"


def comment_for(path: Path, run_url: str = "") -> str:
    """:func:`render_comment` of the report file at ``path`` (missing or empty included)."""
    report, reason = read_report(path)
    return render_comment(report, reason, run_url)
