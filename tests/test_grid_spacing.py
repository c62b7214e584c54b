"""Grid spacing as a parameter of the HPE protocols, and ``analyze grid-spacing`` (Fig. 4 right).

Oracles: spaced grids written out by hand (the x3 and x10 rows are the released FewTrans
code's commented grids, see the reference notes), the named protocols' definitions as
committed results record them, and HPE accuracies recomputed with numpy from stored rows.
"""

from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from fewtrans_board.blocks.finetune import FinetuneAdapter
from fewtrans_board.cli import make_cli
from fewtrans_board.core.errors import FewtransError
from fewtrans_board.hpe.protocols import (
    FIVE,
    HPE_PROTOCOLS,
    SWEEP,
    THREE,
    get_hpe_protocol,
    spaced_multipliers,
)
from fewtrans_board.methods.adapters.heads import LinearProbeAdapter
from fewtrans_board.registry.manager import get_plugin_manager

PAPER, REFERENCE = HPE_PROTOCOLS["fewtrans-paper"], HPE_PROTOCOLS["fewtrans-reference"]
MODEL = ["--model", "demo-cnn.digits", "--device", "cpu", "--threads", "1"]


def _invoke(args: list[str]) -> tuple[int, str]:
    cli = make_cli(get_plugin_manager(entry_points=False))
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    return result.exit_code, result.output


def test_multipliers_by_hand() -> None:
    assert (Fraction(1, 5), Fraction(1), Fraction(5)) == THREE
    assert (Fraction(1, 25), Fraction(1, 5), Fraction(1), Fraction(5), Fraction(25)) == FIVE
    assert spaced_multipliers(3, 3) == (Fraction(1, 3), Fraction(1), Fraction(3))
    assert spaced_multipliers(10, 5) == (
        Fraction(1, 100), Fraction(1, 10), Fraction(1), Fraction(10), Fraction(100)
    )  # fmt: skip


def test_the_named_protocols_are_unchanged() -> None:
    assert PAPER.describe() == {
        "name": "fewtrans-paper",
        "version": 1,
        "lr_multipliers": ["1/5", "1", "5"],
        "single_lr_multipliers": ["1/25", "1/5", "1", "5", "25"],
        "epoch_rule": "paper",
        "aggregation": "logit-mean",
    }
    assert REFERENCE.describe() == {
        "name": "fewtrans-reference",
        "version": 1,
        "lr_multipliers": ["1/5", "1", "5"],
        "single_lr_multipliers": ["1/5", "1", "5"],
        "epoch_rule": "fixed",
        "aggregation": "vote",
    }
    assert PAPER.spacing == REFERENCE.spacing == 5
    assert PAPER.spaced(5) is PAPER and REFERENCE.spaced(5) is REFERENCE
    assert get_hpe_protocol("fewtrans-paper@x3").spaced(5) is PAPER
    with pytest.raises(FewtransError, match="itself"):
        get_hpe_protocol("fewtrans-paper@x5")


def test_spaced_grids_by_hand() -> None:
    # The released code's commented "x3" and "x10" grids of full fine-tuning (epochs 70).
    x3 = get_hpe_protocol("fewtrans-reference@x3")
    assert x3.axes(FinetuneAdapter, FinetuneAdapter.Config()) == {
        "lr_backbone": [3.33333333333e-06, 1e-05, 3e-05],
        "lr_head": [0.000666666666667, 0.002, 0.006],
    }
    x10 = get_hpe_protocol("fewtrans-reference@x10")
    assert x10.axes(FinetuneAdapter, FinetuneAdapter.Config()) == {
        "lr_backbone": [1e-06, 1e-05, 0.0001],
        "lr_head": [0.0002, 0.002, 0.02],
    }
    # One learning rate: the 5-point axis, spaced too; the epoch rule is the paper's.
    paper10 = get_hpe_protocol("fewtrans-paper@x10")
    assert paper10.axes(LinearProbeAdapter, LinearProbeAdapter.Config()) == {
        "lr_head": [0.002, 0.02, 0.2, 2.0, 20.0],
        "epochs": [20, 40, 60],
    }
    assert len(paper10.grid(FinetuneAdapter, FinetuneAdapter.Config())) == 27


def test_spaced_variants_are_analysis_protocols() -> None:
    x3 = get_hpe_protocol("fewtrans-paper@x3")
    assert (x3.name, x3.base, x3.spacing, x3.version) == (
        "fewtrans-paper@x3",
        "fewtrans-paper",
        3,
        1,
    )
    assert not x3.leaderboard and x3.aggregation == PAPER.aggregation
    assert x3.epoch_rule == PAPER.epoch_rule
    centre = FinetuneAdapter.Config()
    assert x3.digest(FinetuneAdapter, centre) != PAPER.digest(FinetuneAdapter, centre)
    for name in ("single", "published"):
        with pytest.raises(FewtransError, match="no learning-rate grid"):
            HPE_PROTOCOLS[name].spaced(3)
    with pytest.raises(FewtransError):
        SWEEP.spaced(3)
    with pytest.raises(FewtransError, match="at least 2"):
        PAPER.spaced(1)
    for unknown in ("fewtrans-paper@x03", "fewtrans-paper@x", "single@x3", "nope@x3"):
        with pytest.raises(FewtransError):
            get_hpe_protocol(unknown)


def test_a_spaced_protocol_is_not_submittable() -> None:
    from fewtrans_board.episodes.manifest import Manifest
    from fewtrans_board.leaderboard.eligibility import submission_problems
    from tests.conftest import VARIED_DIGITS

    for hpe in ("fewtrans-paper@x3", "fewtrans-reference@x10"):
        problems = submission_problems(
            VARIED_DIGITS,
            Manifest.load(VARIED_DIGITS),
            hpe,
            roles={"lr_head": "lr", "epochs": "epochs"},
            centre=LinearProbeAdapter.Config().to_dict(),
            centre_record=None,
            limit=None,
            store=None,
        )
        assert any(hpe in p for p in problems), problems


def _hpe_accuracy(run: Path) -> tuple[list[int], np.ndarray]:
    """Per-episode vote accuracy (the reference protocol's headline), from the shard files."""
    rows = [
        r for s in sorted((run / "shards").glob("*.parquet")) for r in pq.read_table(s).to_pylist()
    ]
    votes = sorted(
        (r["episode"], r["accuracy"])
        for r in rows
        if r["kind"] == "ensemble" and r["aggregation"] == "vote" and r["split"] == "base"
    )
    return [e for e, _ in votes], np.array([a for _, a in votes])


def test_grid_spacing_evaluates_each_spacing_and_reports_hpe_accuracy(tmp_path: Path) -> None:
    manifest = tmp_path / "spacing-digits.parquet"
    code, output = _invoke(
        ["manifest", "build", "--protocol", "fewtrans-fixed", "--dataset", "digits", "--ways",
         "3", "--shots", "2", "--queries", "3", "--episodes", "3", "--seed", "2", "--out",
         str(manifest)]
    )  # fmt: skip
    assert code == 0, output
    runs = tmp_path / "runs"
    args = ["analyze", "grid-spacing", *MODEL, "--adapter", "linear-probe"]
    args += ["--manifest", str(manifest), "--hpe", "fewtrans-reference", "--config", "epochs=1"]
    args += ["--runs-out", str(runs), "--out", str(tmp_path / "report")]
    code, output = _invoke(args)
    assert code == 0, output
    grids = {}
    for spacing, name in ((3, "fewtrans-reference@x3"), (5, "fewtrans-reference"),
                          (10, "fewtrans-reference@x10")):  # fmt: skip
        identity = json.loads((runs / manifest.stem / f"x{spacing}" / "run.json").read_text())
        assert identity["identity"]["hpe"] == name
        grids[spacing] = [c["lr_head"] for c in identity["identity"]["grid"]]
    assert grids == {3: [0.0666666666667, 0.2, 0.6], 5: [0.04, 0.2, 1.0], 10: [0.02, 0.2, 2.0]}
    data = json.loads((tmp_path / "report" / "grid-spacing.json").read_text())
    assert (tmp_path / "report" / "grid-spacing.svg").read_text().startswith("<svg")
    (group,) = data["groups"]
    assert group["protocol"] == "fewtrans-reference" and group["reference_spacing"] == 5
    assert [row["spacing"] for row in group["spacings"]] == [3, 5, 10] == data["spacings"]
    _, reference = _hpe_accuracy(runs / manifest.stem / "x5")
    for row in group["spacings"]:
        episodes, accuracy = _hpe_accuracy(runs / manifest.stem / f"x{row['spacing']}")
        assert episodes == [0, 1, 2]
        assert row["hpe"]["mean"] == pytest.approx(accuracy.mean())
        assert row["hpe"]["ci95"] == pytest.approx(1.96 * accuracy.std(ddof=1) / math.sqrt(3))
        if row["spacing"] == 5:
            assert row["difference_to_reference"] is None
        else:
            difference = accuracy - reference
            assert row["difference_to_reference"]["mean"] == pytest.approx(difference.mean())

    # Reading the runs back gives the same numbers; a repeated evaluation resumes.
    code, output = _invoke(["analyze", "grid-spacing", str(runs), "--out", str(tmp_path / "again")])
    assert code == 0, output
    again = json.loads((tmp_path / "again" / "grid-spacing.json").read_text())
    assert again["groups"] == data["groups"]


def test_grid_spacing_refuses_what_it_cannot_compare(tmp_path: Path) -> None:
    from tests.conftest import VARIED_DIGITS

    single = tmp_path / "single"
    code, output = _invoke(
        ["evaluate", *MODEL, "--adapter", "mean-centroid", "--manifest", str(VARIED_DIGITS),
         "--hpe", "single", "--limit", "1", "--quiet", "--out", str(single)]
    )  # fmt: skip
    assert code == 0, output
    for args in (
        [str(single)],  # the single protocol has no grid to space
        [],  # nothing to read or evaluate
        ["--model", "demo-cnn.digits"],  # evaluating needs an adapter and a manifest
        [*MODEL, "--adapter", "linear-probe", "--manifest", str(VARIED_DIGITS), "--hpe", "single"],
        [*MODEL, "--adapter", "no-such", "--manifest", str(VARIED_DIGITS)],
    ):
        out = tmp_path / "out"
        code, output = _invoke(
            ["analyze", "grid-spacing", *args, "--out", str(out), "--runs-out", str(tmp_path / "r")]
        )
        errors = [line for line in output.splitlines() if line.startswith("Error")]
        assert code != 0 and len(errors) == 1 and "Traceback" not in output, (args, output)
        assert not out.exists() and not (tmp_path / "r").exists()
