"""Cost of every built-in adapter on a CLIP ViT-B/16 (run on a CUDA machine).

Run: PYTHONPATH=. python benchmarks/method_costs.py [--episodes 2] [--epochs 5] [--out DIR]

For each adapter: fit + predict of one configuration on the first digits episodes
(upsampled to 224 px; the support sizes are recorded), through the runner's own
``evaluate_episode``, on a random-init open_clip ViT-B-16 (the FewTrans backbone's shape),
once with 1 epoch and once with ``--epochs`` (after one untimed 1-epoch warm-up call, which
absorbs lazy imports such as peft's and first-use kernel selection). The two give a fixed cost per configuration
and a cost per epoch; with the fewtrans-paper grid around the default centre they project
one HPE episode as ``configurations * fixed + per_epoch * epochs summed over the grid``
(a projection, not a measurement: it ignores batching across configurations). Prints a
table with peak GPU memory and writes method_costs.json.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch

from fewtrans_board.api.adapter import AdapterConfig
from fewtrans_board.episodes.embedded import digits_manifest
from fewtrans_board.hpe.protocols import get_hpe_protocol
from fewtrans_board.registry.lookup import Registry
from fewtrans_board.registry.manager import get_plugin_manager
from fewtrans_board.runner.evaluate import evaluate_episode
from fewtrans_board.runner.plan import plan_run
from fewtrans_board.runner.session import RunSession
from fewtrans_board.runner.spec import RunSpec


def time_config(session: RunSession, config: AdapterConfig) -> float:
    """Mean seconds of fit + predict of one configuration over the run's episodes."""
    plan = session.plan
    adapter = plan.adapter_cls()
    cuda = session.device.startswith("cuda")
    if cuda:
        torch.cuda.synchronize()
    start = time.perf_counter()
    for episode in plan.episodes:
        evaluate_episode(
            adapter, session.backbone, session.inputs(episode), [config], plan.manifest.sha256
        )
    if cuda:
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / len(plan.episodes)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--episodes", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--adapters", nargs="*", default=None, help="Names (default: all).")
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    args = parser.parse_args()

    import open_clip
    from safetensors.torch import save_file

    registry = Registry.from_plugin_manager(get_plugin_manager(entry_points=False))
    tmp = Path(tempfile.mkdtemp())
    manifest = str(digits_manifest("fewtrans-varied--digits.parquet", tmp))
    torch.manual_seed(0)
    clip = open_clip.create_model("ViT-B-16", pretrained=None)
    weights = tmp / "clip.safetensors"
    save_file({k: v.contiguous() for k, v in clip.state_dict().items()}, str(weights))
    paper = get_hpe_protocol("fewtrans-paper")

    report: dict[str, object] = {"device": args.device, "epochs": args.epochs}
    if args.device.startswith("cuda"):
        report["gpu"] = torch.cuda.get_device_name(0)
    warm_up = RunSpec(
        model="open-clip:ViT-B-16",
        weights=str(weights),
        adapter="linear-probe",
        manifest=manifest,
        hpe="single",
        config={"epochs": 1},
        limit=1,
        device=args.device,
        feature_cache=False,
    )
    warm = RunSession(plan_run(warm_up, registry))
    time_config(warm, warm.plan.grid[0])  # CUDA context, kernels and allocator
    header = f"{'adapter':22} {'s/config':>9} {'s/epoch':>8} {'GiB':>5} {'grid':>5} {'HPE s/ep':>9}"
    print(header, flush=True)
    for entry in registry.adapters:
        adapter = entry.obj
        if args.adapters and adapter.name not in args.adapters:
            continue
        fields = {f.name for f in adapter.Config.fields_info()}
        trains = "epochs" in fields
        spec = RunSpec(
            model="open-clip:ViT-B-16",
            weights=str(weights),
            adapter=adapter.name,
            manifest=manifest,
            hpe="single",
            config={"epochs": args.epochs} if trains else {},
            limit=args.episodes,
            device=args.device,
            feature_cache=False,  # both runs pay for their features alike
        )
        try:
            session = RunSession(plan_run(spec, registry))
            _ = session.backbone  # loading is not part of the cost
            if spec.device.startswith("cuda"):
                torch.cuda.reset_peak_memory_stats()
            centre = session.plan.grid[0]
            first = replace(centre, epochs=1) if trains else centre
            time_config(session, first)  # untimed: lazy imports, kernel selection, caches
            seconds = time_config(session, centre)
            one = time_config(session, first) if trains else seconds
        except Exception as exc:  # report and go on with the other adapters
            report[adapter.name] = {"error": f"{type(exc).__name__}: {exc}"}
            print(f"{adapter.name:22} error: {type(exc).__name__}: {exc}", flush=True)
            continue
        peak = torch.cuda.max_memory_allocated() / 2**30 if spec.device.startswith("cuda") else 0.0
        row: dict[str, object] = {
            "seconds_per_config": round(seconds, 3),
            "support_sizes": [len(e.support) for e in session.plan.episodes],
            "peak_gib": round(peak, 2),
        }
        grid = paper.grid(adapter, adapter.Config())
        per_epoch = 0.0
        fixed = seconds
        if trains and args.epochs > 1:
            per_epoch = max(0.0, (seconds - one) / (args.epochs - 1))
            fixed = max(0.0, seconds - per_epoch * args.epochs)
        epochs_total = sum(int(c.to_dict().get("epochs", 0)) for c in grid)
        projected = len(grid) * fixed + per_epoch * epochs_total
        row.update(
            seconds_per_epoch=round(per_epoch, 3),
            fixed_seconds=round(fixed, 3),
            grid_size=len(grid),
            projected_hpe_seconds_per_episode=round(projected, 1),
        )
        report[adapter.name] = row
        del session
        gc.collect()
        if args.device.startswith("cuda"):
            torch.cuda.empty_cache()
        print(
            f"{adapter.name:22} {seconds:9.2f} {per_epoch:8.3f} {row['peak_gib']:5.1f} "
            f"{len(grid):5d} {projected:9.1f}",
            flush=True,
        )
    Path(args.out).mkdir(parents=True, exist_ok=True)
    Path(args.out, "method_costs.json").write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
