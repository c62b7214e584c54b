"""The demo board names its headline fusion and shows the other; CLIP settings show the oracle.

The fusion column is read against the stored ensembles (an independent read of the rows:
``RunResults.ensemble``); the oracle verdict is placed only beside the unlearned entry of
the adapter, model and HPE protocol it was measured with.
"""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from fewtrans_board.results.load import load_run
from fewtrans_board.website.fusion import fusion_line, other_fusion
from fewtrans_board.website.oracle_verdicts import oracle_verdicts

REPO = Path(__file__).resolve().parents[1]
# The listed fine-tuning entry (it supersedes finetune--demo-cnn, which is no longer listed).
FINETUNE_ID = "finetune--demo-cnn--full-batch"
FINETUNE = REPO / "leaderboard" / "results" / FINETUNE_ID / "fewtrans-varied--digits"


def test_each_protocol_names_its_headline_and_the_other_fusion() -> None:
    assert other_fusion("fewtrans-reference") == "logit-mean"
    assert other_fusion("fewtrans-paper") == "vote"
    assert other_fusion("single") is None
    assert "majority vote" in fusion_line("fewtrans-reference")
    assert "Eq. 1" in fusion_line("fewtrans-reference")


def test_the_demo_board_shows_the_logit_mean_beside_the_vote(committed_site: Path) -> None:
    page = (committed_site / "benchmark-demo.html").read_text(encoding="utf-8")
    assert 'class="fusion" data-headline="vote"' in page
    assert 'class="note demo-finetune"' in page  # why fine-tuning does not lead here
    other = (committed_site / "benchmark-demo-base-to-novel.html").read_text(encoding="utf-8")
    assert "demo-finetune" not in other
    table = page[page.index('id="table-hpe"') :]
    table = table[: table.index("</table>")]
    assert "method-finetune--demo-cnn.html" not in table  # superseded: not ranked
    row = next(r for r in table.split("<tr") if f"method-{FINETUNE_ID}.html" in r)
    _, logit_mean = load_run(FINETUNE).ensemble("logit-mean")
    _, vote = load_run(FINETUNE).ensemble("vote")
    # The two differ here (3.7 points), so the cell cannot show the vote by mistake.
    assert abs(float(np.mean(logit_mean)) - float(np.mean(vote))) > 1
    cell = re.search(r'class="num other-fusion" data-sort="([^"]+)">([\d.]+)<', row)
    assert cell is not None and cell.group(2) == f"{np.mean(logit_mean):.2f}"


def _comparison(protocol: str) -> Any:
    run = SimpleNamespace(
        run=SimpleNamespace(
            provenance=SimpleNamespace(
                model=SimpleNamespace(name="demo-clip.digits+unlearn:digits-5-9")
            )
        )
    )
    method = SimpleNamespace(
        id=f"coop-{protocol}",
        meta=SimpleNamespace(adapter="coop"),
        protocol=protocol,
        runs={"digits-5-9": run},
    )
    return SimpleNamespace(pairs=[SimpleNamespace(inductive=SimpleNamespace(method=method))])


CHECK = {
    "models": {"unlearned": "demo-clip.digits+unlearn:digits-5-9", "scratch": "s"},
    "rows": [{"adapter": "coop", "difference": 34.0, "verdict": "above"}],
    "margin": 5.0,
    "protocol": "single",
}


def test_the_oracle_verdict_sits_only_beside_the_run_it_measured() -> None:
    # Control: the entry of the measured adapter, model and protocol gets the verdict.
    assert oracle_verdicts(CHECK, _comparison("single")) == {"coop-single": CHECK["rows"][0]}
    # Red team: a published-recipe entry of the same adapter was not measured: no verdict.
    assert oracle_verdicts(CHECK, _comparison("published")) == {}
    other_model = {**CHECK, "models": {"unlearned": "another+unlearn:digits-5-9"}}
    assert oracle_verdicts(other_model, _comparison("single")) == {}
    assert oracle_verdicts(None, _comparison("single")) == {}


def test_the_committed_clip_settings_page_says_no_oracle_was_measured(
    committed_site: Path,
) -> None:
    page = (committed_site / "clip-settings-demo-clip-inductive.html").read_text(encoding="utf-8")
    assert "Oracle verdict: unlearned − trained without" in page
    assert "no model trained without the forgotten classes was evaluated" in page


def test_the_clip_settings_page_renders_the_verdict_beside_the_entry() -> None:
    from markupsafe import Markup

    from fewtrans_board.leaderboard.sub_benchmarks import CLIP_SETTINGS
    from fewtrans_board.unlearning.oracle import oracle_verdict
    from fewtrans_board.website.build import environment
    from fewtrans_board.website.data import site_files_dir

    cmp = _comparison("single")
    pair = cmp.pairs[0]
    average = SimpleNamespace(average=50.0, average_std=1.0)
    pair.inductive.method.status = pair.inductive.method.protocol_description = "local"
    pair.inductive.average = pair.original = average
    pair.original = SimpleNamespace(method=pair.inductive.method, average=average)
    pair.name, pair.protocol, pair.gap = "coop on demo-clip.digits", "single", 0.0
    pair.rank_original = pair.rank_inductive = 1
    bench = SimpleNamespace(name="b", title="t")
    cmp.original = cmp.inductive = SimpleNamespace(benchmark=bench)
    cmp.datasets, cmp.flips, cmp.reported = ["digits-5-9"], [], []
    cmp.scatter = cmp.reported_scatter = Markup("")
    # Unlearned 60-64 vs trained without 27-30 on three paired episodes: "above".
    verdict = oracle_verdict(np.array([60.0, 62, 64]), np.array([30.0, 28, 27])).to_dict()
    check = {**CHECK, "rows": [{"adapter": "coop", **verdict}]}
    downloads = SimpleNamespace(csv_name="a.csv", json_name="a.json")
    html = (
        environment(site_files_dir() / "templates")
        .get_template("clip-settings.html")
        .render(
            cmp=cmp,
            settings=CLIP_SETTINGS,
            tables={"clip-settings": downloads},
            oracle=oracle_verdicts(check, cmp),
            oracle_check=check,
        )
    )
    cell = html[html.index('class="oracle-verdict"') :]
    cell = cell[: cell.index("</td>")]
    assert 'data-verdict="above"' in cell and "+33.7 [+29.7, +37.6]" in cell
    assert "knowledge of the classes remains" in cell
