"""Batched (lockstep) vs looped HPE, per adapter family, against one configuration's cost.

Run: PYTHONPATH=. python benchmarks/hpe_batching.py [--device cpu|cuda] [--families ...]
     [--ways 20 --shots 5 --queries 10] [--epochs E] [--loop full|projected] [--out DIR]

For each family, on one synthetic episode (``ways x shots`` support, the FewTrans-style
varied episodes average about that) and the ``fewtrans-paper`` grid around the adapter's
centre (with ``--epochs`` as the centre's epoch count, to keep the run short):

* ``one``: fit + predict of the longest configuration alone (the HPE's lower bound);
* ``batched``: fit + predict of the whole grid with ``fit_many`` (lockstep);
* ``looped``: the per-configuration loop (and the agreement of its predictions with the
  batched ones). ``--loop full`` times it; ``--loop projected``
  times one configuration per distinct epoch count and adds them up per configuration
  (learning rates do not change the cost), which the GPU default uses to stay short.

Printed ratios: batched / one, looped / one, looped / batched. With ``--device cuda`` the
backbones are a random-init timm ViT-B/16 (vision families) and an open_clip ViT-B-16
(CLIP families) at 224 px with bf16 autocast, and the script also reports the model FLOP
utilisation (MFU) of batched full fine-tuning against the device's bf16 dense peak, and
cached vs uncached linear-probe HPE through the runner (decoded-image file + feature
cache vs embedding every configuration). On CPU the backbones are tiny random-init ViTs
(32 px) and ``--threads`` (default 1) pins the intra-op threads; ``--size base`` runs the
GPU's ViT-B/16 code path on CPU (a smoke test of the GPU run before spending device time:
``--size base --ways 2 --shots 1 --queries 1 --epochs 1 --cache-episodes 1``). Full
fine-tuning also reports achieved FLOP/s on any device (MFU where the peak is known or
given). Only ratios measured in this one run are claims; absolute seconds depend on the
machine.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from fewtrans_board.api.adapter import Adapter, AdapterConfig
from fewtrans_board.api.backbone import Backbone
from fewtrans_board.api.episode_data import ImageSet, SupportSet
from fewtrans_board.api.fit_options import FitOptions, GroupReport
from fewtrans_board.hpe.protocols import get_hpe_protocol
from fewtrans_board.registry.lookup import Registry
from fewtrans_board.registry.manager import get_plugin_manager

HEADS = ("linear-probe", "cosine-classifier")
CACHE = "cache"
"""Pseudo-family: cached vs uncached linear-probe HPE through the runner."""
CPU_FAMILIES = (
    *HEADS,
    CACHE,
    "finetune",
    "finetune-last-k",
    "lora",
    "bitfit",
    "ssf",
    "adapter",
    "adaptformer",
    "vpt",
    "tsa",
    "coop",
    "ivlp",
    "vpt-clip",
    "taskres",
    "clip-adapter",
    "finetune-clip-visual",
)
GPU_FAMILIES = (
    "finetune",
    *HEADS,
    CACHE,
    "lora",
    "coop",
    "vpt",
    "adaptformer",
    "finetune-clip-visual",
)
"""In priority order: the GPU run stops starting new families when its time budget is spent."""

BF16_PEAK_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0, "L40S": 362.0, "L4": 121.0}
"""Dense bf16 tensor-core peaks (SXM parts) by device-name fragment."""


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def timed(device: str, fn: Callable[[], Any], repeat: int = 5) -> float:
    """Seconds of ``fn()``; short calls are repeated (up to ``repeat`` times or 2 s) and the
    best kept. The first result of ``fn`` is what callers keep (they use ``setdefault``).
    """
    best, spent = float("inf"), 0.0
    for _ in range(repeat):
        sync(device)
        start = time.perf_counter()
        fn()
        sync(device)
        seconds = time.perf_counter() - start
        best, spent = min(best, seconds), spent + seconds
        if seconds > 1.0 or spent > 2.0:
            break
    return best


# --- backbones and the episode ------------------------------------------------------------


def vision_backbone(device: str, size: str) -> Backbone:
    if size == "tiny":
        from fewtrans_board.testing import tiny_vit_backbone

        return tiny_vit_backbone(seed=0)
    import timm

    torch.manual_seed(0)
    model: Any = timm.create_model("vit_base_patch16_224", pretrained=False, num_classes=0)
    return Backbone(
        name="vit_base_patch16_224.random",
        image_encoder=model.to(device).eval(),
        feature_dim=int(model.num_features),
        image_size=224,
        weights_id="vitb16-random-seed0",
        device=device,
    )


def clip_backbone(device: str, size: str) -> Backbone:
    if size == "tiny":
        from fewtrans_board.testing import tiny_clip_backbone

        return tiny_clip_backbone(seed=0)
    import open_clip

    from fewtrans_board.models.open_clip_family import backbone_from_open_clip

    torch.manual_seed(0)
    model = open_clip.create_model("ViT-B-16", pretrained=None)
    return backbone_from_open_clip(
        model,
        open_clip.get_tokenizer("ViT-B-16"),
        name="ViT-B-16.random",
        weights_id="clip-vitb16-random-seed0",
        architecture="ViT-B-16",
        device=device,
    )


class Episode:
    """A synthetic episode with pixels on the device and frozen features computed once."""

    def __init__(self, backbone: Backbone, ways: int, shots: int, queries: int) -> None:
        from fewtrans_board.testing import toy_episode

        toy = toy_episode((shots,) * ways, queries, backbone.image_size, seed=3)
        support_pixels = toy.support.images.pixels.to(backbone.device)
        query_pixels = toy.query.pixels.to(backbone.device)
        support_features = backbone.embed(support_pixels)
        query_features = backbone.embed(query_pixels)
        self.support = SupportSet(
            ImageSet(support_pixels, features=support_features),
            toy.support.labels.to(backbone.device),
            ways,
        )
        self.query = ImageSet(query_pixels, features=query_features)
        self.class_names = [f"class number {c}" for c in range(ways)]


# --- one family --------------------------------------------------------------------------


def grid_for(adapter: type[Adapter], epochs: int | None) -> list[AdapterConfig]:
    centre = adapter.Config()
    if epochs is not None and "epochs" in centre.to_dict():
        centre = centre.replace(epochs=epochs)
    return get_hpe_protocol("fewtrans-paper").grid(adapter, centre)


def longest(grid: list[AdapterConfig]) -> AdapterConfig:
    return max(grid, key=lambda c: int(c.to_dict().get("epochs", 0)))


def fit_and_predict(
    adapter: Adapter,
    backbone: Backbone,
    episode: Episode,
    configs: list[AdapterConfig],
    options: FitOptions | None = None,
) -> list[torch.Tensor]:
    """``fit_many`` over the grid (configuration ``i`` seeded with ``i``), then predict."""
    seeds = list(range(len(configs)))
    predictors = adapter.fit_many(
        backbone, episode.support, episode.class_names, configs, seeds, options=options
    )
    with torch.no_grad():
        return [predictor.predict(episode.query) for predictor in predictors]


def loop(
    adapter: Adapter,
    backbone: Backbone,
    episode: Episode,
    configs: list[AdapterConfig],
    seeds: list[int],
) -> list[torch.Tensor]:
    """The runner's per-configuration loop: seed, fit, predict, drop."""
    logits = []
    for seed, config in zip(seeds, configs, strict=True):
        torch.manual_seed(seed)
        predictor = adapter.fit(backbone, episode.support, episode.class_names, config)
        with torch.no_grad():
            logits.append(predictor.predict(episode.query))
        del predictor
    return logits


def agreement(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    same = [(x.argmax(1) == y.argmax(1)).float().mean() for x, y in zip(a, b, strict=True)]
    return round(float(torch.stack(same).mean()), 4)


def measure_family(
    adapter_cls: type[Adapter],
    backbone: Backbone,
    episode: Episode,
    args: argparse.Namespace,
) -> dict[str, Any]:
    device = backbone.device
    adapter = adapter_cls()
    grid = grid_for(adapter_cls, args.epochs)
    top = longest(grid)
    warm = [c.replace(epochs=1) if "epochs" in c.to_dict() else c for c in grid]
    fit_and_predict(adapter, backbone, episode, warm)  # untimed: imports, kernels, allocator
    loop(adapter, backbone, episode, warm[:1], [0])
    index_of_top = grid.index(top)
    one = timed(device, lambda: loop(adapter, backbone, episode, [top], [index_of_top]))
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    out: dict[str, list[torch.Tensor]] = {}
    reports: list[GroupReport] = []
    options = FitOptions(reports=reports)
    batched = timed(
        device,
        lambda: out.setdefault(
            "batched", fit_and_predict(adapter, backbone, episode, grid, options)
        ),
    )
    row: dict[str, Any] = {
        "configs": len(grid),
        "epochs": sorted({int(c.to_dict().get("epochs", 0)) for c in grid}),
        "one_s": round(one, 3),
        "batched_s": round(batched, 3),
        "batched_over_one": round(batched / one, 2),
        "lockstep": [
            {k: r.to_dict()[k] for k in ("configs", "chunks", "per_config_bytes", "fallback")}
            for r in reports
        ],
    }
    if device.startswith("cuda"):
        row["peak_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    # the loop calls fit only, which batches nothing
    if args.loop == "full":
        indices = list(range(len(grid)))
        looped = timed(
            device,
            lambda: out.setdefault("looped", loop(adapter, backbone, episode, grid, indices)),
        )
    else:
        by_epochs: dict[int, int] = {}
        for i, config in enumerate(grid):
            by_epochs.setdefault(int(config.to_dict().get("epochs", 0)), i)
        cost: dict[int, float] = {}
        kept: dict[int, torch.Tensor] = {}
        for e, i in by_epochs.items():

            def run_one(i: int = i) -> None:
                kept.setdefault(i, loop(adapter, backbone, episode, [grid[i]], [i])[0])

            cost[e] = timed(device, run_one)
        out["looped"] = [kept[i] for i in by_epochs.values()]
        indices = list(by_epochs.values())
        looped = sum(cost[int(c.to_dict().get("epochs", 0))] for c in grid)
    row.update(
        looped_s=round(looped, 3),
        looped_is=args.loop,
        looped_over_one=round(looped / one, 2),
        looped_over_batched=round(looped / batched, 2),
        agreement_batched_vs_looped=agreement([out["batched"][i] for i in indices], out["looped"]),
    )
    if adapter_cls.name == "finetune":
        row.update(mfu(adapter_cls, backbone, episode, grid, batched, args))
    return row


def mfu(
    adapter_cls: type[Adapter],
    backbone: Backbone,
    episode: Episode,
    grid: list[AdapterConfig],
    seconds: float,
    args: argparse.Namespace,
) -> dict[str, Any]:
    """Model FLOPs of the batched HPE (training + query predictions) per second vs the peak."""
    import copy

    from torch.utils.flop_counter import FlopCounterMode

    from fewtrans_board.blocks.training import autocast

    encoder = copy.deepcopy(backbone.image_encoder).train(False)
    pixels = episode.support.images.pixels[:4]
    counter = FlopCounterMode(display=False)
    with counter, autocast(backbone.device):
        encoder(pixels).float().square().mean().backward()
    train_per_image = counter.get_total_flops() / len(pixels)
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad(), autocast(backbone.device):
        encoder(pixels)
    forward_per_image = counter.get_total_flops() / len(pixels)
    n_support, n_query = len(episode.support), len(episode.query)
    epochs = sum(int(c.to_dict()["epochs"]) for c in grid)
    flops = train_per_image * n_support * epochs + forward_per_image * n_query * len(grid)
    cuda = str(backbone.device).startswith("cuda")
    name = torch.cuda.get_device_name(backbone.device) if cuda else "cpu"
    known = next((v for k, v in BF16_PEAK_TFLOPS.items() if k in name), None) if cuda else None
    peak = args.peak_tflops or known
    result: dict[str, Any] = {
        "model_tflop": round(flops / 1e12, 1),
        "achieved_tflops": round(flops / seconds / 1e12, 1),
        "device_name": name,
    }
    if peak:
        result.update(peak_bf16_tflops=peak, mfu=round(flops / seconds / (peak * 1e12), 3))
    return result


# --- cached vs uncached linear probe through the runner ------------------------------------


def cache_ratio(registry: Registry, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """Linear-probe HPE over digits episodes: decoded file + feature cache vs neither.

    "uncached" is the same code without the caches (the stacked heads embed support and
    queries once per episode); "uncached_loop" also trains one configuration at a time, so
    every configuration embeds its images again (the baseline of the 2.4x recorded on the
    H200 before the heads shared their predictions).
    """
    from safetensors.torch import save_file

    from fewtrans_board.episodes.embedded import digits_manifest
    from fewtrans_board.runner.evaluate import evaluate_episode
    from fewtrans_board.runner.plan import plan_run
    from fewtrans_board.runner.session import RunSession
    from fewtrans_board.runner.spec import RunSpec

    manifest = str(digits_manifest("fewtrans-varied--digits.parquet", tmp))
    if args.size == "tiny":
        model, weights = "demo-cnn.digits", None
    else:
        import timm

        torch.manual_seed(0)
        vit = timm.create_model("vit_base_patch16_224", pretrained=False)
        path = tmp / "vitb.safetensors"
        save_file({k: v.contiguous() for k, v in vit.state_dict().items()}, str(path))
        model, weights = "timm:vit_base_patch16_224", str(path)
    variants = {
        # the runner's defaults: decoded-image file, feature cache, stacked heads
        "cached": {"feature_cache": True, "batching": "on"},
        # the same code without the two caches: features embedded at every request
        "uncached": {"feature_cache": False, "batching": "on"},
        # a per-configuration script: every configuration embeds support and queries again
        "uncached_loop": {"feature_cache": False, "batching": "off"},
    }
    seconds = {}
    for label, options in [("warm-up", variants["uncached"]), *variants.items()]:
        spec = RunSpec(
            model=model,
            weights=weights,
            adapter="linear-probe",
            manifest=manifest,
            limit=1 if label == "warm-up" else args.cache_episodes,
            device=args.device,
            **options,  # type: ignore[arg-type]
        )
        plan = plan_run(spec, registry)
        session = RunSession(plan, decoded_folder=tmp / "decoded" if spec.feature_cache else None)
        _ = session.backbone
        adapter = plan.adapter_cls()

        def run(session: RunSession = session, adapter: Adapter = adapter) -> None:
            plan = session.plan
            session.prefetch_features(plan.episodes, progress=False)
            for episode in plan.episodes:
                evaluate_episode(
                    adapter,
                    session.backbone,
                    session.inputs(episode),
                    plan.grid,
                    plan.manifest.sha256,
                    options=session.fit_options,
                )

        seconds[label] = timed(args.device, run, repeat=1)  # a rerun would find it cached
    del seconds["warm-up"]  # one-off costs: reader data, kernels, allocator
    return {
        "model": model,
        "episodes": args.cache_episodes,
        **{f"{label}_s": round(value, 2) for label, value in seconds.items()},
        "uncached_over_cached": round(seconds["uncached"] / seconds["cached"], 1),
        "uncached_loop_over_cached": round(seconds["uncached_loop"] / seconds["cached"], 1),
    }


# --- main ----------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--families", nargs="*", default=None, help="Adapter names.")
    parser.add_argument("--ways", type=int, default=None, help="Default: 10 (CPU), 20 (GPU).")
    parser.add_argument("--shots", type=int, default=5)
    parser.add_argument("--queries", type=int, default=10)
    parser.add_argument(
        "--epochs", type=int, default=None, help="Centre epochs (default: 5 CPU, 20 GPU)."
    )
    parser.add_argument("--loop", choices=("full", "projected"), default=None)
    parser.add_argument("--threads", type=int, default=1, help="CPU intra-op threads.")
    parser.add_argument(
        "--budget-s", type=float, default=None, help="Stop starting families after this."
    )
    parser.add_argument("--cache-episodes", type=int, default=20)
    parser.add_argument("--peak-tflops", type=float, default=None, help="bf16 dense peak.")
    parser.add_argument(
        "--size",
        choices=("tiny", "base"),
        default=None,
        help="Backbones: tiny random-init ViTs at 32 px (CPU default) or ViT-B/16 at 224 px "
        "(CUDA default; on CPU it smoke-tests the GPU run's code with a small --ways/--epochs).",
    )
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    args = parser.parse_args()
    cuda = args.device.startswith("cuda")
    args.ways = args.ways or (20 if cuda else 10)
    args.epochs = args.epochs if args.epochs is not None else (20 if cuda else 5)
    args.loop = args.loop or ("projected" if cuda else "full")
    args.size = args.size or ("base" if cuda else "tiny")
    if not cuda:
        torch.set_num_threads(args.threads)
    families = args.families or list(GPU_FAMILIES if cuda else CPU_FAMILIES)
    registry = Registry.from_plugin_manager(get_plugin_manager(entry_points=False))
    started = time.perf_counter()
    report: dict[str, Any] = {
        "device": torch.cuda.get_device_name(0) if cuda else "cpu",
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "size": args.size,
        "episode": {"ways": args.ways, "shots": args.shots, "queries": args.queries},
        "centre_epochs": args.epochs,
        "families": {},
    }
    print(json.dumps({k: v for k, v in report.items() if k != "families"}), flush=True)
    backbones: dict[str, tuple[Backbone, Episode]] = {}
    for name in families:
        if args.budget_s and time.perf_counter() - started > args.budget_s:
            report["families"][name] = {"skipped": "time budget"}
            print(f"{name:22} skipped (time budget)", flush=True)
            continue
        try:
            if name == CACHE:
                backbones.clear()
                gc.collect()
                with tempfile.TemporaryDirectory() as tmp:
                    row = cache_ratio(registry, args, Path(tmp))
            else:
                adapter_cls = registry.adapters.get(name).obj
                kind = "clip" if adapter_cls.needs_text else "vision"
                if kind not in backbones:
                    backbones.clear()
                    gc.collect()
                    load = clip_backbone if kind == "clip" else vision_backbone
                    backbone = load(args.device, args.size)
                    episode = Episode(backbone, args.ways, args.shots, args.queries)
                    backbones[kind] = (backbone, episode)
                row = measure_family(adapter_cls, *backbones[kind], args)
        except Exception as exc:  # report and go on with the other families
            row = {"error": f"{type(exc).__name__}: {exc}"}
        report["families"][name] = row
        print(f"{name:22} {json.dumps(row)}", flush=True)
        gc.collect()
        if cuda:
            torch.cuda.empty_cache()
    report["seconds"] = round(time.perf_counter() - started, 1)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    Path(args.out, f"hpe_batching_{'cuda' if cuda else 'cpu'}.json").write_text(
        json.dumps(report, indent=2)
    )
    print_table(report)


def print_table(report: dict[str, Any]) -> None:
    print(
        f"\n{'family':22} {'configs':>7} {'batched/one':>11} {'looped/one':>10} "
        f"{'loop/batched':>12} {'agree':>6}"
    )
    for name, row in report["families"].items():
        if "uncached_over_cached" in row:
            print(
                f"{'linear-probe cache':22} uncached/cached {row['uncached_over_cached']}x, "
                f"per-configuration uncached/cached {row['uncached_loop_over_cached']}x"
            )
        elif "batched_over_one" not in row:
            print(f"{name:22} {row.get('error') or row.get('skipped')}")
        else:
            print(
                f"{name:22} {row['configs']:7d} {row['batched_over_one']:11.2f} "
                f"{row['looped_over_one']:10.2f} {row['looped_over_batched']:12.2f} "
                f"{row['agreement_batched_vs_looped']:6.3f}"
                + (f"   MFU {row['mfu']:.1%}" if "mfu" in row else "")
            )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
