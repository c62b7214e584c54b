"""One-shot GPU check (run on a CUDA machine; CI never has one).

Run: PYTHONPATH=. python benchmarks/gpu_check.py [--out DIR]

Prints and writes gpu_check.json with:
1. CPU vs CUDA agreement of linear-probe and full fine-tune predictions on the demo CNN
   (5 digits episodes, fewtrans-paper grid; bf16 autocast on CUDA);
2. whether two CUDA runs of full fine-tuning are bit-identical, with and without
   torch.use_deterministic_algorithms (validate demands re-runnable results);
3. cached vs uncached linear-probe HPE over 50 episodes with a random-init ViT-B/16 at 224 px;
4. seconds per episode of full fine-tuning HPE (27 configurations) with ViT-B/16 at 224 px;
5. zero-shot CLIP (random-init open_clip ViT-B-16) runs on CUDA and matches CPU predictions.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from fewtrans_board.episodes.embedded import digits_manifest
from fewtrans_board.registry.lookup import Registry
from fewtrans_board.registry.manager import get_plugin_manager
from fewtrans_board.runner.evaluate import evaluate_episode
from fewtrans_board.runner.plan import RunPlan, plan_run
from fewtrans_board.runner.session import RunSession
from fewtrans_board.runner.spec import RunSpec

REPORT: dict[str, object] = {}


def run(registry: Registry, **spec: object) -> tuple[list[list[np.ndarray]], float, RunPlan]:
    plan = plan_run(RunSpec(**spec), registry)  # type: ignore[arg-type]
    session = RunSession(plan)
    _ = session.backbone
    adapter = plan.adapter_cls()
    start = time.perf_counter()
    logits = []
    for episode in plan.episodes:
        outcomes = evaluate_episode(
            adapter, session.backbone, session.inputs(episode), plan.grid, plan.manifest.sha256
        )
        logits.append([o.logits for o in outcomes])
    if str(spec.get("device", "cpu")).startswith("cuda"):
        torch.cuda.synchronize()
    return logits, time.perf_counter() - start, plan


def agreement(a: list[list[np.ndarray]], b: list[list[np.ndarray]]) -> float:
    same = [
        np.mean(x.argmax(1) == y.argmax(1))
        for ea, eb in zip(a, b, strict=True)
        for x, y in zip(ea, eb, strict=True)
    ]
    return float(np.mean(same))


def identical(a: list[list[np.ndarray]], b: list[list[np.ndarray]]) -> bool:
    return all(
        np.array_equal(x, y)
        for ea, eb in zip(a, b, strict=True)
        for x, y in zip(ea, eb, strict=True)
    )


def step(name: str, fn) -> None:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    try:
        fn()
    except Exception as exc:  # report and continue with the other checks
        REPORT[name] = {"error": f"{type(exc).__name__}: {exc}"}
    print(
        f"[{time.perf_counter() - start:6.1f}s] {name}: {json.dumps(REPORT.get(name))}", flush=True
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    args = parser.parse_args()
    REPORT["device"] = torch.cuda.get_device_name(0)
    REPORT["torch"] = torch.__version__
    registry = Registry.from_plugin_manager(get_plugin_manager(entry_points=False))
    tmp = Path(tempfile.mkdtemp())
    manifest = str(digits_manifest("fewtrans-varied--digits.parquet", tmp))
    demo = dict(model="demo-cnn.digits", manifest=manifest, limit=5)

    def cpu_vs_cuda() -> None:
        out = {}
        for adapter, config in (("linear-probe", {}), ("finetune", {"lr_backbone": 1e-4})):
            cpu, t_cpu, _ = run(registry, **demo, adapter=adapter, config=config, device="cpu")
            gpu, t_gpu, _ = run(registry, **demo, adapter=adapter, config=config, device="cuda")
            out[adapter] = {
                "agreement": agreement(cpu, gpu),
                "cpu_s": round(t_cpu, 2),
                "cuda_s": round(t_gpu, 2),
            }
        REPORT["cpu_vs_cuda_demo"] = out

    def determinism() -> None:
        base = dict(**demo, adapter="finetune", config={"lr_backbone": 1e-4}, device="cuda")
        a, _, _ = run(registry, **base)
        b, _, _ = run(registry, **base)
        os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
        torch.use_deterministic_algorithms(True)
        try:
            c, _, _ = run(registry, **base)
            d, _, _ = run(registry, **base)
        finally:
            torch.use_deterministic_algorithms(False)
        REPORT["cuda_rerun_identical"] = {
            "default": identical(a, b),
            "deterministic_algorithms": identical(c, d),
        }

    import timm
    from safetensors.torch import save_file

    torch.manual_seed(0)
    vit = timm.create_model("vit_base_patch16_224", pretrained=False)
    weights = tmp / "vitb.safetensors"
    save_file({k: v.contiguous() for k, v in vit.state_dict().items()}, str(weights))
    big = dict(
        model="timm:vit_base_patch16_224", weights=str(weights), manifest=manifest, device="cuda"
    )

    def feature_cache() -> None:
        _, cached, _ = run(registry, **big, adapter="linear-probe", limit=50, feature_cache=True)
        _, uncached, _ = run(registry, **big, adapter="linear-probe", limit=50, feature_cache=False)
        REPORT["vitb_linear_probe_50_episodes"] = {
            "cached_s": round(cached, 2),
            "uncached_s": round(uncached, 2),
            "speedup": round(uncached / cached, 1),
        }

    def finetune_cost() -> None:
        _, seconds, plan = run(registry, **big, adapter="finetune", limit=2)
        episodes = plan.episodes
        REPORT["vitb_finetune_hpe27"] = {
            "seconds_per_episode": round(seconds / len(episodes), 2),
            "support_sizes": [len(e.support) for e in episodes],
            "configurations": len(plan.grid),
            "peak_memory_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2),
        }

    def zero_shot() -> None:
        import open_clip

        torch.manual_seed(0)
        clip = open_clip.create_model("ViT-B-16", pretrained=None)
        path = tmp / "clip.safetensors"
        save_file({k: v.contiguous() for k, v in clip.state_dict().items()}, str(path))
        spec = dict(
            model="open-clip:ViT-B-16",
            weights=str(path),
            manifest=manifest,
            adapter="zero-shot-clip",
            limit=3,
        )
        cpu, _, _ = run(registry, **spec, device="cpu")
        gpu, t, _ = run(registry, **spec, device="cuda")
        REPORT["zero_shot_clip_vitb16"] = {
            "agreement_cpu_cuda": agreement(cpu, gpu),
            "cuda_s": round(t, 2),
        }

    for name, fn in (
        ("cpu_vs_cuda_demo", cpu_vs_cuda),
        ("cuda_rerun_identical", determinism),
        ("vitb_linear_probe_50_episodes", feature_cache),
        ("vitb_finetune_hpe27", finetune_cost),
        ("zero_shot_clip_vitb16", zero_shot),
    ):
        step(name, fn)
    Path(args.out, "gpu_check.json").write_text(json.dumps(REPORT, indent=2))
    print(json.dumps(REPORT, indent=2))


if __name__ == "__main__":
    main()
