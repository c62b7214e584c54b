"""`leaderboard rebuild --check`: numbers compared within float noise, everything else exactly."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from fewtrans_board.leaderboard.index import index_difference

REPO = Path(__file__).resolve().parents[1]
INDEX = {"submissions": [{"id": "a", "mean": 72.25, "ci95": 0.1284939351086558, "n": 600}]}


def edited(**changes: object) -> dict[str, object]:
    """INDEX with the first submission's fields changed."""
    copy = json.loads(json.dumps(INDEX))
    copy["submissions"][0].update(changes)
    return copy


def test_the_last_bits_of_a_float_are_the_same_number() -> None:
    # The committed index (Intel) and a rebuild on AMD differ like this.
    assert index_difference(INDEX, edited(ci95=0.1284939351086559)) is None
    assert index_difference(INDEX, INDEX) is None


@pytest.mark.parametrize(
    ("change", "where"),
    [
        ({"mean": 72.2500001}, "index.submissions[0].mean"),  # a real change, 1e-9 relative
        ({"ci95": 0.13}, "index.submissions[0].ci95"),
        ({"n": 599}, "index.submissions[0].n"),
        ({"id": "b"}, "index.submissions[0].id"),
        ({"mean": True}, "index.submissions[0].mean"),  # a bool is not a number here
        ({"extra": 1}, "keys differ (extra)"),
    ],
)
def test_any_real_change_is_named(change: dict[str, object], where: str) -> None:
    found = index_difference(INDEX, edited(**change))
    assert found is not None and where in found


def test_a_missing_submission_is_named() -> None:
    assert index_difference(INDEX, {"submissions": []}) == "index.submissions: 1 items != 0"


def test_rebuild_check_accepts_float_noise_and_refuses_an_edit(invoke, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    store = tmp_path / "leaderboard"
    shutil.copytree(REPO / "leaderboard", store)
    invoke(["leaderboard", "rebuild", "--leaderboard", str(store)])
    index = json.loads((store / "index.json").read_text())
    text = json.dumps(index, indent=2)
    # Move every float by one part in 1e13 (what another CPU's summation order does).
    (store / "index.json").write_text(json.dumps(nudged(index), indent=2))
    result = invoke(["leaderboard", "rebuild", "--check", "--leaderboard", str(store)])
    assert result.exit_code == 0, result.output
    # A changed method name is a stale index, named in the message.
    method = index["submissions"][0]["meta"]["method"]
    (store / "index.json").write_text(text.replace(f'"{method}"', '"someone else"'))
    result = invoke(["leaderboard", "rebuild", "--check", "--leaderboard", str(store)])
    assert result.exit_code == 1 and "is out of date (index." in result.output
    assert "someone else" in result.output


def nudged(value: object) -> object:
    """``value`` with every float multiplied by 1 + 1e-13."""
    if isinstance(value, dict):
        return {k: nudged(v) for k, v in value.items()}
    if isinstance(value, list):
        return [nudged(v) for v in value]
    return value * (1 + 1e-13) if isinstance(value, float) else value
