"""Cached vs uncached frozen features: linear-probe HPE (15 configurations) over 50 episodes.

Run: python benchmarks/feature_cache.py [--episodes 50]

"Uncached" is the naive protocol: every configuration of every episode embeds its support
and query images again (what a per-configuration script does). "Cached" embeds each unique
image of the dataset once (the runner's feature cache) and trains the 15 heads together.
Both are timed in this process, on the frozen digits manifest, for two backbones: the demo
CNN (32 px, cheap) and a random-init timm ViT-Ti/16 at 224 px (a realistic forward cost).
The ratio is printed; no absolute time is a claim.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

from fewtrans_board.episodes.embedded import digits_manifest
from fewtrans_board.registry.lookup import Registry
from fewtrans_board.registry.manager import get_plugin_manager
from fewtrans_board.runner.evaluate import evaluate_episode
from fewtrans_board.runner.plan import plan_run
from fewtrans_board.runner.session import RunSession
from fewtrans_board.runner.spec import RunSpec


def timed_run(registry: Registry, spec: RunSpec) -> tuple[float, float]:
    plan = plan_run(spec, registry)
    session = RunSession(plan)
    _ = session.backbone  # load outside the timed region
    adapter = plan.adapter_cls()
    start = time.perf_counter()
    accuracies = []
    for episode in plan.episodes:
        inputs = session.inputs(episode)
        outcomes = evaluate_episode(
            adapter, session.backbone, inputs, plan.grid, plan.manifest.sha256
        )
        accuracies.append(
            sum((o.logits.argmax(1) == inputs.query_labels).mean() for o in outcomes)
            / len(outcomes)
        )
    return time.perf_counter() - start, float(sum(accuracies) / len(accuracies))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--episodes", type=int, default=50)
    args = parser.parse_args()
    registry = Registry.from_plugin_manager(get_plugin_manager(entry_points=False))
    with tempfile.TemporaryDirectory() as tmp:
        manifest = digits_manifest("fewtrans-varied--digits.parquet", Path(tmp))
        import timm
        from safetensors.torch import save_file

        torch.manual_seed(0)
        vit = timm.create_model("vit_tiny_patch16_224", pretrained=False)
        weights = Path(tmp) / "vit-tiny.safetensors"
        save_file({k: v.contiguous() for k, v in vit.state_dict().items()}, str(weights))
        for model, w in (("demo-cnn.digits", None), ("timm:vit_tiny_patch16_224", str(weights))):
            base = dict(
                model=model,
                weights=w,
                adapter="linear-probe",
                manifest=str(manifest),
                limit=args.episodes,
            )
            cached, acc_c = timed_run(registry, RunSpec(**base, feature_cache=True))
            uncached, acc_u = timed_run(registry, RunSpec(**base, feature_cache=False))
            print(
                f"{model:28s} linear-probe HPE x15 over {args.episodes} episodes: "
                f"uncached {uncached:7.2f} s, cached {cached:6.2f} s, "
                f"speed-up {uncached / cached:5.1f}x "
                f"(mean accuracy {100 * acc_u:.2f} vs {100 * acc_c:.2f})"
            )


if __name__ == "__main__":
    main()
