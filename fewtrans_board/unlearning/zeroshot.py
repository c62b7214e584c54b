"""Zero-shot accuracy of a CLIP backbone on a labelled split, kept per image for CIs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fewtrans_board.unlearning.data import LabeledSplit

if TYPE_CHECKING:
    import numpy as np
    import torch

    from fewtrans_board.api.backbone import Backbone


@dataclass(frozen=True)
class ZeroShotResult:
    """Per-image correctness of zero-shot predictions.

    Attributes:
        dataset: the dataset name.
        partition: the split.
        correct: 1.0 where the top-1 class is right, per image.
        chance: ``1 / number of classes``.
    """

    dataset: str
    partition: str
    correct: np.ndarray
    chance: float

    @property
    def accuracy(self) -> float:
        """Accuracy in percent."""
        return float(self.correct.mean() * 100.0)

    def summary(self) -> dict[str, Any]:
        """Mean ± 95% CI (percent), count and chance level."""
        from fewtrans_board.stats.intervals import mean_ci

        return {
            "dataset": self.dataset,
            "partition": self.partition,
            **mean_ci(self.correct * 100.0).to_dict(),
            "chance": self.chance * 100.0,
        }


def text_classifier(backbone: Backbone, split: LabeledSplit) -> torch.Tensor:
    """Normalised text features ``[C, D]`` of the split's classes under its template."""
    import torch
    import torch.nn.functional as F

    assert backbone.text is not None
    with torch.no_grad():
        tokens = backbone.text.tokenize([split.template.format(n) for n in split.class_names])
        return F.normalize(backbone.text.encode(tokens).float(), dim=-1)


def zero_shot(backbone: Backbone, split: LabeledSplit, batch_size: int = 256) -> ZeroShotResult:
    """Top-1 zero-shot correctness of every image of ``split``."""
    import numpy as np
    import torch.nn.functional as F

    classifier = text_classifier(backbone, split)
    hits = []
    for pixels, labels in split.batches(batch_size):
        images = F.normalize(backbone.embed(pixels).float(), dim=-1)
        predicted = (images @ classifier.t()).argmax(dim=1).cpu()
        hits.append((predicted == labels).numpy())
    correct = np.concatenate(hits).astype(np.float64) if hits else np.zeros(0)
    return ZeroShotResult(split.name, split.partition, correct, 1.0 / len(split.class_names))
