"""How far a retrain of the demo CNN lands from the shipped weights on this machine.

Run from the repository root: python benchmarks/demo_weights_drift.py [--seeds 1 2]

Prints this CPU, the per-tensor relative change (Frobenius norm) of a retrain with the
shipped recipe and of retrains with other seeds, and the leave-one-out nearest-centroid
accuracy on digits 5-9 of each: the numbers behind the tolerances in
tests/test_models.py (a same-recipe retrain must stay well inside them, another seed
well outside). Measured in one run; nothing is asserted.
"""

from __future__ import annotations

import argparse
import platform
import tempfile
from pathlib import Path

import torch
from safetensors.torch import save_file

from fewtrans_board.methods.trained.demo_cnn import PRETRAIN_SEED, pretrain, weights_path
from fewtrans_board.models.weights import read_state_dict
from tests.test_models import centroid_accuracy


def cpu_name() -> str:
    """The processor's model name (Linux), else what platform reports."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, nargs="*", default=[1, 2])
    args = parser.parse_args()
    shipped = read_state_dict(weights_path())
    print(f"cpu {cpu_name()}, torch {torch.__version__}")
    print(f"shipped: centroid accuracy {centroid_accuracy(weights_path()):.2f}%")
    with tempfile.TemporaryDirectory() as tmp:
        for seed in [PRETRAIN_SEED, *args.seeds]:
            state = pretrain(seed=seed)
            change = max(
                float((state[k] - v).norm() / v.norm())
                for k, v in shipped.items()
                if v.is_floating_point()
            )
            path = Path(tmp) / f"seed{seed}.safetensors"
            save_file(state, str(path))
            label = "same recipe" if seed == PRETRAIN_SEED else f"seed {seed}"
            print(
                f"retrain ({label}): max relative weight change {change:.3f}, "
                f"centroid accuracy {centroid_accuracy(path):.2f}%"
            )


if __name__ == "__main__":
    main()
