"""Train the demo dual encoders contrastively on the digits (the retrain script).

``python -m fewtrans_board.methods.trained.demo_clip_train [OUT_DIR]`` rewrites both shipped
checkpoints (default: the package's weights folder) and prints their sha256.

The recipe follows the inductive-CLIP paper's oracle training at digit scale: every
contrastive batch holds one image of each trained class (so no two texts of a batch
describe the same class), each paired with a caption drawn at random from
:data:`TEMPLATES`; symmetric cross-entropy over ``logit_scale * cos`` with a learned
temperature. Images are the train halves of ``digits-0-4``/``digits-5-9`` at 32 px with
the FewTrans evaluation transform, shifted by up to two pixels. Training is seeded and
runs single-threaded with deterministic algorithms, so one machine reproduces its bytes;
other CPUs agree within float tolerance, which the tests check through accuracy.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fewtrans_board.api.backbone import Preprocessing
from fewtrans_board.datasets.digits import NAMES
from fewtrans_board.methods.trained.demo_clip import CHECKPOINTS, IMAGE_SIZE, TRAINED_DIGITS

if TYPE_CHECKING:
    import torch

TEMPLATES = (
    "a photo of a {}.",
    "a photo of the digit {}.",
    "a handwritten {}.",
    "the number {}.",
    "a drawing of the digit {}.",
    "a low resolution scan of a {}.",
    "{}.",
)
"""Training captions; "a photo of a {}." is the template CLIP adapters use."""

SEED = 0
STEPS = 600
GROUPS = 4
"""Unique-class batches per optimiser step (their losses are averaged)."""
LEARNING_RATE = 5e-4
MAX_SHIFT = 2


def train_split_pixels(digits: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Preprocessed train-half pixels ``[N, 3, 32, 32]`` and digit labels of ``digits``."""
    import torch

    from fewtrans_board.datasets.digits_subsets import digits_subset

    prep = Preprocessing.fewtrans(IMAGE_SIZE)
    pixels, labels = [], []
    for start in range(0, len(digits), 5):
        block = digits[start : start + 5]
        spec = digits_subset(block, "")
        for label, items in zip(block, spec.list_items(None, "train"), strict=True):
            for item in items:
                pixels.append(prep.apply(spec.reader.load_image(None, item)))
                labels.append(label)
    return torch.stack(pixels), torch.tensor(labels)


def _shift(pixels: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    import torch

    dx, dy = (int(v) for v in torch.randint(-MAX_SHIFT, MAX_SHIFT + 1, (2,), generator=generator))
    background = pixels[:, :, :1, :1]  # black after normalisation
    shifted = torch.roll(pixels, shifts=(dy, dx), dims=(2, 3))
    if dy > 0:
        shifted[:, :, :dy] = background
    elif dy < 0:
        shifted[:, :, dy:] = background
    if dx > 0:
        shifted[:, :, :, :dx] = background
    elif dx < 0:
        shifted[:, :, :, dx:] = background
    return shifted


def train(digits: Sequence[int], seed: int = SEED, steps: int = STEPS) -> dict[str, torch.Tensor]:
    """Train the dual encoder on the train halves of ``digits``.

    Returns:
        The state dict (CPU tensors).
    """
    import torch
    import torch.nn.functional as F

    from fewtrans_board.methods.trained.demo_clip import WordTokenizer, build_demo_clip

    digits = tuple(digits)
    torch.use_deterministic_algorithms(True)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        torch.manual_seed(seed)
        tokenizer = WordTokenizer()
        model: Any = build_demo_clip(tokenizer).train()
        pixels, labels = train_split_pixels(digits)
        by_class = [torch.nonzero(labels == d).flatten() for d in digits]
        captions = tokenizer([t.format(NAMES[d]) for d in digits for t in TEMPLATES])
        captions = captions.view(len(digits), len(TEMPLATES), -1)
        optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, weight_decay=0.05)
        generator = torch.Generator().manual_seed(seed)
        targets = torch.arange(len(digits))
        for step in range(steps):
            for group in optimizer.param_groups:
                group["lr"] = (
                    LEARNING_RATE
                    * 0.5
                    * (1 + torch.cos(torch.tensor(step / steps * 3.14159265)).item())
                )
            picks = torch.stack(
                [idx[torch.randint(len(idx), (GROUPS,), generator=generator)] for idx in by_class],
                dim=1,
            )  # [GROUPS, classes]
            images = _shift(pixels[picks.flatten()], generator)
            template = torch.randint(len(TEMPLATES), (GROUPS, len(digits)), generator=generator)
            texts = captions[targets.expand(GROUPS, -1).flatten(), template.flatten()]
            image_f = F.normalize(model.encode_image(images), dim=-1).view(GROUPS, len(digits), -1)
            text_f = F.normalize(model.encode_text(texts), dim=-1).view(GROUPS, len(digits), -1)
            scale = model.logit_scale.exp().clamp(max=100.0)
            logits = scale * image_f @ text_f.transpose(1, 2)  # [GROUPS, C, C]
            loss = 0.5 * (
                F.cross_entropy(logits.flatten(0, 1), targets.repeat(GROUPS))
                + F.cross_entropy(logits.transpose(1, 2).flatten(0, 1), targets.repeat(GROUPS))
            )
            optimizer.zero_grad()
            loss.backward()  # type: ignore[no-untyped-call]
            optimizer.step()
        return {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(False)


def main(out_dir: str | None = None) -> None:
    """Train both checkpoints and write them as safetensors (default: the shipped folder)."""
    from safetensors.torch import save_file

    from fewtrans_board.methods.trained.demo_clip import weights_path
    from fewtrans_board.models.weights import file_sha256

    for name, filename in CHECKPOINTS.items():
        target = Path(out_dir) / filename if out_dir else weights_path(name)
        target.parent.mkdir(parents=True, exist_ok=True)
        save_file(train(TRAINED_DIGITS[name]), str(target))
        print(f"wrote {target} sha256 {file_sha256(target)}")


if __name__ == "__main__":
    import sys

    main(*sys.argv[1:])
