"""Reproduction reports in the store (``reproductions/*.json``), shown beside the paper's tables.

``fewtrans-board reproduce TARGET --publish`` writes a report there; the site renders each as
``reproduction-<target>.html`` and links it from the benchmark page under the reported
table it was compared with.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from fewtrans_board.core.errors import SubmissionError
from fewtrans_board.results.strict_json import load_json

SCHEMA = "fewtrans-board/reproduction-report/1"


def page_name(target: str) -> str:
    """The site page of a target's report: ``reproduction-fewtrans-table-5.html``."""
    return "reproduction-" + re.sub(r"[^a-z0-9-]+", "-", target.lower()) + ".html"


def load_reproductions(store: Path) -> list[dict[str, Any]]:
    """Every report under ``store/reproductions`` (sorted by target).

    Raises:
        SubmissionError: a report is not valid JSON or not a reproduction report (named).
    """
    reports = []
    for path in sorted((store / "reproductions").glob("*.json")):
        data = load_json(path.read_bytes(), str(path), "reproduction-report")
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            raise SubmissionError(
                "reproduction-report", f"{path} is not a reproduction report (schema {SCHEMA})"
            )
        reports.append({**data, "page": page_name(str(data["target"]))})
    return sorted(reports, key=lambda r: str(r["target"]))


def by_reported_table(reports: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The reports keyed by the reported table they compare with."""
    grouped: dict[str, list[dict[str, Any]]] = {}
    for report in reports:
        if report.get("reported_table"):
            grouped.setdefault(str(report["reported_table"]), []).append(report)
    return grouped
