"""The inductive-CLIP miniature on the embedded digits (``fewtrans-board demo --inductive``).

The paper's oracle check at digit scale: the demo dual encoder trained on all ten digits
(c, *original*) has the digits 5-9 unlearned by SSD with the digits 0-4 retained (a,
*unlearned*), and is compared with the same recipe trained from scratch without 5-9 (b,
*scratch*). Zero-shot on 5-9 should fall to chance while 0-4 holds; few-shot accuracy on
5-9 (CoOp-style K in 1/2/4/8/16, seeds 1-3) of the unlearned model should move from the
original's towards the scratch model's.

The oracle check is a verdict per method (:mod:`fewtrans_board.unlearning.oracle`): the
unlearned and the scratch model's accuracies paired over the episodes, with the paired
t-test, Wilcoxon and the 95% CI of the difference against :data:`ORACLE_MARGIN`.

Every method trains from its support set (:func:`non_learning` finds any that returns
zero-shot on every episode). TaskRes runs the inductive-CLIP paper's recipe with its
learning rate chosen per model on held-out episodes inside the digits 5-9 *train* split
(:data:`HELD_OUT_SELECTION`): at the paper's 2e-4 (ImageNet's value in TaskRes's own
scripts) the zero-initialised residual moves each element by about the learning rate per
Adam step, ~0.02 over 100 steps, against text-feature elements of ~1.4 in the 32-dim demo
CLIP, so the classifier turns by well under 1% and the predictions equal zero-shot's on
every episode.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fewtrans_board.episodes.embedded import digits_manifest
from fewtrans_board.jobs.demo import build_demo_site
from fewtrans_board.models.unlearned_names import unlearned_name
from fewtrans_board.registry.lookup import Registry
from fewtrans_board.results.load import load_run
from fewtrans_board.runner.run import run_evaluation
from fewtrans_board.runner.spec import RunSpec
from fewtrans_board.stats.intervals import mean_ci
from fewtrans_board.unlearning.oracle import ORACLE_MARGIN, oracle_verdict
from fewtrans_board.unlearning.sets import MINIATURE_FORGET, MINIATURE_RETAIN

ORIGINAL = "demo-clip.digits"
SCRATCH = "demo-clip.digits-0-4"
UNLEARNED = unlearned_name(ORIGINAL, MINIATURE_FORGET)
MODELS = {"original": ORIGINAL, "unlearned": UNLEARNED, "scratch": SCRATCH}
"""Role -> model name, in table order: (c), (a), (b)."""

MANIFEST = f"clip-kshot--{MINIATURE_FORGET}.parquet"
DEFAULT_ADAPTERS = ("linear-probe", "coop", "taskres")
HPE = "single"
"""The miniature runs each method's default configuration (the paper's fixed settings)."""

HELD_OUT_SELECTION: dict[str, tuple[str, str, tuple[float, ...]]] = {
    "taskres": ("inductive-clip", "lr", (2e-3, 2e-2, 2e-1)),
}
"""Adapter -> (recipe, field, values): run the recipe with ``field`` chosen per model as
the best mean accuracy on held-out episodes inside the forget dataset's train split
(:mod:`fewtrans_board.unlearning.probe`; ties go to the first value). TaskRes's ladder
starts at the learning rate of TaskRes's own scripts for every dataset but ImageNet
(geekyutao/TaskRes ``train_regular.sh``: Adam 2e-3, batch 256, 100 epochs for K <= 4)."""

SHARED_PROMPT_ADAPTERS = ("coop", "kgcoop", "prograd", "cocoop")
"""Adapters whose class vectors are the text encoder's output for a shared learned context
followed by the class name: where a model encodes every class-name prompt identically, no
context can tell the classes apart, so these cannot learn there (reported, not a bug)."""


@dataclass
class InductiveDemoResult:
    """What the miniature measured.

    Attributes:
        out: the output folder.
        unlearning: the unlearning record.
        zero_shot: ``{dataset: {role: mean/CI summary}}`` on the test halves.
        few_shot: ``{adapter: {role: mean/CI over episodes}}`` on ``digits-5-9``.
        gaps: ``{adapter: {"original - unlearned": ..., "scratch - unlearned": ...}}``,
            paired over episodes.
        per_episode: ``{adapter: {role: accuracies}}`` (for tests and plots).
        verdicts: ``{adapter: oracle verdict}`` (unlearned vs scratch, paired over episodes).
        selected: ``{adapter: {role: {"config", "held_out"}}}`` for adapters whose
            configuration was chosen on held-out train-split episodes.
        identical_prompts: ``{role: bool}``: whether the model encodes every forget-class
            prompt to the same text feature (shared-prompt methods cannot learn there).
        site_index: the site's index page, if built.
    """

    out: Path
    unlearning: dict[str, Any]
    zero_shot: dict[str, dict[str, dict[str, Any]]]
    few_shot: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    gaps: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    per_episode: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    verdicts: dict[str, dict[str, Any]] = field(default_factory=dict)
    selected: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    identical_prompts: dict[str, bool] = field(default_factory=dict)
    site_index: Path | None = None

    def oracle_rows(self) -> list[dict[str, Any]]:
        """One row per method: both accuracies, the paired difference, tests and verdict."""
        return [{"adapter": a, **v} for a, v in self.verdicts.items()]


def non_learning(result: InductiveDemoResult) -> list[tuple[str, str, bool]]:
    """``(adapter, role, expected)`` where a method's accuracy equals zero-shot on every episode.

    Each episode's queries are the whole digits 5-9 test half, so zero-shot accuracy on an
    episode is the model's zero-shot accuracy there. ``expected`` marks a shared-prompt
    method on a model whose class prompts are all encoded alike (nothing can be learned).
    """
    zero_shot = result.zero_shot[MINIATURE_FORGET]
    out = []
    for adapter, roles in result.per_episode.items():
        for role, accuracies in roles.items():
            if np.allclose(accuracies, zero_shot[role]["mean"], rtol=0.0, atol=1e-6):
                expected = adapter in SHARED_PROMPT_ADAPTERS and result.identical_prompts[role]
                out.append((adapter, role, expected))
    return out


def identical_prompts(backbone: Any, split: Any) -> bool:
    """Whether every class prompt of ``split`` gets the same text feature from ``backbone``."""
    from fewtrans_board.unlearning.zeroshot import text_classifier

    features = text_classifier(backbone, split)
    return bool((features - features[0]).abs().max() < 1e-6)


def held_out_config(registry: Registry, adapter: str, backbone: Any, split: Any) -> dict[str, Any]:
    """The configuration of ``adapter`` chosen on train-split episodes, with every score."""
    from fewtrans_board.unlearning.probe import episode_accuracies, train_episodes

    recipe_name, name, values = HELD_OUT_SELECTION[adapter]
    cls = registry.adapters.get(adapter).obj
    recipe = next(r for r in cls.recipes if r.name == recipe_name)
    base = recipe.values_for(split.name)
    episodes = train_episodes(split)
    scores = {
        value: float(
            episode_accuracies(
                registry, adapter, backbone, split, episodes, {**base, name: value}
            ).mean()
        )
        for value in values
    }
    best = max(values, key=lambda v: (scores[v], -values.index(v)))
    return {
        "config": {**base, name: best},
        "recipe": recipe_name,
        "field": name,
        "held_out": {str(v): scores[v] for v in values},
    }


def unlearned_weights(out: Path) -> Path:
    """Where the miniature writes the unlearned weights."""
    return out / "unlearned" / "demo-clip-digits+unlearn-digits-5-9.safetensors"


def ensure_unlearned(
    registry: Registry, out: Path, device: str, say: Callable[[str], None]
) -> dict[str, Any]:
    """Unlearn the digits 5-9 (reusing an earlier result in ``out``) and return the record."""
    from fewtrans_board.models.unlearned_records import UnlearnedStore, check_weights, read_record
    from fewtrans_board.unlearning.importance import ImportanceCache
    from fewtrans_board.unlearning.run import UnlearnRequest, unlearn

    weights = unlearned_weights(out)
    if weights.is_file():
        record = read_record(weights)
        check_weights(weights, record)
        if "zero_shot" in record:
            return record
    request = UnlearnRequest(
        model=ORIGINAL, forget=MINIATURE_FORGET, retain=MINIATURE_RETAIN, out=weights, device=device
    )
    return unlearn(
        registry,
        request,
        cache=ImportanceCache(out / "cache" / "importances"),
        store=UnlearnedStore(out / "cache" / "unlearned"),
        report=say,
    )


def zero_shot_table(
    registry: Registry, out: Path, device: str
) -> dict[str, dict[str, dict[str, Any]]]:
    """Zero-shot accuracy of the three models on the test halves of both digit sets."""
    from fewtrans_board.unlearning.data import load_split
    from fewtrans_board.unlearning.zeroshot import zero_shot

    table: dict[str, dict[str, dict[str, Any]]] = {}
    backbones = load_backbones(registry, out, device)
    for dataset in (MINIATURE_FORGET, *MINIATURE_RETAIN):
        spec = registry.datasets.get(dataset).obj
        split = load_split(spec, None, "test", backbones["original"].image_size)
        table[dataset] = {role: zero_shot(b, split).summary() for role, b in backbones.items()}
    return table


def load_backbones(registry: Registry, out: Path, device: str) -> dict[str, Any]:
    """The three models by role."""
    return {
        role: registry.load_model(
            name, unlearned_weights(out) if role == "unlearned" else None, device
        )
        for role, name in MODELS.items()
    }


def run_inductive_demo(
    registry: Registry,
    out: Path,
    *,
    adapters: Sequence[str] = DEFAULT_ADAPTERS,
    episodes: int | None = None,
    device: str = "cpu",
    progress: bool = True,
    build_site_too: bool = True,
    report: Callable[[str], None] | None = None,
    margin: float = ORACLE_MARGIN,
) -> InductiveDemoResult:
    """Unlearn, compare zero-shot, run few-shot adapters on all three models, build the site.

    Args:
        registry: the plugin registry.
        out: output folder (unlearned weights, caches, manifest, results, site).
        adapters: few-shot adapters to compare on the three models.
        episodes: evaluate only the first N of the 15 episodes (``None``: all).
        device: torch device.
        progress: show progress bars.
        build_site_too: build the static site of the runs.
        report: receives one line per step.
        margin: the oracle verdict's equivalence margin (points).

    Runs resume: finished result shards and the unlearned weights in ``out`` are reused.
    """
    say = report or (lambda _msg: None)
    record = ensure_unlearned(registry, out, device, say)
    result = InductiveDemoResult(out, record, zero_shot_table(registry, out, device))
    manifest = digits_manifest(MANIFEST, out / "manifests")
    from fewtrans_board.unlearning.data import load_split

    backbones = load_backbones(registry, out, device)
    forget_train = load_split(
        registry.datasets.get(MINIATURE_FORGET).obj, None, "train", backbones["original"].image_size
    )
    result.identical_prompts = {
        role: identical_prompts(b, forget_train) for role, b in backbones.items()
    }
    for adapter in adapters:
        per_role = {}
        for role, model in MODELS.items():
            config: dict[str, Any] = {}
            if adapter in HELD_OUT_SELECTION:
                say(f"{adapter} on {model}: choosing its learning rate on held-out train episodes")
                chosen = held_out_config(registry, adapter, backbones[role], forget_train)
                result.selected.setdefault(adapter, {})[role] = chosen
                config = chosen["config"]
            say(f"few-shot {adapter} on {model}")
            spec = RunSpec(
                model,
                adapter,
                str(manifest),
                hpe=HPE,
                weights=str(unlearned_weights(out)) if role == "unlearned" else None,
                config=config,
                limit=episodes,
                device=device,
            )
            per_role[role] = _hpe_accuracies(
                spec, registry, out / "results" / role / adapter, progress
            )
        _compare_models(result, adapter, per_role, margin)
    if build_site_too:
        oracle_check = {
            "models": MODELS,
            "rows": result.oracle_rows(),
            "margin": margin,
            "protocol": HPE,  # the site shows a verdict only beside runs of this protocol
        }
        result.site_index = build_demo_site(registry, out, manifest, oracle_check=oracle_check)
    return result


def _hpe_accuracies(spec: RunSpec, registry: Registry, run_dir: Path, progress: bool) -> Any:
    """Evaluate ``spec`` into ``run_dir`` (resuming) and read its per-episode HPE accuracies."""
    run_evaluation(spec, registry, run_dir, progress=progress)
    return load_run(run_dir).aggregations()["hpe"]


def _compare_models(
    result: InductiveDemoResult, adapter: str, per_role: dict[str, Any], margin: float
) -> None:
    """Record one adapter's accuracies on the three models, their gaps and the oracle verdict."""
    result.per_episode[adapter] = per_role
    result.few_shot[adapter] = {r: mean_ci(v).to_dict() for r, v in per_role.items()}
    result.gaps[adapter] = {
        f"{other} - unlearned": mean_ci(per_role[other] - per_role["unlearned"]).to_dict()
        for other in ("original", "scratch")
    }
    result.verdicts[adapter] = oracle_verdict(
        per_role["unlearned"], per_role["scratch"], margin
    ).to_dict()
