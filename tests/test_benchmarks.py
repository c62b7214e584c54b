"""Sub-benchmark catalogue: names that say what is measured, and the rules runs inherit."""

from __future__ import annotations

import pytest

from fewtrans_board.episodes.frozen import FROZEN
from fewtrans_board.leaderboard.sub_benchmarks import (
    SUB_BENCHMARKS,
    benchmark_of_run,
    statistic_ddof_of_run,
)


def test_plain_clip_few_shot_is_called_partially_transductive() -> None:
    # Inductive-CLIP paper: CLIP's pretraining has seen these classes, so plain CLIP
    # k-shot is "partially transductive"; the inductive benchmark is a separate one.
    assert "inductive-clip" not in SUB_BENCHMARKS
    clip = SUB_BENCHMARKS["clip-partially-transductive"]
    assert "partially transductive" in clip.title and "partially transductive" in clip.description
    assert {m.split("--")[0] for m in clip.manifests} == {"clip-kshot"}


def test_every_benchmark_manifest_is_in_the_frozen_catalogue() -> None:
    frozen = {m.filename for m in FROZEN}
    for benchmark in SUB_BENCHMARKS.values():
        assert set(benchmark.manifests) <= frozen, benchmark.name


@pytest.mark.parametrize(
    ("manifest", "benchmark", "ddof"),
    [
        ({"file": "bscd-5w20s--bscd-isic.parquet"}, "bscd", 0),
        ({"file": "my-copy.parquet", "protocol": {"name": "bscd"}}, "bscd", 0),
        ({"file": "fewtrans-varied--digits.parquet"}, "demo", 1),
        (
            {"file": "x.parquet", "protocol": {"name": "clip-kshot"}},
            "clip-partially-transductive",
            1,
        ),
    ],
)
def test_a_run_inherits_its_sub_benchmark(manifest: dict, benchmark: str, ddof: int) -> None:  # type: ignore[type-arg]
    found = benchmark_of_run(manifest)
    assert found is not None and found.name == benchmark
    assert statistic_ddof_of_run(manifest) == ddof


def test_unknown_runs_use_fewtrans_statistics() -> None:
    manifest = {"file": "x.parquet", "protocol": {"name": "no-such-protocol"}}
    assert benchmark_of_run(manifest) is None and statistic_ddof_of_run(manifest) == 1
