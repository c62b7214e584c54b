"""Torch CPU threads: tiny adapter steps vs backbone forwards at several thread counts.

Run: python benchmarks/threads.py [--repeats 5]

Few-shot adapters spend their CPU time in tiny steps (an Adam step of a linear head on
25 support features); backbones in large matrix products. Each workload is timed here, in
this process, at 1, 2, 4, ... threads up to the cores available and at torch's default
(one per core of the host), and printed as a ratio to torch's default; fewtrans-board's
default (``fewtrans_board.core.threads.default_threads``: the cores this process may use,
affinity and cgroup quota counted) is marked. No absolute time is a claim.

What it showed (see the task report): on an idle 16-core host, heads are as fast at 2 as at
16 threads while a ViT-S/16 forward is 2.3x faster at 16 than at 4, so no small fixed cap
is right; on a 2-core machine loaded by other jobs, 1 thread ran heads 5x faster than 2.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch

from fewtrans_board.core.threads import available_cores, default_threads


def head_steps() -> Callable[[], None]:
    """50 Adam steps of a 512 -> 5 linear head on 25 support features (linear-probe size)."""
    features = torch.randn(25, 512)
    labels = torch.arange(5).repeat(5)

    def run() -> None:
        head = torch.nn.Linear(512, 5)
        optimiser = torch.optim.Adam(head.parameters(), lr=0.01)
        for _ in range(50):
            optimiser.zero_grad()
            torch.nn.functional.cross_entropy(head(features), labels).backward()
            optimiser.step()

    return run


def vit_forward() -> Callable[[], None]:
    """A random-init ViT-S/16 forward pass on 16 images of 224 px (a backbone's work)."""
    import timm

    model = timm.create_model("vit_small_patch16_224", pretrained=False, num_classes=0).eval()
    images = torch.randn(16, 3, 224, 224)

    def run() -> None:
        with torch.no_grad():
            model(images)

    return run


def timed(run: Callable[[], None], threads: int, repeats: int) -> float:
    torch.set_num_threads(threads)
    run()  # warm-up at this thread count
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch_default = torch.get_num_threads()
    ours = default_threads()
    counts = sorted(
        {1, ours, torch_default, *(n for n in (2, 4, 8, 16, 32) if n <= available_cores())}
    )
    print(
        f"{available_cores()} cores available; torch default {torch_default} threads, "
        f"fewtrans-board default {ours}"
    )
    for name, make in (
        ("linear head, 50 Adam steps", head_steps),
        ("ViT-S/16 forward", vit_forward),
    ):
        run = make()
        seconds = {n: timed(run, n, args.repeats) for n in counts}
        base = seconds[torch_default]
        cells = ", ".join(
            f"{n}{'*' if n == ours else ''}{'(torch)' if n == torch_default else ''}: "
            f"{base / seconds[n]:.2f}x"
            for n in counts
        )
        print(f"{name:28s} speed vs torch default -> {cells}")
    print("(* = fewtrans-board default; >1x is faster than torch's default)")
    print("On a machine busy with other jobs, pass --threads 1 (or a share of the cores).")


if __name__ == "__main__":
    main()
