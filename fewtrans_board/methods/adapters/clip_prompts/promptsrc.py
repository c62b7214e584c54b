"""PromptSRC: IVLP prompts regularised towards frozen CLIP, with Gaussian prompt aggregation.

Loss: cross-entropy + ``text_weight * L1(norm prompted text, norm frozen ensemble text)``
+ ``image_weight * L1(norm prompted image, norm frozen image)`` + ``KL(frozen zero-shot
logits || prompted logits)`` (summed over classes, divided by batch x classes, T = 1). The
frozen text targets average CLIP's text features over open_clip's 80 OpenAI ImageNet
templates (textual diversity). At the end of every epoch the prompts are accumulated with
Gaussian weights over epochs (GPA); the weighted average is what predicts. GPA's mean and
std are fractions of the epoch count (paper (b)'s few-shot setting: 45 and 5 of 50 epochs),
so the HPE epoch axis scales them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fewtrans_board.api.adapter import hparam
from fewtrans_board.api.recipe import Recipe
from fewtrans_board.blocks.clip_common import DASSL_RECIPE_NOTE, DASSL_SGD, INDUCTIVE_CLIP_CODE
from fewtrans_board.blocks.training import normalized, upcast
from fewtrans_board.methods.adapters.clip_prompts.ivlp import IvlpAdapter, IvlpSession

if TYPE_CHECKING:
    import numpy as np
    import torch

    from fewtrans_board.api.backbone import Backbone
    from fewtrans_board.api.episode_data import SupportSet


def gpa_weights(epochs: int, mean: float, std: float) -> list[float]:
    """Normalised Gaussian weights of epochs ``1..epochs`` (mean/std as fractions of ``epochs``)."""
    mu, sigma = mean * epochs, max(std * epochs, 1e-6)
    raw = [math.exp(-0.5 * ((e - mu) / sigma) ** 2) for e in range(1, epochs + 1)]
    total = sum(raw)
    if not total > 0:  # all mass far outside 1..epochs: fall back to the nearest epoch
        nearest = min(max(round(mu), 1), epochs)
        return [1.0 if e == nearest else 0.0 for e in range(1, epochs + 1)]
    return [w / total for w in raw]


def ensemble_text_features(backbone: Backbone, class_names: Sequence[str]) -> torch.Tensor:
    """Normalised mean of unnormalised text features over the 80 OpenAI ImageNet templates."""
    import torch
    import torch.nn.functional as F
    from open_clip.zero_shot_metadata import OPENAI_IMAGENET_TEMPLATES

    assert backbone.text is not None
    total = None
    with torch.no_grad():
        for template in OPENAI_IMAGENET_TEMPLATES:
            tokens = backbone.text.tokenize([template(n) for n in class_names])
            features = upcast(backbone.text.encode(tokens))
            total = features if total is None else total + features
    assert total is not None
    return F.normalize(total / len(OPENAI_IMAGENET_TEMPLATES), dim=-1)


class PromptSrcSession(IvlpSession):
    """IVLP prompts plus the self-regulating targets and the GPA accumulator."""

    batchable = False
    not_batchable_reason = "PromptSRC's loss accumulates the prompts of each epoch (GPA)"

    def __init__(
        self,
        backbone: Backbone,
        support: SupportSet,
        class_names: Sequence[str],
        *,
        config: Any,
        **kwargs: Any,
    ) -> None:
        import torch.nn.functional as F

        super().__init__(backbone, support, class_names, **kwargs)
        frozen = upcast(support.images.features(backbone))
        self.frozen_images = F.normalize(frozen, dim=-1).to(self.device)
        n_support = len(support)
        self.targets = ensemble_text_features(self.backbone, self.class_names).to(self.device)
        self.weights = (config.text_weight, config.image_weight)
        self.steps_per_epoch = max(1, math.ceil(n_support / config.batch_size))
        self.gpa = gpa_weights(config.epochs, config.gpa_mean, config.gpa_std)
        self.average: dict[str, torch.Tensor] = {}
        self.step = 0

    def accumulate(self, epoch: int) -> None:
        """Add the current prompts with epoch ``epoch``'s weight (1-based)."""
        weight = self.gpa[epoch - 1]
        for name, tensor in self.named_trainable.items():
            value = tensor.detach() * weight
            self.average[name] = self.average[name] + value if name in self.average else value

    def finish(self) -> None:
        """Accumulate the last epoch and load the Gaussian-weighted prompts."""
        import torch

        if not self.gpa:
            return
        self.accumulate(len(self.gpa))
        with torch.no_grad():
            for name, tensor in self.named_trainable.items():
                tensor.copy_(self.average[name])

    def loss(self, batch: np.ndarray) -> torch.Tensor:
        """CE + L1 text and image consistency + KL to frozen zero-shot logits."""
        import torch
        import torch.nn.functional as F

        from fewtrans_board.blocks.training import autocast

        if self.step and self.step % self.steps_per_epoch == 0:
            self.accumulate(self.step // self.steps_per_epoch)
        self.step += 1
        index = torch.as_tensor(batch, device=self.device)
        with autocast(self.device):
            prompted = self.model.visual(self.pixels[index])
        images = normalized(prompted)
        texts = F.normalize(self.text_features(self.class_names), dim=-1)
        logits = self.logit_scale * images @ texts.t()
        frozen = self.frozen_images[index]
        zero_shot = self.logit_scale * frozen @ self.targets.t()
        kl = (
            F.kl_div(
                F.log_softmax(logits, dim=1),
                F.log_softmax(zero_shot, dim=1),
                reduction="sum",
                log_target=True,
            )
            / logits.numel()
        )
        text_weight, image_weight = self.weights
        total: torch.Tensor = (
            F.cross_entropy(logits, self.labels[index])
            + text_weight * F.l1_loss(texts, self.targets)
            + image_weight * F.l1_loss(images, frozen)
            + kl
        )
        return total


class PromptSrcAdapter(IvlpAdapter):
    """PromptSRC: self-regulated IVLP prompts with Gaussian prompt aggregation."""

    name = "promptsrc"
    description = (
        "PromptSRC: IVLP prompts + L1/KL consistency with frozen CLIP + Gaussian epoch averaging."
    )
    paper = (
        "Khattak et al., Self-regulating Prompts: Foundational Model Adaptation without "
        "Forgetting (PromptSRC), ICCV 2023"
    )
    code = "https://github.com/muzairkhattak/PromptSRC"
    trains = "deep text + image prompts (IVLP, 4 + 4, depth 9), Gaussian-averaged over epochs"
    recipes = (
        Recipe(
            name="inductive-clip",
            source=(
                f"{INDUCTIVE_CLIP_CODE}: FSL/run_promptsrc.sh (config vit_b16); "
                "FSL/configs/trainers/PromptSRC/vit_b16.yaml (TRAINER.PROMPTSRC.N_CTX_VISION "
                "4, N_CTX_TEXT 4, CTX_INIT 'a photo of a', PROMPT_DEPTH_VISION 9, "
                "PROMPT_DEPTH_TEXT 9, TEXT_LOSS_WEIGHT 25, IMAGE_LOSS_WEIGHT 10, GPA_MEAN 45, "
                "GPA_STD 5); FSL/trainers/promptsrc.py; FSL/trainers/imagenet_templates.py; "
                "models_prograddassl/Dassl.pytorch/dassl/config/defaults.py (OPTIM.MOMENTUM "
                "0.9, OPTIM.WEIGHT_DECAY 5e-4) and dassl/optim/lr_scheduler.py"
            ),
            values={
                **DASSL_SGD,
                "lr": 0.0025,
                "epochs": 50,
                "batch_size": 4,
                "n_ctx_text": 4,
                "n_ctx_vision": 4,
                "depth": 9,
                "ctx_init": "a photo of a",
                "text_weight": 25.0,
                "image_weight": 10.0,
                "gpa_mean": 0.9,
                "gpa_std": 0.1,
            },
            notes=(
                "GPA's mean and std are fractions of the epochs here: 45/50 and 5/50. The "
                "yaml marks 45/5 for StanfordCars, Flowers, Aircraft, DTD and EuroSAT (30/30, "
                "for the others, is commented out), so the paper's runs use it everywhere. "
                "The frozen text targets average the 80 templates of "
                "FSL/trainers/imagenet_templates.py (open_clip's OPENAI_IMAGENET_TEMPLATES, "
                "the same list), no dataset template, so no template is set. " + DASSL_RECIPE_NOTE
            ),
        ),
    )

    @dataclass(frozen=True)
    class Config(IvlpAdapter.Config):
        """PromptSRC options (paper (b)'s few-shot config)."""

        text_weight: float = hparam(25.0, "Weight of the L1 text consistency.", min=0)
        image_weight: float = hparam(10.0, "Weight of the L1 image consistency.", min=0)
        gpa_mean: float = hparam(
            0.9,
            "Mean of the Gaussian over epochs, as a fraction of epochs (45 of 50).",
            min=0,
            max=1,
        )
        gpa_std: float = hparam(
            0.1, "Std of the Gaussian over epochs, as a fraction (5 of 50).", above=0
        )

    def session(
        self, backbone: Backbone, support: SupportSet, class_names: Sequence[str], config: Any
    ) -> PromptSrcSession:
        """Build the PromptSRC session."""
        return PromptSrcSession(
            backbone,
            support,
            class_names,
            n_ctx=config.n_ctx_text,
            ctx_init=config.ctx_init,
            method=self.name,
            n_ctx_vision=config.n_ctx_vision,
            depth=config.depth,
            config=config,
        )
