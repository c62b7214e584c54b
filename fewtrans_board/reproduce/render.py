"""Write a reproduction report: ``report.json``, ``report.md`` and ``report.html``.

The HTML page uses the site's own template and style sheet, so the same page sits in the
work folder and, once the report is in the store's ``reproductions/``, in the built site
beside the paper's table.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from fewtrans_board.core.atomic import write_bytes_atomic
from fewtrans_board.reproduce.plan import ReproductionPlan
from fewtrans_board.reproduce.report import build_report, report_markdown


def render_report_page(report: dict[str, Any]) -> str:
    """The report as an HTML page of the site (links to ``static/style.css``)."""
    from fewtrans_board.website.build import environment
    from fewtrans_board.website.data import site_files_dir

    env = environment(site_files_dir() / "templates")
    return env.get_template("reproduction.html").render(report=report)


def write_report(plan: ReproductionPlan, reported_dir: Path | None, work: Path) -> dict[str, Any]:
    """Build the report of ``plan`` and write its three forms into ``work``."""
    from fewtrans_board.website.data import site_files_dir

    report = build_report(plan, reported_dir)
    work.mkdir(parents=True, exist_ok=True)
    text = json.dumps(report, indent=2, sort_keys=True, allow_nan=False) + "\n"
    write_bytes_atomic(work / "report.json", text.encode())
    write_bytes_atomic(work / "report.md", report_markdown(report).encode())
    write_bytes_atomic(work / "report.html", render_report_page(report).encode())
    static = work / "static"
    static.mkdir(exist_ok=True)
    shutil.copy2(site_files_dir() / "static" / "style.css", static / "style.css")
    return report
