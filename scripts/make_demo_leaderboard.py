"""Regenerate the demo entries of the committed leaderboard (benchmark "demo", digits).

Run from the repository root: python scripts/make_demo_leaderboard.py [--work DIR]

For each entry: search the HPE centre on the digits search tasks (the demo benchmark's
stand-in for a held-out dataset), evaluate the frozen digits manifest with the
fewtrans-reference HPE protocol, pack a bundle, and add it to leaderboard/ with a seeded
verification. Takes roughly 20-30 minutes on 2 CPU cores (the fine-tuning entry dominates).
The start points are chosen for the small demo CNN: the FewTrans defaults (made for CLIP
ViT-B/16 and 70 epochs) leave its 1-step-per-epoch head nearly untrained.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

MANIFESTS = Path("leaderboard/manifests")
ENTRIES = [
    # id, model, adapter, method label, start config, plugins
    (
        "finetune--demo-cnn",
        "demo-cnn.digits",
        "finetune",
        "Full fine-tuning (FewTrans recipe, 5 epochs for CPU)",
        ["epochs=5", "lr_backbone=0.0001", "lr_head=0.05"],
        ["fewtrans-board==0.1.0"],
    ),
    (
        "linear-probe--demo-cnn",
        "demo-cnn.digits",
        "linear-probe",
        "Linear probe (FewTrans recipe)",
        ["epochs=10"],
        ["fewtrans-board==0.1.0"],
    ),
    (
        "cosine-classifier--demo-cnn",
        "demo-cnn.digits",
        "cosine-classifier",
        "Cosine classifier (Baseline++)",
        ["epochs=10"],
        ["fewtrans-board==0.1.0"],
    ),
    (
        "mean-centroid--demo-cnn",
        "demo-cnn.digits",
        "mean-centroid",
        "Mean centroid (ProtoNet head)",
        [],
        ["fewtrans-board==0.1.0"],
    ),
    (
        "mean-centroid--demo-cnn-random",
        "demo-cnn.random",
        "mean-centroid",
        "Mean centroid, random-init backbone",
        [],
        ["fewtrans-board==0.1.0"],
    ),
    (
        "simpleshot--demo-cnn",
        "demo-cnn.digits",
        "simpleshot",
        "SimpleShot (example plugin)",
        [],
        ["fewtrans-board==0.1.0", "fewtrans-example==0.1.0"],
    ),
]
META = """[submission]
id = "{id}"
method = "{method}"
model = "{model}"
adapter = "{adapter}"
benchmark = "demo"
hpe_protocol = "fewtrans-reference"
authors = ["fewtrans-board developers"]
code = "https://github.com/fewtrans-board/fewtrans-board"
hardware = "2-core CPU (CI machine)"
plugins = [{plugins}]
"""


def cli(*args: str) -> None:
    print("+ fewtrans-board", " ".join(args), flush=True)
    subprocess.run([sys.executable, "-m", "fewtrans_board", *args], check=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--work", type=Path, default=Path("demo-output/leaderboard-work"))
    parser.add_argument("--only", nargs="*", default=None, help="Entry ids to (re)build.")
    args = parser.parse_args()
    for ident, model, adapter, method, start, plugins in ENTRIES:
        if args.only and ident not in args.only:
            continue
        work = args.work / ident
        work.mkdir(parents=True, exist_ok=True)
        centre: list[str] = []
        if start or adapter in ("linear-probe", "cosine-classifier", "finetune"):
            config = [x for s in start for x in ("--config", s)]
            cli(
                "hpe",
                "search",
                "--model",
                model,
                "--adapter",
                adapter,
                "--manifest",
                str(MANIFESTS / "fewtrans-search--digits.parquet"),
                "--limit",
                "10",
                *config,
                "--out",
                str(work / "centre.json"),
                "--device",
                "cpu",
            )
            centre = ["--centre", str(work / "centre.json")]
        cli(
            "evaluate",
            "--model",
            model,
            "--adapter",
            adapter,
            "--manifest",
            str(MANIFESTS / "fewtrans-varied--digits.parquet"),
            "--protocol",
            "fewtrans-reference",
            *centre,
            "--out",
            str(work / "run"),
            "--device",
            "cpu",
            "--threads",
            "1",
            "--quiet",
        )
        (work / "submission.toml").write_text(
            META.format(
                id=ident,
                method=method,
                model=model,
                adapter=adapter,
                plugins=", ".join(f'"{p}"' for p in plugins),
            )
        )
        cli(
            "submission",
            "pack",
            str(work / "run"),
            "--meta",
            str(work / "submission.toml"),
            "--out",
            str(work / "bundle.zip"),
        )
        cli("leaderboard", "add", str(work / "bundle.zip"), "--verify", "3", "--seed", "0")


if __name__ == "__main__":
    main()
