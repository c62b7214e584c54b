"""What embedding the digits with the demo CNN costs a fresh process, before and after 2026-12-07.

Run: python benchmarks/demo_embedding.py [--images 1797] [--repeats 3]

1. Pooling: embeds as many 32 px images as the digits dataset has (1,797), in the feature
   cache's chunks of 256, through the demo CNN twice in this process: once with
   ``nn.MaxPool2d(2)`` and once with :func:`fewtrans_board.blocks.pooling.max_pool_2x2`
   (what the package uses), and checks that the features are equal bit for bit. One
   thread, as in a plugin worker.
2. Decoding: in fresh processes, import torch and decode every digit as
   ``Preprocessing.resize_uint8`` does now (Pillow), against the same with
   ``import torchvision.transforms.functional`` first (what it imported before).

The best of ``--repeats`` runs of each is compared; ratios are printed; no absolute time is
a claim.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
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


DECODE = """
import time
start = time.perf_counter()
import torch
{extra}
from fewtrans_board.api.backbone import Preprocessing
from fewtrans_board.datasets.digits import DIGITS, item_id
transform = Preprocessing.fewtrans(32)
for index in range({images}):
    transform.resize_uint8(DIGITS.reader.load_image(None, item_id(index)))
print(time.perf_counter() - start)
"""


def fresh_process_seconds(images: int, extra: str) -> float:
    """Seconds a fresh interpreter takes to import torch (and ``extra``) and decode."""
    code = DECODE.format(images=images, extra=extra)
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    return float(result.stdout.split()[-1])


def compare_decoding(images: int, repeats: int) -> None:
    variants = {"Pillow": "", "torchvision": "import torchvision.transforms.functional"}
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(repeats):
        for name, extra in variants.items():
            times[name].append(fresh_process_seconds(images, extra))
    best = {name: min(values) for name, values in times.items()}
    print(f"a fresh process importing torch and decoding {images} digits, best of {repeats}:")
    for name, seconds in best.items():
        print(f"  {name:>11}: {seconds:.3f} s")
    saved = best["torchvision"] - best["Pillow"]
    print(
        f"importing torchvision added {saved:.2f} s ({best['torchvision'] / best['Pillow']:.2f}x)"
    )


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
    for model in (fast, reference):  # warm-up
        embed(model, images[:CHUNK])
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
    compare_decoding(args.images, args.repeats)


if __name__ == "__main__":
    main()
