"""The demo backbone: a small CNN pretrained on the digits *source* classes (0-4).

Its weights ship with the package (``default_plugins/weights/demo-cnn-digits.safetensors``,
about 230 KB), pinned by :data:`SHIPPED_WEIGHTS_SHA256` (the ``weights_id`` every demo result
records). ``python -m fewtrans_board.methods.trained.demo_cnn`` retrains them: bit for bit on one
machine, and within float tolerance on another, since training's float reductions differ
across CPUs (the tests check both).
The random-init twin uses the same architecture with seeded random weights, so the demo
can show what pretraining buys on the unseen evaluation classes 5-9.
"""

from __future__ import annotations

import hashlib
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fewtrans_board.api.backbone import Backbone, Preprocessing
from fewtrans_board.blocks.pooling import max_pool_2x2_module
from fewtrans_board.models.weights import file_sha256, read_state_dict

if TYPE_CHECKING:
    from torch import nn

IMAGE_SIZE = 32
FEATURE_DIM = 64
WEIGHTS_FILE = "demo-cnn-digits.safetensors"
PRETRAIN_SEED = 0
PRETRAIN_EPOCHS = 12
SHIPPED_WEIGHTS_SHA256 = "16ca5f1fced351d80a3e07427883e7c37397e087b09bfb8ffc1f63f56cd7f32d"
"""sha256 of the shipped weights file; a different file is a different model."""


def build_demo_cnn() -> nn.Module:
    """Three conv-BN-ReLU stages and global average pooling: ``[N,3,32,32] -> [N,64]``."""
    from torch import nn

    def stage(cin: int, cout: int, pool: bool) -> nn.Sequential:
        layers: list[nn.Module] = [
            nn.Conv2d(cin, cout, 3, padding=1, bias=False),
            nn.BatchNorm2d(cout),
            nn.ReLU(inplace=True),
        ]
        if pool:
            layers.append(max_pool_2x2_module())
        return nn.Sequential(*layers)

    class DemoCNN(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stages = nn.ModuleList(
                [stage(3, 32, True), stage(32, 64, True), stage(64, 64, False)]
            )

        def forward(self, x: Any) -> Any:
            for block in self.stages:
                x = block(x)
            return x.mean(dim=(2, 3))

    return DemoCNN()


def weights_path() -> Path:
    """Location of the shipped pretrained weights."""
    return Path(
        str(resources.files("fewtrans_board.default_plugins").joinpath("weights", WEIGHTS_FILE))
    )


def _backbone(model: nn.Module, name: str, weights_id: str, device: str, source: str) -> Backbone:
    return Backbone(
        name=name,
        image_encoder=model.to(device).eval(),
        feature_dim=FEATURE_DIM,
        image_size=IMAGE_SIZE,
        weights_id=weights_id,
        device=device,
        info={"family": "demo", "architecture": "demo-cnn", "weights": source},
    )


def load_pretrained(weights: Path | None, device: str) -> Backbone:
    """Load the shipped (or a given) checkpoint into the demo CNN."""
    path = weights if weights is not None else weights_path()
    model = build_demo_cnn()
    model.load_state_dict(read_state_dict(path))
    return _backbone(
        model, "demo-cnn.digits", "sha256:" + file_sha256(path), device, str(path.name)
    )


def load_random(weights: Path | None, device: str) -> Backbone:
    """The random-init twin (seeded), or a given checkpoint."""
    import torch

    if weights is not None:
        return load_pretrained(weights, device)
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(PRETRAIN_SEED)
    model = build_demo_cnn()
    torch.random.set_rng_state(generator_state)
    digest = hashlib.sha256(f"demo-cnn-random-{PRETRAIN_SEED}".encode()).hexdigest()
    return _backbone(model, "demo-cnn.random", "random:" + digest, device, "random-init")


def pretrain(seed: int = PRETRAIN_SEED, epochs: int = PRETRAIN_EPOCHS) -> dict[str, Any]:
    """Pretrain the demo CNN on digits classes 0-4 (deterministic on one CPU type).

    Returns:
        The trained backbone's state dict (without the temporary classifier).
    """
    import torch
    from torch import nn

    from fewtrans_board.datasets.digits import DIGITS, SOURCE_CLASSES

    torch.use_deterministic_algorithms(True)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        torch.manual_seed(seed)
        prep = Preprocessing.fewtrans(IMAGE_SIZE)
        listing = DIGITS.list_items(None)
        items = [(item, label) for label, c in enumerate(SOURCE_CLASSES) for item in listing[c]]
        pixels = torch.stack([prep.apply(DIGITS.reader.load_image(None, i)) for i, _ in items])
        labels = torch.tensor([label for _, label in items])
        model = build_demo_cnn()
        head = nn.Linear(FEATURE_DIM, len(SOURCE_CLASSES))
        optimizer = torch.optim.Adam([*model.parameters(), *head.parameters()], lr=2e-3)
        generator = torch.Generator().manual_seed(seed)
        for _ in range(epochs):
            model.train()
            order = torch.randperm(len(labels), generator=generator)
            for start in range(0, len(order), 64):
                batch = order[start : start + 64]
                loss = nn.functional.cross_entropy(head(model(pixels[batch])), labels[batch])
                optimizer.zero_grad()
                loss.backward()  # type: ignore[no-untyped-call]
                optimizer.step()
        return {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(False)


def main(out: str | None = None) -> None:
    """Pretrain and write the safetensors file (default: the shipped location)."""
    from safetensors.torch import save_file

    target = Path(out) if out else weights_path()
    target.parent.mkdir(parents=True, exist_ok=True)
    save_file(pretrain(), str(target))
    print(f"wrote {target} sha256 {file_sha256(target)}")


if __name__ == "__main__":
    import sys

    main(*sys.argv[1:])
