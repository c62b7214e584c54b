"""Embedding with the demo CNN: PyTorch's max_pool2d vs the fast 2x2 pooling, one CPU thread.

Run: python benchmarks/max_pool.py [--images 1797] [--repeats 3]

Embeds as many 32 px images as the digits dataset has (1,797), in the feature cache's chunks
of 256, through the demo CNN twice in this process: once with ``nn.MaxPool2d(2)`` and once
with :func:`fewtrans_board.blocks.pooling.max_pool_2x2` (what the package uses), and checks
that the features are equal bit for bit. One thread, as in a plugin worker. The best of
``--repeats`` runs of each is compared; the ratio is printed; no absolute time is a claim.
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn

from fewtrans_board.methods.trained.demo_cnn import IMAGE_SIZE, build_demo_cnn
from fewtrans_board.runner.features import CHUNK


def with_reference_pooling(model: nn.Module) -> nn.Module:
    """The same model with every pooling layer replaced by PyTorch's ``nn.MaxPool2d(2)``."""
    for stage in model.stages:
        for index, layer in enumerate(stage):
            if isinstance(layer, nn.MaxPool2d):
                stage[index] = nn.MaxPool2d(2)
    return model


def embed(model: nn.Module, images: torch.Tensor) -> tuple[float, torch.Tensor]:
    start = time.perf_counter()
    with torch.no_grad():
        features = torch.cat([model(images[i : i + CHUNK]) for i in range(0, len(images), CHUNK)])
    return time.perf_counter() - start, features


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=1797)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    fast = build_demo_cnn().eval()
    reference = with_reference_pooling(build_demo_cnn().eval())
    reference.load_state_dict(fast.state_dict())
    images = torch.rand(args.images, 3, IMAGE_SIZE, IMAGE_SIZE)
    embed(fast, images[:CHUNK]), embed(reference, images[:CHUNK])  # warm-up
    times: dict[str, list[float]] = {"max_pool2d": [], "fast": []}
    features = {}
    for _ in range(args.repeats):  # interleaved, so a busy neighbour slows both alike
        for name, model in (("max_pool2d", reference), ("fast", fast)):
            seconds, features[name] = embed(model, images)
            times[name].append(seconds)
    if not torch.equal(features["fast"], features["max_pool2d"]):
        raise SystemExit("the fast pooling changed the features")
    best = {name: min(values) for name, values in times.items()}
    print(f"{args.images} images, {torch.get_num_threads()} thread, best of {args.repeats}:")
    for name, seconds in best.items():
        print(f"  {name:>10}: {seconds:.3f} s")
    print(f"speed-up of the embedding: {best['max_pool2d'] / best['fast']:.2f}x; features equal")


if __name__ == "__main__":
    main()
