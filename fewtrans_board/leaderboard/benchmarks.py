"""Sub-benchmarks: which frozen manifests a submission covers and under which rules."""

from __future__ import annotations

from dataclasses import dataclass

from fewtrans_board.episodes.frozen import FEWTRANS_TEST, FROZEN


@dataclass(frozen=True)
class Benchmark:
    """One leaderboard table.

    Attributes:
        name: identifier used in ``submission.toml``.
        title: page title.
        description: what is compared.
        manifests: frozen manifest file names a submission must cover, each exactly once.
        hpe_protocols: HPE protocols accepted.
        held_out: datasets on which the HPE centre search may run.
        reference_adapter: the baseline significance flags compare against.
        statistic_ddof: ddof of the per-dataset CI (1 FewTrans, 0 BSCD-FSL).
    """

    name: str
    title: str
    description: str
    manifests: tuple[str, ...]
    hpe_protocols: tuple[str, ...] = ("fewtrans-paper", "fewtrans-reference")
    held_out: tuple[str, ...] = ("cub",)
    reference_adapter: str = "finetune"
    statistic_ddof: int = 1


FEWTRANS_MANIFESTS = tuple(f"fewtrans-varied--{d}.parquet" for d in FEWTRANS_TEST)


def _frozen(protocol: str) -> tuple[str, ...]:
    return tuple(m.filename for m in FROZEN if m.protocol == protocol)


BENCHMARKS: dict[str, Benchmark] = {
    b.name: b
    for b in (
        Benchmark(
            name="demo",
            title="Demo: digits",
            description=(
                "The embedded digits data (classes 5-9): a runnable miniature of the FewTrans "
                "protocol. Centre search may use the digits search tasks (not held out: demo only)."
            ),
            manifests=("fewtrans-varied--digits.parquet",),
            held_out=("digits",),
            reference_adapter="finetune",
        ),
        Benchmark(
            name="fewtrans-models",
            title="FewTrans: pretrained models",
            description="Pretrained backbones compared under full fine-tuning with HPE on the 10 FewTrans datasets.",
            manifests=FEWTRANS_MANIFESTS,
        ),
        Benchmark(
            name="fewtrans-adapters",
            title="FewTrans: vision transfer algorithms",
            description="Transfer algorithms on a fixed backbone, HPE, 10 FewTrans datasets.",
            manifests=FEWTRANS_MANIFESTS,
        ),
        Benchmark(
            name="fewtrans-multimodal",
            title="FewTrans: multimodal (CLIP) base classes",
            description="CLIP transfer algorithms on the FewTrans base classes, HPE.",
            manifests=FEWTRANS_MANIFESTS,
        ),
        Benchmark(
            name="fewtrans-base-to-novel",
            title="FewTrans: base-to-novel",
            description="CLIP methods adapted on base classes, scored on base and novel classes.",
            manifests=FEWTRANS_MANIFESTS,
        ),
        Benchmark(
            name="bscd",
            title="BSCD-FSL cross-domain",
            description="5-way 5/20/50-shot on CropDisease, EuroSAT, ISIC and ChestX.",
            manifests=_frozen("bscd"),
            statistic_ddof=0,
        ),
        Benchmark(
            name="inductive-clip",
            title="Inductive CLIP few-shot",
            description="Few-shot CLIP methods, K in 1/2/4/8/16, on the twelve CLIP datasets.",
            manifests=_frozen("clip-kshot"),
            reference_adapter="finetune-clip-both",
        ),
    )
}
