"""Sub-benchmarks: which frozen manifests a submission covers and under which rules."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from fewtrans_board.episodes.frozen import CLIP, FEWTRANS_TEST, FROZEN
from fewtrans_board.models.unlearned_names import split_name, unlearned_name
from fewtrans_board.unlearning.sets import FORGET_DATASETS, MINIATURE_FORGET

MODEL_RULES = ("any", "original", "unlearned-target")
"""``any``: one model everywhere; ``original``: one model, never an unlearned one;
``unlearned-target``: on each dataset D the submission's model unlearned on D
(``MODEL+unlearn:D``), so CLIP has never seen the classes it is tested on."""


@dataclass(frozen=True)
class SubBenchmark:
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
        reporting: how the table summarises a run: ``"episodes"`` (mean ± CI over episodes),
            ``"base-to-novel"`` (base, novel and their harmonic mean, each with a CI) or
            ``"per-shot"`` (CoOp-style: per K the mean over seeds with their spread; the
            headline averages over shots and datasets).
        model_rule: which model each dataset's results must come from (:data:`MODEL_RULES`).
        paired_with: the benchmark under the other CLIP setting (the site compares the
            two on the datasets they share).
        recipe: the published recipe (``Adapter.recipes`` name) a submission under the
            ``published`` HPE protocol runs here; ``""`` where that protocol is not accepted.
        leaderboard_protocol: the HPE protocol this table ranks its entries under (one of
            ``hpe_protocols``; entries are ranked only with entries of the same protocol).
            Commands that take ``--hpe`` default to it for this table's manifests. Not
            given: ``fewtrans-paper`` where accepted, else the first accepted protocol.
    """

    name: str
    title: str
    description: str
    manifests: tuple[str, ...]
    hpe_protocols: tuple[str, ...] = ("fewtrans-paper", "fewtrans-reference")
    held_out: tuple[str, ...] = ("cub",)
    reference_adapter: str = "finetune"
    statistic_ddof: int = 1
    reporting: Literal["episodes", "base-to-novel", "per-shot"] = "episodes"
    model_rule: str = "any"
    paired_with: str = ""
    recipe: str = ""
    leaderboard_protocol: str = ""

    def __post_init__(self) -> None:
        if not self.hpe_protocols:
            raise ValueError(f"sub-benchmark {self.name!r} accepts no HPE protocol")
        if not self.leaderboard_protocol:
            default = "fewtrans-paper"
            chosen = default if default in self.hpe_protocols else self.hpe_protocols[0]
            object.__setattr__(self, "leaderboard_protocol", chosen)
        if self.leaderboard_protocol not in self.hpe_protocols:
            raise ValueError(
                f"sub-benchmark {self.name!r}: leaderboard protocol "
                f"{self.leaderboard_protocol!r} is not one of {self.hpe_protocols}"
            )

    @property
    def recipe_rule(self) -> str:
        """How configurations are chosen here: ``hpe``, ``published`` or ``both``.

        ``hpe``: an ensemble around a searched centre; ``published``: each method's cited
        recipe; ``both``: entries under each rule are listed and ranked apart.
        """
        published = "published" in self.hpe_protocols
        searched = any(p != "published" for p in self.hpe_protocols)
        return "both" if published and searched else ("published" if published else "hpe")

    def expected_model(self, model: str, dataset: str) -> str:
        """The model name results on ``dataset`` must carry for a submission of ``model``.

        Raises:
            ValueError: ``model`` breaks the rule (an unlearned model where the original is
                required, or the reverse).
        """
        if split_name(model)[1] is not None:
            raise ValueError(
                f"benchmark {self.name!r}: submit the base model name, not {model!r}"
                + (
                    "; results carry MODEL+unlearn:DATASET"
                    if self.model_rule == "unlearned-target"
                    else ""
                )
            )
        if self.model_rule == "unlearned-target":
            return unlearned_name(model, dataset)
        return model

    def accepts(self, model: str, dataset: str) -> bool:
        """Whether results of ``model`` on ``dataset`` belong to this benchmark's setting."""
        forget = split_name(model)[1]
        if self.model_rule == "unlearned-target":
            return forget == dataset
        if self.model_rule == "original":
            return forget is None
        return True


FEWTRANS_MANIFESTS = tuple(f"fewtrans-varied--{d}.parquet" for d in FEWTRANS_TEST)
FEWTRANS_BASE2NOVEL_MANIFESTS = tuple(f"fewtrans-base2novel--{d}.parquet" for d in FEWTRANS_TEST)


def _frozen(protocol: str) -> tuple[str, ...]:
    return tuple(m.filename for m in FROZEN if m.protocol == protocol)


CLIP_KSHOT_MANIFESTS = tuple(f"clip-kshot--{d}.parquet" for d in CLIP)
FORGET_MANIFESTS = tuple(f"clip-kshot--{d}.parquet" for d in FORGET_DATASETS)
MINIATURE_MANIFESTS = (f"clip-kshot--{MINIATURE_FORGET}.parquet",)
INDUCTIVE_CLIP_RECIPE = "inductive-clip"
"""The recipe name of each CLIP method's configuration in the inductive-CLIP paper's runs."""
CLIP_PROTOCOLS = ("fewtrans-paper", "fewtrans-reference", "single", "published")
CLIP_HELD_OUT = ("fungi",)
"""Where CLIP methods search their HPE centre: not CUB (FewTrans's held-out set), whose
images are clip-cub's, a test dataset here; a fine-grained FewTrans dataset disjoint from
the twelve CLIP datasets instead."""
CLIP_SETTINGS = {
    "original": "CLIP as downloaded, which has likely seen these classes (partially transductive).",
    "unlearned-target": (
        "CLIP with the target dataset unlearned by SSD (the paper's retain set, alpha 30, "
        "lambda 1), so it has not seen the classes it is tested on (inductive)."
    ),
}


def _clip(**fields: Any) -> SubBenchmark:
    """A few-shot CLIP benchmark: the CLIP protocols and recipe, reported per K."""
    shared = {
        "hpe_protocols": CLIP_PROTOCOLS,
        "recipe": INDUCTIVE_CLIP_RECIPE,
        "leaderboard_protocol": "published",
    }
    return SubBenchmark(**{**shared, "held_out": CLIP_HELD_OUT, "reporting": "per-shot", **fields})


SUB_BENCHMARKS: dict[str, SubBenchmark] = {
    b.name: b
    for b in (
        SubBenchmark(
            name="demo",
            title="Demo: digits",
            description=(
                "The embedded digits data (classes 5-9): a runnable miniature of the FewTrans "
                "protocol. Centre search may use the digits search tasks (not held out: demo only)."
            ),
            manifests=("fewtrans-varied--digits.parquet",),
            held_out=("digits",),
            reference_adapter="finetune",
            leaderboard_protocol="fewtrans-reference",
        ),
        SubBenchmark(
            name="fewtrans-models",
            title="FewTrans: pretrained models",
            description="Pretrained backbones compared under full fine-tuning with HPE on the 10 FewTrans datasets.",
            manifests=FEWTRANS_MANIFESTS,
        ),
        SubBenchmark(
            name="fewtrans-adapters",
            title="FewTrans: vision transfer algorithms",
            description="Transfer algorithms on a fixed backbone, HPE, 10 FewTrans datasets.",
            manifests=FEWTRANS_MANIFESTS,
        ),
        SubBenchmark(
            name="demo-base-to-novel",
            title="Demo: digits base-to-novel",
            description=(
                "The embedded digits data as a miniature of FewTrans base-to-novel: CLIP-style "
                "methods adapt on episodes of classes 5-9 and also score unseen classes 0-4 "
                "by name. Centre search may use the digits search tasks (demo only)."
            ),
            manifests=("fewtrans-base2novel--digits.parquet",),
            held_out=("digits",),
            reference_adapter="zero-shot-clip",
            reporting="base-to-novel",
            leaderboard_protocol="fewtrans-reference",
        ),
        SubBenchmark(
            name="fewtrans-multimodal",
            title="FewTrans: multimodal (CLIP) base classes",
            description=(
                "CLIP transfer algorithms with HPE on the base tasks of the FewTrans "
                "base-to-novel manifests: FewTrans's CLIP script samples with base-to-novel "
                "on, so its Table VI tasks come from that interleaved stream."
            ),
            manifests=FEWTRANS_BASE2NOVEL_MANIFESTS,
        ),
        SubBenchmark(
            name="fewtrans-base-to-novel",
            title="FewTrans: base-to-novel",
            description=(
                "CLIP methods adapted on base classes, scored on base and on unseen (novel) "
                "classes; the harmonic mean of the two summarises them."
            ),
            manifests=FEWTRANS_BASE2NOVEL_MANIFESTS,
            reporting="base-to-novel",
        ),
        SubBenchmark(
            name="bscd",
            title="BSCD-FSL cross-domain",
            description="5-way 5/20/50-shot on CropDisease, EuroSAT, ISIC and ChestX.",
            manifests=_frozen("bscd"),
            hpe_protocols=("fewtrans-paper", "fewtrans-reference", "published"),
            statistic_ddof=0,
            recipe="bscd",
        ),
        _clip(
            name="clip-partially-transductive",
            title="CLIP few-shot (partially transductive)",
            description=(
                "Few-shot CLIP methods, K in 1/2/4/8/16 with seeds 1-3, on the twelve CLIP "
                "datasets, with CLIP as downloaded. In the inductive-CLIP paper's terms this "
                "setting is partially transductive: CLIP's pretraining has almost surely seen "
                "these classes. Reported per K (mean over seeds, with their spread), headline "
                "the average over shots and datasets."
            ),
            manifests=CLIP_KSHOT_MANIFESTS,
            reference_adapter="finetune-clip-both",
            model_rule="original",
            paired_with="clip-inductive",
        ),
        _clip(
            name="clip-inductive",
            title="CLIP few-shot: inductive (per-target unlearned CLIP)",
            description="K in 1/2/4/8/16, seeds 1-3, on the seven forget datasets. "
            + CLIP_SETTINGS["unlearned-target"],
            manifests=FORGET_MANIFESTS,
            reference_adapter="coop",
            model_rule="unlearned-target",
            paired_with="clip-partially-transductive",
        ),
        _clip(
            name="demo-clip-partially-transductive",
            title="Demo: digits 5-9 with the original demo CLIP",
            description="The inductive miniature, K in 1/2/4/8/16: demo-clip.digits has seen the digits 5-9.",
            manifests=MINIATURE_MANIFESTS,
            held_out=("digits",),
            reference_adapter="coop",
            model_rule="original",
            paired_with="demo-clip-inductive",
        ),
        _clip(
            name="demo-clip-inductive",
            title="Demo: digits 5-9 with the digits 5-9 unlearned",
            description="The inductive miniature: demo-clip.digits+unlearn:digits-5-9 (SSD, retain digits 0-4).",
            manifests=MINIATURE_MANIFESTS,
            held_out=("digits",),
            reference_adapter="coop",
            model_rule="unlearned-target",
            paired_with="demo-clip-partially-transductive",
        ),
    )
}


def benchmark_of_run(manifest: dict[str, Any]) -> SubBenchmark | None:
    """The sub-benchmark a run belongs to, from its recorded manifest.

    A frozen manifest's file name decides; a run on another file belongs to the first
    sub-benchmark whose manifests are drawn with the same sampling protocol.

    Args:
        manifest: the ``manifest`` block of a run's provenance (``file`` and ``protocol``).
    """
    filename = str(manifest.get("file", ""))
    for benchmark in SUB_BENCHMARKS.values():
        if filename in benchmark.manifests:
            return benchmark
    protocol = manifest.get("protocol", {}).get("name")
    protocols = {m.filename: m.protocol for m in FROZEN}
    for benchmark in SUB_BENCHMARKS.values():
        if any(protocols.get(m) == protocol for m in benchmark.manifests):
            return benchmark
    return None


def benchmarks_of_manifest(filename: str) -> list[SubBenchmark]:
    """The sub-benchmarks whose frozen manifests include ``filename`` (a file name, no folder)."""
    return [b for b in SUB_BENCHMARKS.values() if filename in b.manifests]


def statistic_ddof_of_run(manifest: dict[str, Any]) -> int:
    """The CI's ddof of a run: its sub-benchmark's, FewTrans's (1) when none matches."""
    benchmark = benchmark_of_run(manifest)
    return benchmark.statistic_ddof if benchmark is not None else 1
