"""Every built-in adapter family, under every leaderboard protocol, all the way to the store.

One adapter per family and learning-rate count (a one-LR and a two-LR baseline, vision PEFT,
CLIP prompts, CLIP tuning) on a tiny random-init CLIP: hpe search on the held-out digits
tasks, evaluate, pack, validate, leaderboard add (which verifies in a plugin worker: its
report is checked, so a separate ``submission verify`` would only repeat it). A grid that
the validator rebuilds differently from evaluate (the grid-order bug of issue 11) or a
family a protocol cannot score fails here.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from fewtrans_board.cli import make_cli, needs_plugins
from fewtrans_board.registry.manager import get_plugin_manager
from tests.conftest import REPO, extra_benchmark, installed_distribution, shared_folder

pytestmark = pytest.mark.slow

SEARCH = REPO / "leaderboard" / "manifests" / "fewtrans-search--digits.parquet"
ADAPTERS = {
    "linear-probe": ["epochs=1"],
    "finetune": ["epochs=1", "batch_size=16"],
    "lora": ["epochs=1", "batch_size=16"],
    "coop": ["epochs=1", "n_ctx=2"],
    "clip-adapter": ["epochs=1"],
}
VERIFIED_UNDER_BOTH = ("linear-probe", "finetune")
"""Families verified under both protocols: one learning rate and two (the grid shapes that
differ). Every family is evaluated and validated under both, and verified under
fewtrans-reference; verification rebuilds the grid with the same protocol code for all."""
GRID_SIZES = {  # (fewtrans-paper, fewtrans-reference)
    "linear-probe": (15, 3),
    "finetune": (27, 9),
    "lora": (27, 9),
    "coop": (15, 3),
    "clip-adapter": (15, 3),
}


class Shell:
    def __init__(self, root: Path) -> None:
        self.root = root

    def ok(self, command: str, *extra: str) -> Any:
        argv = [*command.format(root=self.root, search=SEARCH).split(), *extra]
        pm = get_plugin_manager(entry_points=needs_plugins(argv), allow=["fewtrans-tinymodels"])
        result = CliRunner().invoke(make_cli(pm), argv, catch_exceptions=False)
        assert result.exit_code == 0, f"{argv}\n{result.output}"
        return json.loads(result.output) if "--json" in argv else result.output


@pytest.fixture(scope="module")
def shell(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shell]:
    root = tmp_path_factory.mktemp("families")
    with (
        installed_distribution(
            root / "dist", "fewtrans-tinymodels", "0.1", "tests.plugins.tiny_models"
        ),
        extra_benchmark("families", "families.parquet"),
    ):
        shell = Shell(root)
        shell.ok(
            "manifest build --protocol fewtrans-varied --dataset digits --episodes 1 "
            "--out {root}/leaderboard/manifests/families.parquet"
        )
        yield shell


@pytest.fixture(scope="module")
def centre(shell: Shell, tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """An adapter's centre, searched on demand and once per test run (both protocols, and
    every xdist worker that runs a case of the adapter, use the same search). One round of
    the search (one episode, a plugin worker request) makes a centre file like a settled
    search's; the rounds after it, each a request of its own, change only its values."""

    def centre_of(adapter: str) -> Path:
        def search(folder: Path) -> None:
            shell.ok(
                f"hpe search --model tiny-clip.test --adapter {adapter} --manifest {{search}} "
                f"--limit 1 --max-rounds 1 --device cpu --threads 1 "
                f"--out {folder}/centre.json --json",
                *(item for c in ADAPTERS[adapter] for item in ("--config", c)),
            )

        return shared_folder(tmp_path_factory, f"families-centre-{adapter}", search) / "centre.json"

    return centre_of


@pytest.mark.parametrize("protocol", ["fewtrans-paper", "fewtrans-reference"])
@pytest.mark.parametrize("adapter", list(ADAPTERS))
def test_family_goes_from_evaluate_to_the_store(
    shell: Shell, centre: Callable[[str], Path], adapter: str, protocol: str
) -> None:
    ident = f"{adapter}--{protocol}"
    work, store = shell.root / ident, "--leaderboard {root}/leaderboard"
    # In this process (a plugin worker's start costs more than the episode): the grid and
    # the rows are the runner's either way, and the sandboxed re-run of `leaderboard add`
    # below must reproduce them bit for bit.
    shell.ok(
        f"evaluate --model tiny-clip.test --adapter {adapter} --protocol {protocol} "
        f"--manifest {{root}}/leaderboard/manifests/families.parquet --centre {centre(adapter)} "
        f"--out {work}/run --device cpu --threads 1 --isolation inline --quiet {store}"
    )
    (work / "submission.toml").write_text(
        f'[submission]\nid = "{ident}"\nmethod = "{adapter}"\nmodel = "tiny-clip.test"\n'
        f'adapter = "{adapter}"\nbenchmark = "families"\nhpe_protocol = "{protocol}"\n'
        'authors = ["T"]\nhardware = "CPU"\n'
        'plugins = ["fewtrans-board==0.1.0", "fewtrans-tinymodels==0.1"]\n'
    )
    shell.ok(f"submission pack {work}/run --meta {work}/submission.toml --out {work}/b.zip {store}")
    valid = shell.ok(f"submission validate {work}/b.zip {store} --json")
    paper, reference = GRID_SIZES[adapter]
    assert valid["runs"][0]["configurations"] == (
        paper if protocol == "fewtrans-paper" else reference
    )
    if protocol == "fewtrans-paper" and adapter not in VERIFIED_UNDER_BOTH:
        return
    # add re-runs the sampled episode in a plugin worker (what `submission verify` does) and
    # stores the entry only if it passes; its report says so.
    added = shell.ok(f"leaderboard add {work}/b.zip {store} --sample 1 --threads 1 --json")
    assert added["id"] == ident and added["status"] == "verified"
    verification = added["verification"]
    assert verification["passed"] and verification["submission"] == ident
    assert [e["dataset"] for e in verification["episodes"]] == ["digits"]  # --sample 1
    index = json.loads((shell.root / "leaderboard" / "index.json").read_text())
    assert ident in index["benchmarks"]["families"]
