"""Sub-benchmarks: which frozen manifests a submission covers and under which rules."""

from __future__ import annotations

from dataclasses import dataclass

from fewtrans_board.episodes.frozen import CLIP, FEWTRANS_TEST, FROZEN
from fewtrans_board.unlearning.naming import split_name, unlearned_name
from fewtrans_board.unlearning.sets import FORGET_DATASETS, MINIATURE_FORGET

MODEL_RULES = ("any", "original", "unlearned-target")
"""``any``: one model everywhere; ``original``: one model, never an unlearned one;
``unlearned-target``: on each dataset D the submission's model unlearned on D
(``MODEL+unlearn:D``), so CLIP has never seen the classes it is tested on."""


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
        model_rule: which model each dataset's results must come from (:data:`MODEL_RULES`).
        paired_with: the benchmark with the same manifests under the other CLIP setting
            (the site compares the two).
    """

    name: str
    title: str
    description: str
    manifests: tuple[str, ...]
    hpe_protocols: tuple[str, ...] = ("fewtrans-paper", "fewtrans-reference")
    held_out: tuple[str, ...] = ("cub",)
    reference_adapter: str = "finetune"
    statistic_ddof: int = 1
    model_rule: str = "any"
    paired_with: str = ""

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


def _frozen(protocol: str) -> tuple[str, ...]:
    return tuple(m.filename for m in FROZEN if m.protocol == protocol)


CLIP_KSHOT_MANIFESTS = tuple(f"clip-kshot--{d}.parquet" for d in CLIP)
FORGET_MANIFESTS = tuple(f"clip-kshot--{d}.parquet" for d in FORGET_DATASETS)
MINIATURE_MANIFESTS = (f"clip-kshot--{MINIATURE_FORGET}.parquet",)
CLIP_SETTINGS = {
    "original": "CLIP as downloaded, which has likely seen these classes (partially transductive).",
    "unlearned-target": (
        "CLIP with the target dataset unlearned by SSD (the paper's retain set, alpha 30, "
        "lambda 1), so it has not seen the classes it is tested on (inductive)."
    ),
}


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
            manifests=CLIP_KSHOT_MANIFESTS,
            reference_adapter="finetune-clip-both",
        ),
        Benchmark(
            name="clip-partially-transductive",
            title="CLIP few-shot: partially transductive (original CLIP)",
            description="K in 1/2/4/8/16, seeds 1-3, on the seven forget datasets. "
            + CLIP_SETTINGS["original"],
            manifests=FORGET_MANIFESTS,
            hpe_protocols=("fewtrans-paper", "fewtrans-reference", "single"),
            reference_adapter="coop",
            model_rule="original",
            paired_with="clip-inductive",
        ),
        Benchmark(
            name="clip-inductive",
            title="CLIP few-shot: inductive (per-target unlearned CLIP)",
            description="K in 1/2/4/8/16, seeds 1-3, on the seven forget datasets. "
            + CLIP_SETTINGS["unlearned-target"],
            manifests=FORGET_MANIFESTS,
            hpe_protocols=("fewtrans-paper", "fewtrans-reference", "single"),
            reference_adapter="coop",
            model_rule="unlearned-target",
            paired_with="clip-partially-transductive",
        ),
        Benchmark(
            name="demo-clip-partially-transductive",
            title="Demo: digits 5-9 with the original demo CLIP",
            description="The inductive miniature, K in 1/2/4/8/16: demo-clip.digits has seen the digits 5-9.",
            manifests=MINIATURE_MANIFESTS,
            hpe_protocols=("fewtrans-paper", "fewtrans-reference", "single"),
            held_out=("digits",),
            reference_adapter="coop",
            model_rule="original",
            paired_with="demo-clip-inductive",
        ),
        Benchmark(
            name="demo-clip-inductive",
            title="Demo: digits 5-9 with the digits 5-9 unlearned",
            description="The inductive miniature: demo-clip.digits+unlearn:digits-5-9 (SSD, retain digits 0-4).",
            manifests=MINIATURE_MANIFESTS,
            hpe_protocols=("fewtrans-paper", "fewtrans-reference", "single"),
            held_out=("digits",),
            reference_adapter="coop",
            model_rule="unlearned-target",
            paired_with="demo-clip-partially-transductive",
        ),
    )
}
