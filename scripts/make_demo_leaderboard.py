"""Regenerate the demo entries of the committed leaderboard (digits).

Run from the repository root:

    python scripts/make_demo_leaderboard.py [--work DIR] [--only ID ...]
    python scripts/make_demo_leaderboard.py --base-to-novel-model MODEL [--adapters A ...]

    python scripts/make_demo_leaderboard.py --inductive [--adapters A ...]

The first form rebuilds the "demo" benchmark's entries (the demo CNN). The second adds
"demo-base-to-novel" entries for a CLIP-style (image and text) model: each adapter adapts on
the base classes 5-9 of the frozen fewtrans-base2novel--digits manifest and also scores the
unseen classes 0-4 by name, so the site shows base, novel and their harmonic mean. The
third adds the inductive-CLIP miniature: each adapter's published recipe (the "published"
HPE protocol, recipe "inductive-clip") on the digits 5-9 k-shot manifest, once with the
original demo CLIP (demo-clip-partially-transductive) and once with the digits 5-9
unlearned from it (demo-clip-inductive; the unlearned weights are made first, with the
paper's SSD settings and the digits 0-4 retained).

For each entry: search the HPE centre on the digits search tasks (the demo benchmarks'
stand-in for a held-out dataset) when the adapter has hyperparameter axes, evaluate the
frozen digits manifest with the fewtrans-reference HPE protocol, pack a bundle, and add it
to leaderboard/ with a seeded verification. The demo entries take roughly 20-30 minutes on
2 CPU cores (the fine-tuning entry dominates). The demo CNN's start points are chosen for
it: the FewTrans defaults (made for CLIP ViT-B/16 and 70 epochs) leave its 1-step-per-epoch
head nearly untrained.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

MANIFESTS = Path("leaderboard/manifests")
SEARCH_MANIFEST = "fewtrans-search--digits.parquet"
PACKAGE_PIN = "fewtrans-board==0.1.0"


@dataclass(frozen=True)
class Entry:
    """One leaderboard entry to (re)build.

    Attributes:
        ident: submission id.
        model: registered model name.
        adapter: registered adapter name.
        method: the method label shown on the site.
        start: ``key=value`` start point of the centre search.
        plugins: pinned distributions (``name==version``).
        benchmark: the sub-benchmark.
        manifest: the frozen manifest evaluated.
    """

    ident: str
    model: str
    adapter: str
    method: str
    start: tuple[str, ...] = ()
    plugins: tuple[str, ...] = (PACKAGE_PIN,)
    benchmark: str = "demo"
    manifest: str = "fewtrans-varied--digits.parquet"
    hpe: str = "fewtrans-reference"
    run_model: str = ""
    """The model the results carry when it differs from ``model`` (an unlearned one)."""
    weights: str | None = None


DEMO_ENTRIES = [
    Entry(
        "finetune--demo-cnn",
        "demo-cnn.digits",
        "finetune",
        "Full fine-tuning (FewTrans recipe, 5 epochs for CPU)",
        ("epochs=5", "lr_backbone=0.0001", "lr_head=0.05"),
    ),
    Entry(
        "linear-probe--demo-cnn",
        "demo-cnn.digits",
        "linear-probe",
        "Linear probe (FewTrans recipe)",
        ("epochs=10",),
    ),
    Entry(
        "cosine-classifier--demo-cnn",
        "demo-cnn.digits",
        "cosine-classifier",
        "Cosine classifier (Baseline++)",
        ("epochs=10",),
    ),
    Entry(
        "mean-centroid--demo-cnn",
        "demo-cnn.digits",
        "mean-centroid",
        "Mean centroid (ProtoNet head)",
    ),
    Entry(
        "mean-centroid--demo-cnn-random",
        "demo-cnn.random",
        "mean-centroid",
        "Mean centroid, random-init backbone",
    ),
    Entry(
        "simpleshot--demo-cnn",
        "demo-cnn.digits",
        "simpleshot",
        "SimpleShot (example plugin)",
        plugins=(PACKAGE_PIN, "fewtrans-example==0.1.0"),
    ),
]
# Adapters whose HPE axes the centre search must set even without a start point.
SEARCHED_WITHOUT_START = ("linear-probe", "cosine-classifier", "finetune")
BASE_TO_NOVEL_METHODS = {
    "zero-shot-clip": "Zero-shot CLIP (class names only)",
    "coop": "CoOp (learned prompt context)",
}
BASE_TO_NOVEL_ADAPTERS_WITHOUT_AXES = ("zero-shot-clip",)
META = """[submission]
id = "{id}"
method = "{method}"
model = "{model}"
adapter = "{adapter}"
benchmark = "{benchmark}"
hpe_protocol = "{hpe}"
authors = ["fewtrans-board developers"]
code = "https://github.com/fewtrans-board/fewtrans-board"
hardware = "2-core CPU (CI machine)"
plugins = [{plugins}]
"""

Cli = Callable[..., None]
"""Runs ``fewtrans-board ARGS...`` and raises if it fails."""


def subprocess_cli(*args: str) -> None:
    """Run the installed command line in a child process."""
    print("+ fewtrans-board", " ".join(args), flush=True)
    subprocess.run([sys.executable, "-m", "fewtrans_board", *args], check=True)


def base_to_novel_entries(
    model: str,
    adapters: Sequence[str],
    plugins: Sequence[str] = (),
    start: Sequence[str] = (),
) -> list[Entry]:
    """Entries of the demo-base-to-novel benchmark for a CLIP-style model.

    Args:
        model: a registered model with a text encoder.
        adapters: CLIP adapters that score class names (``predict_names``).
        plugins: extra pinned distributions (the model's, if it is not built in).
        start: ``key=value`` centre-search start point of the adapters with HPE axes.
    """
    slug = model.replace(".", "-").replace(":", "-").replace("/", "-").lower()
    return [
        Entry(
            f"{adapter}--{slug}--b2n",
            model,
            adapter,
            BASE_TO_NOVEL_METHODS.get(adapter, adapter),
            start=() if adapter in BASE_TO_NOVEL_ADAPTERS_WITHOUT_AXES else tuple(start),
            plugins=(PACKAGE_PIN, *plugins),
            benchmark="demo-base-to-novel",
            manifest="fewtrans-base2novel--digits.parquet",
        )
        for adapter in adapters
    ]


INDUCTIVE_METHODS = {
    "clip-adapter": "CLIP-Adapter (published recipe)",
    "taskres": "TaskRes (published recipe)",
    "coop": "CoOp (published recipe)",
}
INDUCTIVE_MANIFEST = "clip-kshot--digits-5-9.parquet"
INDUCTIVE_WEIGHTS = "demo-clip-digits+unlearn-digits-5-9.safetensors"


def inductive_entries(adapters: Sequence[str], weights: Path) -> list[Entry]:
    """Entries of both inductive-CLIP miniatures for each adapter, as published.

    Args:
        adapters: CLIP adapters with an ``inductive-clip`` recipe.
        weights: the demo CLIP with the digits 5-9 unlearned (see :func:`unlearned_weights`).
    """
    entries = []
    for adapter in adapters:
        method = INDUCTIVE_METHODS.get(adapter, f"{adapter} (published recipe)")
        for benchmark, run_model, weights_file in (
            ("demo-clip-partially-transductive", "", None),
            ("demo-clip-inductive", "demo-clip.digits+unlearn:digits-5-9", str(weights)),
        ):
            setting = "original" if not run_model else "unlearned"
            entries.append(
                Entry(
                    f"{adapter}--demo-clip-digits--{setting}",
                    "demo-clip.digits",
                    adapter,
                    method,
                    benchmark=benchmark,
                    manifest=INDUCTIVE_MANIFEST,
                    hpe="published",
                    run_model=run_model,
                    weights=weights_file,
                )
            )
    return entries


def unlearned_weights(work: Path, cli: Cli = subprocess_cli) -> Path:
    """The demo CLIP with the digits 5-9 unlearned (the paper's SSD, digits 0-4 retained)."""
    out = work / INDUCTIVE_WEIGHTS
    if not out.is_file():
        cli(
            "unlearn", "--model", "demo-clip.digits", "--forget", "digits-5-9",
            "--retain", "digits-0-4", "--out", str(out), "--device", "cpu",
        )  # fmt: skip
    return out


def build_entry(
    entry: Entry,
    work: Path,
    cli: Cli = subprocess_cli,
    *,
    manifests: Path = MANIFESTS,
    leaderboard: Path | None = None,
    verify: int | None = None,
) -> None:
    """Search the centre (if needed), evaluate, pack and add one entry.

    Args:
        entry: what to build.
        work: scratch folder of this entry (runs, centre, bundle).
        cli: how to run ``fewtrans-board`` (a child process by default).
        manifests: the folder holding the frozen manifests.
        leaderboard: the store to add to (default: the command's default store).
        verify: episodes re-run per dataset by the verification (default: its own rule,
            every episode when that is cheap, else enough to catch a 5% forgery).
    """
    work.mkdir(parents=True, exist_ok=True)
    centre: list[str] = []
    needs_search = entry.start or entry.adapter in SEARCHED_WITHOUT_START
    if entry.benchmark == "demo-base-to-novel":
        needs_search = entry.adapter not in BASE_TO_NOVEL_ADAPTERS_WITHOUT_AXES
    if entry.hpe == "published":
        needs_search = False  # the recipe is the configuration
    if needs_search:
        config = [x for s in entry.start for x in ("--config", s)]
        cli(
            "hpe", "search", "--model", entry.model, "--adapter", entry.adapter,
            "--manifest", str(manifests / SEARCH_MANIFEST), "--limit", "10", *config,
            "--out", str(work / "centre.json"), "--device", "cpu",
        )  # fmt: skip
        centre = ["--centre", str(work / "centre.json")]
    weights = ["--weights", entry.weights] if entry.weights else []
    cli(
        "evaluate", "--model", entry.run_model or entry.model, "--adapter", entry.adapter,
        "--manifest", str(manifests / entry.manifest), "--hpe", entry.hpe, *weights,
        *centre, "--out", str(work / "run"), "--device", "cpu", "--threads", "1", "--quiet",
    )  # fmt: skip
    (work / "submission.toml").write_text(
        META.format(
            id=entry.ident,
            method=entry.method,
            model=entry.model,
            adapter=entry.adapter,
            benchmark=entry.benchmark,
            hpe=entry.hpe,
            plugins=", ".join(f'"{p}"' for p in entry.plugins),
        )
    )
    bundle = work / "bundle.zip"
    store = ["--leaderboard", str(leaderboard)] if leaderboard is not None else []
    cli(
        "submission", "pack", str(work / "run"), "--meta", str(work / "submission.toml"),
        "--out", str(bundle), *store,
    )  # fmt: skip
    sample = ["--sample", str(verify)] if verify else []
    cli("leaderboard", "add", str(bundle), *store, *sample, *weights, "--threads", "1")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, default=Path("demo-output/leaderboard-work"))
    parser.add_argument("--only", nargs="*", default=None, help="Entry ids to (re)build.")
    parser.add_argument(
        "--base-to-novel-model",
        default=None,
        help="Build demo-base-to-novel entries for this CLIP-style model instead.",
    )
    parser.add_argument(
        "--inductive",
        action="store_true",
        help="Build the inductive-CLIP miniature's entries (both settings) instead.",
    )
    parser.add_argument(
        "--adapters",
        nargs="*",
        default=None,
        help="Adapters of the base-to-novel entries (default: "
        f"{', '.join(BASE_TO_NOVEL_METHODS)}) or of the inductive entries (default: "
        f"{', '.join(INDUCTIVE_METHODS)}).",
    )
    parser.add_argument(
        "--plugin",
        action="append",
        default=[],
        help="Extra pinned distribution (NAME==VERSION) of a plugin-provided model.",
    )
    parser.add_argument(
        "--start",
        nargs="*",
        default=[],
        help="key=value centre-search start of base-to-novel adapters with HPE axes.",
    )
    args = parser.parse_args()
    if args.inductive:
        weights = unlearned_weights(args.work)
        entries = inductive_entries(args.adapters or list(INDUCTIVE_METHODS), weights)
    elif args.base_to_novel_model:
        adapters = args.adapters or list(BASE_TO_NOVEL_METHODS)
        entries = base_to_novel_entries(args.base_to_novel_model, adapters, args.plugin, args.start)
    else:
        entries = DEMO_ENTRIES
    for entry in entries:
        if args.only and entry.ident not in args.only:
            continue
        build_entry(entry, args.work / entry.ident)  # 'leaderboard add' rebuilds the index


if __name__ == "__main__":
    main()
