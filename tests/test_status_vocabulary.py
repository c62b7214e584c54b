"""One status vocabulary on every surface: ``re-run``, ``legacy check``, ``not verified``.

The status is computed once, from an entry's stored verification record
(:mod:`fewtrans_board.leaderboard.status`); ``index.json``, ``leaderboard.parquet`` and its
CSV, the badges and the site's pages show it. The surfaces test takes a store of one
entry (``test_reverify``'s: the shared mean-centroid run) and gives it each kind of record
in turn: every surface must say the same, and none may call re-run an entry whose record
shows no passed re-run.
"""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from fewtrans_board.cli import make_cli
from fewtrans_board.leaderboard.status import (
    LEGACY_CHECK,
    NOT_VERIFIED,
    RERUN,
    entry_status,
)
from fewtrans_board.registry.manager import get_plugin_manager
from tests.test_reverify import later_store

__all__ = ["later_store"]  # the shared store of one entry (its fixture)

LEGACY_RECORD: dict[str, Any] = {
    "episodes": [
        {"dataset": "digits", "episode": 7, "passed": True, "config_agreement": 1.0},
        {"dataset": "digits", "episode": 91, "passed": True, "config_agreement": 1.0},
        {"dataset": "digits", "episode": 402, "passed": True, "config_agreement": 1.0},
    ],
    "inductive_tolerance": 0.005,
    "passed": True,
    "sample": 3,
    "seed": 0,
    "submission": "x",
    "threshold": 0.9,
}
"""The shape of the committed entries' records of the earlier check (sample, threshold)."""
SVG = "{http://www.w3.org/2000/svg}"


def rerun_record(datasets: list[tuple[str, str, int, int]], **extra: Any) -> dict[str, Any]:
    """A passed report of today's verification: ``(dataset, mode, re-run, episodes)`` each."""
    return {
        "passed": True,
        "date": "2026-12-01T09:30:00Z",
        "isolation": "sandbox",
        "datasets": [
            {"dataset": d, "mode": m, "rerun_episodes": r, "episodes": e, "passed": True}
            for d, m, r, e in datasets
        ],
        **extra,
    }


def test_a_passed_report_of_todays_verification_is_re_run_with_date_sample_and_mode() -> None:
    record = rerun_record([("digits", "exact", 7, 600), ("digits-5-9", "exact", 15, 15)])
    status = entry_status("verified", record)
    assert status.kind == RERUN and status.ranked
    assert (status.date, status.rerun_episodes, status.episodes) == ("2026-12-01", 22, 615)
    assert status.mode == "exact"
    assert status.summary == "re-run 2026-12-01, 22 of 615 episodes, exact"
    assert status.to_dict()["status"] == RERUN
    mixed = rerun_record([("a", "exact", 3, 9), ("b", "statistical", 4, 9)], isolation="process")
    assert entry_status("verified", mixed).summary == (
        "re-run 2026-12-01, 7 of 18 episodes, mixed, unsandboxed"
    )
    undated = {k: v for k, v in record.items() if k != "date"}
    assert entry_status("verified", undated).summary.startswith("re-run (date not recorded)")


def test_the_earlier_check_is_legacy_and_nothing_else_is_called_verified() -> None:
    assert entry_status("verified", LEGACY_RECORD).kind == LEGACY_CHECK
    assert entry_status("verified", LEGACY_RECORD).ranked
    assert entry_status("verified", LEGACY_RECORD).summary == LEGACY_CHECK
    record = rerun_record([("digits", "exact", 7, 600)])
    refused = [
        ("validated", None),
        ("validated", record),  # a report beside the word validated does not count
        ("validated", {"skipped": "not verified: added with --unsafe-no-verify"}),
        ("verified", None),
        ("verified", {}),
        ("verified", {**record, "passed": False}),
        ("verified", {**record, "datasets": []}),
        ("verified", {**record, "datasets": [{"mode": "exact", "passed": False}]}),
        ("verified", {**record, "datasets": [{"mode": "guessed"}]}),
        ("verified", {**LEGACY_RECORD, "passed": False}),
    ]
    for stored, given in refused:
        status = entry_status(stored, given)
        assert status.kind == NOT_VERIFIED and not status.ranked, (stored, given)


# --- every surface ----------------------------------------------------------------------

PAGE_FIELDS: dict[str, Any] = {
    "environment": {"device_name": "a CPU", "torch": "2.x", "torch_threads": 1},
    "seed": "ab" * 32,
    "seed_source": "urandom",
    "reproduce": "--seed " + "ab" * 32,
}
DATASET_FIELDS: dict[str, Any] = {
    "catch_probability": 0.3,
    "claimed": 80.0,
    "claimed_on_rerun_episodes": 81.0,
    "rerun_accuracy": 81.0,
    "identical_episodes": 7,
    "difference": 0.0,
    "difference_bound": 0.0,
    "margin": 0.5,
    "environment_differences": [],
}
"""What a method page shows of a re-run report besides its status."""


def cli(*args: Any) -> str:
    result = CliRunner().invoke(
        make_cli(get_plugin_manager(entry_points=False)), [str(a) for a in args]
    )
    assert result.exit_code == 0, result.output
    return result.output


def shown(store: Path, out: Path) -> dict[str, Any]:
    """What every surface says of the store's one entry."""
    import fewtrans_board
    from fewtrans_board.leaderboard.table import read_csv_table

    cli("leaderboard", "rebuild", "--leaderboard", store, "--no-cache")
    cli("site", "build", "--leaderboard", store, "--out", out)
    index = json.loads((store / "index.json").read_text())["submissions"][0]
    parquet = fewtrans_board.load_leaderboard(out / "leaderboard.parquet").to_pylist()
    csv = read_csv_table((out / "leaderboard.csv").read_bytes()).to_pylist()
    page = (out / "method-mc--later.html").read_text(encoding="utf-8")
    badge = out / "badges" / "mc--later.svg"
    return {
        "index": index["status"],
        "detail": index["status_detail"],
        "parquet": {(r["status"], r["rerun_date"], r["rerun_episodes"]) for r in parquet},
        "csv": {(r["status"], r["rerun_date"], r["rerun_episodes"]) for r in csv},
        "page": page,
        "badge": badge.read_text(encoding="utf-8") if badge.is_file() else None,
    }


@pytest.mark.slow  # site build and a shared fixture that evaluates
def test_every_surface_shows_the_status_of_the_stored_record(
    later_store: Path, tmp_path: Path
) -> None:
    store = tmp_path / "leaderboard"
    shutil.copytree(later_store, store)
    status_json = store / "submissions" / "mc--later" / "status.json"
    rerun = rerun_record([("digits", "exact", 7, 600)], **PAGE_FIELDS)
    rerun["datasets"][0].update(DATASET_FIELDS)
    records: list[tuple[str, dict[str, Any]]] = [
        ("validated", {"skipped": "not verified: added with --unsafe-no-verify"}),
        ("verified", LEGACY_RECORD),
        ("verified", rerun),
    ]
    kinds = []
    for number, (word, record) in enumerate(records):
        status_json.write_text(json.dumps({"status": word, "verification": record}))
        seen = shown(store, tmp_path / f"site-{number}")
        expected = entry_status(word, record)
        kinds.append(expected.kind)
        date = expected.date or ""
        assert seen["index"] == expected.kind
        assert seen["detail"]["summary"] == expected.summary
        assert seen["parquet"] == seen["csv"] == {(expected.kind, date, expected.rerun_episodes)}
        h1 = seen["page"].split("<h1>", 1)[1].split("</h1>", 1)[0]
        assert f">{expected.kind}</span>" in h1
        if expected.kind == NOT_VERIFIED:
            assert seen["badge"] is None  # unranked entries get no badge
        else:
            assert seen["badge"] is not None
            svg = ET.fromstring(seen["badge"].encode())
            texts = [t.text or "" for t in svg.iter(f"{SVG}text")]
            assert texts[1].endswith(expected.kind)
            title = svg.find(f"{SVG}title")
            assert title is not None and expected.sentence in str(title.text)
        rerun_said = RERUN in {seen["index"], *(s for s, _, _ in seen["parquet"])} or (
            ">re-run</span>" in h1
        )
        # Red team: nothing shows re-run unless the record holds a passed per-dataset re-run.
        assert rerun_said == (
            record.get("passed") is True
            and all(d.get("rerun_episodes", 0) >= 1 for d in record.get("datasets", [{}]))
            and word == "verified"
        )
    assert kinds[:2] == [NOT_VERIFIED, LEGACY_CHECK]
