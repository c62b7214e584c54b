"""Operations: ``--shard`` numbering, the HPE warning's option name, shots in the tables."""

from __future__ import annotations

from pathlib import Path

import click
import pytest

from fewtrans_board.cli.evaluate_cmd import parse_shard
from fewtrans_board.cli.summaries import shots_label
from fewtrans_board.episodes.manifest import Manifest

MANIFESTS = Path(__file__).resolve().parents[1] / "leaderboard/manifests"


def test_shards_are_numbered_from_zero_and_n_of_n_is_refused(invoke) -> None:  # type: ignore[no-untyped-def]
    assert parse_shard("0/4") == (0, 4) and parse_shard("3/4") == (3, 4)
    with pytest.raises(click.BadParameter, match=r"numbered from 0.*0/4 to 3/4"):
        parse_shard("4/4")
    help_text = invoke(["evaluate", "--help"]).output
    assert "numbered from 0" in " ".join(help_text.split())


def test_the_hpe_warning_names_the_hpe_option() -> None:
    from fewtrans_board.leaderboard.eligibility import submission_problems

    path = MANIFESTS / "fewtrans-varied--digits.parquet"
    problems = submission_problems(
        path,
        Manifest.load(path),
        "sweep",  # a protocol no sub-benchmark accepts
        roles={},
        centre={},
        centre_record=None,
        limit=None,
        store=None,
    )
    assert any("(--hpe)" in p for p in problems), problems
    assert not any("--protocol" in p for p in problems)


def test_only_fixed_shot_runs_are_labelled_with_their_shots() -> None:
    from fewtrans_board.results.load import load_run
    from fewtrans_board.results.spread import fixed_shots

    results = MANIFESTS.parent / "results"
    kshot = load_run(results / "coop--demo-clip-digits--original/clip-kshot--digits-5-9")
    varied = load_run(results / "mean-centroid--demo-cnn/fewtrans-varied--digits")
    assert fixed_shots(kshot) is None and fixed_shots(varied) is None  # shots differ
    assert shots_label("bscd-isic", 20) == "bscd-isic (20-shot)"
    assert shots_label("dtd", None) == "dtd"
