"""Real architectures at real resolution on CPU, through the real path (issue 39, item 4).

Run: PYTHONPATH=. python benchmarks/real_resolution.py [--episodes 3] [--out DIR]

A synthetic copy of DTD in its official layout (256 px JPEGs, 40 per class) -> a FewTrans
manifest (``fewtrans-varied``: variable way and shot, supports up to ~150 images) -> the
first ``--episodes`` episodes evaluated by the ``fewtrans-board`` command line in the
sandboxed worker (``--isolation sandbox``) with a random-init timm ViT-S/16 at 224 px:

* linear probe under the full ``fewtrans-paper`` HPE (15 configurations, cached features);
* full fine-tuning and LoRA, one configuration at 1 and at 2 epochs (``--hpe single``):
  the difference is the seconds per epoch, the rest the fixed cost per configuration;
* CoOp on a random-init open_clip ViT-B/16 (text and image towers), 1 and 2 epochs;
* the linear-probe HPE on two episodes in two shards, inline and on the Ray executor with 2
  workers (their HPE accuracies must be equal).

It prints seconds per episode, per epoch and per configuration, the peak memory the runs
record, the CPU-vs-H200 ratio of the seconds per epoch (the cost table's H200 figures are
per epoch at a support of 19), and what ``reproduce fewtrans:table-5 --plan`` projects for
the whole table on one H200, one H100 and this CPU. A full HPE of a trained adapter at 224 px
is not run on CPU: 27 configurations of up to 60 epochs would take hours per episode, which
is what the projection is for.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

CLI = [sys.executable, "-m", "fewtrans_board"]


def cli(*args: str) -> tuple[float, str]:
    """Run ``fewtrans-board ARGS``; return wall seconds and stdout (fails loudly)."""
    started = time.perf_counter()
    done = subprocess.run([*CLI, *args], capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"fewtrans-board {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return seconds, done.stdout


def summary(run: Path) -> dict[str, Any]:
    """``results summary --json`` of one run folder."""
    _, out = cli("results", "summary", str(run), "--json")
    data = json.loads(out)
    return data[0] if isinstance(data, list) else data


def run_seconds(run: Path) -> float:
    """Fit and predict seconds of every configuration row (start-up, decoding and feature
    caching excluded: the wall time includes them)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from fewtrans_board.results.row_schema import CONFIG_KIND

    total = 0.0
    for shard in sorted((run / "shards").glob("*.parquet")):
        table = pq.read_table(shard, columns=["kind", "seconds"])
        rows = table.filter(pc.equal(table["kind"], CONFIG_KIND))
        total += float(pc.sum(rows["seconds"]).as_py() or 0.0)
    return total


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--episodes", type=int, default=3)
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    args = parser.parse_args()

    import open_clip
    import timm
    import torch
    from safetensors.torch import save_file

    from fewtrans_board.datasets.synthetic import write_synthetic_copy
    from fewtrans_board.episodes.manifest import Manifest
    from fewtrans_board.registry.lookup import Registry
    from fewtrans_board.registry.manager import get_plugin_manager

    work = Path(tempfile.mkdtemp(prefix="real-resolution-"))
    registry = Registry.from_plugin_manager(get_plugin_manager(entry_points=False))
    root = work / "dtd"
    started = time.perf_counter()
    write_synthetic_copy(registry.datasets.get("dtd").obj, root, per_class=40, image_size=256)
    layout_seconds = time.perf_counter() - started
    manifest = work / "fewtrans-varied--dtd.parquet"
    cli(
        "manifest",
        "build",
        "--protocol",
        "fewtrans-varied",
        "--dataset",
        "dtd",
        "--root",
        str(root),
        "--out",
        str(manifest),
    )
    episodes = Manifest.load(manifest).episodes()[: args.episodes]
    supports = [len(e.support) for e in episodes]
    queries = [len(e.query) for e in episodes]

    torch.manual_seed(0)
    vit = timm.create_model("vit_small_patch16_224", pretrained=False, num_classes=0)
    vit_weights = work / "vit-s16.safetensors"
    save_file({k: v.contiguous() for k, v in vit.state_dict().items()}, str(vit_weights))
    clip = open_clip.create_model("ViT-B-16", pretrained=None)
    clip_weights = work / "clip-b16.safetensors"
    save_file({k: v.contiguous() for k, v in clip.state_dict().items()}, str(clip_weights))

    common = [
        "--manifest",
        str(manifest),
        "--root",
        str(root),
        "--limit",
        str(args.episodes),
        "--quiet",
        "--threads",
        str(os.cpu_count() or 1),
    ]
    vit_model = ["--model", "timm:vit_small_patch16_224", "--weights", str(vit_weights)]
    clip_model = ["--model", "open-clip:ViT-B-16", "--weights", str(clip_weights)]
    report: dict[str, Any] = {
        "cpu": _cpu_model(),
        "episodes": args.episodes,
        "support_sizes": supports,
        "query_sizes": queries,
        "layout_seconds": round(layout_seconds, 1),
    }

    def evaluate(name: str, model: list[str], adapter: str, *extra: str) -> dict[str, Any]:
        out = work / "runs" / name
        wall, _ = cli(
            "evaluate",
            *model,
            "--adapter",
            adapter,
            "--out",
            str(out),
            "--isolation",
            "sandbox",
            *common,
            *extra,
        )
        data = summary(out)
        row = {
            "wall_seconds": round(wall, 1),
            "compute_seconds": round(run_seconds(out), 1),
            "seconds_per_episode": round(run_seconds(out) / args.episodes, 1),
            "configurations": data["configurations"],
            "peak_memory_mib": round(data.get("peak_memory", {}).get("bytes", 0) / 2**20, 1),
            "hpe_accuracy": round(data["aggregations"]["hpe"]["mean"], 2),
        }
        report[name] = row
        print(name, row, flush=True)
        return row

    evaluate("linear-probe-hpe", vit_model, "linear-probe", "--hpe", "fewtrans-paper")
    per_epoch: dict[str, float] = {}
    for adapter, model in (("finetune", vit_model), ("lora", vit_model), ("coop", clip_model)):
        one = evaluate(
            f"{adapter}-1-epoch", model, adapter, "--hpe", "single", "--config", "epochs=1"
        )
        two = evaluate(
            f"{adapter}-2-epochs", model, adapter, "--hpe", "single", "--config", "epochs=2"
        )
        per_epoch[adapter] = max(0.0, two["seconds_per_episode"] - one["seconds_per_episode"])
        report[f"{adapter}-seconds-per-epoch"] = round(per_epoch[adapter], 2)
        report[f"{adapter}-fixed-seconds"] = round(
            one["seconds_per_episode"] - per_epoch[adapter], 2
        )

    # Ray vs inline on the same two episodes in two shards (a shard holds whole episodes)
    two = [a if a != str(args.episodes) else "2" for a in common]
    hpe = ["--adapter", "linear-probe", "--hpe", "fewtrans-paper", "--shards", "2", *two]
    cli("evaluate", *vit_model, *hpe, "--out", str(work / "runs" / "inline-2"))
    wall, _ = cli(
        "evaluate",
        *vit_model,
        *hpe,
        "--out",
        str(work / "runs" / "ray-2"),
        "--executor",
        "ray",
        "--workers",
        "2",
    )
    inline = summary(work / "runs" / "inline-2")["aggregations"]["hpe"]["mean"]
    ray = summary(work / "runs" / "ray-2")["aggregations"]["hpe"]["mean"]
    report["ray-2-workers"] = {"wall_seconds": round(wall, 1), "hpe_equals_inline": ray == inline}
    print("ray", report["ray-2-workers"], flush=True)

    from fewtrans_board.reproduce.costs import cost_table

    table = cost_table()
    support = sum(supports) / len(supports)
    scale = support / float(table["reference"]["support"])
    ratios = {}
    for adapter in ("finetune", "lora", "coop"):
        h200 = float(table["adapters"][adapter][0]) * scale
        backbone = 0.26 if adapter != "coop" else 1.0  # ViT-S/16 vs ViT-B/16 GMACs
        ratios[adapter] = round(per_epoch[adapter] / (h200 * backbone), 1) if h200 else None
    report["cpu_over_h200_per_epoch"] = ratios
    _, plan = cli("reproduce", "fewtrans:table-5", "--plan", "--json")
    report["table-5-projection-hours"] = {
        k: round(v / 3600, 1) for k, v in json.loads(plan)["seconds_left"].items()
    }
    print(json.dumps(report, indent=2))
    Path(args.out).mkdir(parents=True, exist_ok=True)
    Path(args.out, "real_resolution.json").write_text(json.dumps(report, indent=2))


def _cpu_model() -> str:
    from fewtrans_board.runner.spec import cpu_model

    return f"{cpu_model()}, {os.cpu_count()} cores"


if __name__ == "__main__":
    main()
