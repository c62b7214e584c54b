"""ProGrad: CoOp whose label gradient is stripped of any part opposing the zero-shot direction.

Per trainable tensor, with ``g_ce`` the cross-entropy gradient and ``g_kl`` the gradient of
``KL(zero-shot || prompted)`` (temperature ``T``): if ``g_ce . g_kl < 0`` the update is
``g_ce - lambda (g_ce . u) u`` with ``u = g_kl / |g_kl|``, else ``g_ce``. The loss a session
returns is the surrogate ``sum(p * g)`` (``g`` detached), whose gradient is exactly the
projected gradient, so the shared Adam loop applies it unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fewtrans_board.api.adapter import hparam
from fewtrans_board.api.recipe import Recipe
from fewtrans_board.blocks.clip_common import (
    DASSL_RECIPE_NOTE,
    DASSL_SGD,
    INDUCTIVE_CLIP_CODE,
    inductive_clip_templates,
)
from fewtrans_board.methods.adapters.clip_prompts.coop import CoopAdapter, CoopSession

if TYPE_CHECKING:
    import numpy as np
    import torch

    from fewtrans_board.api.backbone import Backbone
    from fewtrans_board.api.episode_data import SupportSet


def project_conflicting_gradient(
    g_ce: torch.Tensor, g_kl: torch.Tensor, strength: float = 1.0
) -> torch.Tensor:
    """ProGrad's rule for one tensor: remove the component of ``g_ce`` that opposes ``g_kl``.

    Args:
        g_ce: gradient of the label loss.
        g_kl: gradient of the zero-shot KL loss (same shape).
        strength: ``lambda``; 1 removes the opposing component entirely.

    Returns:
        ``g_ce - strength * (g_ce . u) u`` with ``u = g_kl / |g_kl|`` when ``g_ce . g_kl < 0``,
        otherwise (also when ``g_kl`` is zero) a copy of ``g_ce``.
    """
    import torch

    flat_ce, flat_kl = g_ce.flatten(), g_kl.flatten()
    norm = torch.linalg.vector_norm(flat_kl)
    if float(norm) == 0.0:
        return g_ce.clone()
    direction = flat_kl / norm
    dot = torch.dot(flat_ce, direction)
    if float(dot) >= 0.0:
        return g_ce.clone()
    projected: torch.Tensor = (flat_ce - strength * dot * direction).view_as(g_ce)
    return projected


class ProgradSession(CoopSession):
    """CoOp session with ProGrad's two gradients and projection."""

    batchable = False
    not_batchable_reason = "ProGrad's loss projects its own gradients"

    def __init__(
        self, *args: Any, strength: float, temperature: float, template: str, **kwargs: Any
    ) -> None:
        from fewtrans_board.blocks.clip_common import handcrafted_text_features

        super().__init__(*args, **kwargs)
        self.strength, self.temperature = strength, temperature
        handcrafted = handcrafted_text_features(self.backbone, self.class_names, template)
        handcrafted = handcrafted.to(self.device)
        self.zero_shot_logits = self.logit_scale * self.features @ handcrafted.t()

    def distillation(self, logits: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        """``T^2 * KL(softmax(z0 / T) || softmax(z / T))``, averaged over the batch.

        ``z0`` are the zero-shot logits of support images ``index``, ``z`` their prompted
        ``logits``. The reference uses the soft-target cross-entropy, which exceeds this by
        the teacher's entropy (a constant), so both give the same gradient.
        """
        import torch.nn.functional as F

        t = self.temperature
        kl = F.kl_div(
            F.log_softmax(logits / t, dim=-1),
            F.softmax(self.zero_shot_logits[index] / t, dim=-1),
            reduction="batchmean",
        )
        return kl * (t * t)

    def loss(self, batch: np.ndarray) -> torch.Tensor:
        """Surrogate loss whose gradient is the projected cross-entropy gradient."""
        import torch
        import torch.nn.functional as F

        index = self.index(batch)
        logits = self.logits(index)
        ce = F.cross_entropy(logits, self.labels[index])
        kl = self.distillation(logits, index)
        params = self.trainable
        g_ce = torch.autograd.grad(ce, params, retain_graph=True)
        g_kl = torch.autograd.grad(kl, params)
        surrogate = logits.new_zeros(())
        for param, a, b in zip(params, g_ce, g_kl, strict=True):
            update = project_conflicting_gradient(a, b, self.strength).detach()
            surrogate = surrogate + (param * update).sum()
        return surrogate


class ProgradAdapter(CoopAdapter):
    """ProGrad: CoOp updated only along directions that do not oppose zero-shot CLIP."""

    name = "prograd"
    description = (
        "ProGrad: CoOp with the CE gradient projected off the opposing zero-shot KL direction."
    )
    paper = "Zhu et al., Prompt-aligned Gradient for Prompt Tuning (ProGrad), ICCV 2023"
    code = "https://github.com/BeierZhu/Prompt-align"
    trains = "n_ctx shared text context vectors"
    recipes = (
        Recipe(
            name="inductive-clip",
            source=(
                f"{INDUCTIVE_CLIP_CODE}: FSL/run_prograd.sh (NCTX=16, LAMBDA=1.0, CSC=False, "
                "CTP=end; config vit_b16; Dassl.ProGrad.pytorch); "
                "FSL/configs/trainers/ProGrad/vit_b16.yaml (LOSS.T 1.0, TRAINER.COOP.CTX_INIT "
                "True); FSL/trainers/prograd.py (context from CUSTOM_TEMPLATES; "
                "CUSTOM_TEMPLATES for the zero-shot teacher); "
                "models_prograddassl/Dassl.ProGrad.pytorch/dassl/config/defaults.py "
                "(OPTIM.MOMENTUM 0.9, OPTIM.WEIGHT_DECAY 5e-4), dassl/optim/lr_scheduler.py "
                "and dassl/data/data_manager.py"
            ),
            values={
                **DASSL_SGD,
                "lr": 0.002,
                "epochs": 100,
                "batch_size": 128,
                "n_ctx": 16,
                "prograd_lambda": 1.0,
                "temperature": 1.0,
            },
            per_dataset={
                dataset: {**values, "ctx_init": values["template"].removesuffix(" {}.")}
                for dataset, values in inductive_clip_templates("prograd").items()
            },
            notes=(
                "The paper's context is 16 vectors: the last w (w = the word count of the "
                "dataset's template before ' {}.') initialised from those words' first w "
                "token embeddings, the others zeros. This CoOp context has no zero padding: "
                "ctx_init is those words, so n_ctx becomes their token count (4 for 'a "
                "photo of a') and all their tokens train (where punctuation adds a token, "
                "e.g. 'a type of flower, a photo of a', the paper keeps the last one fixed). "
                "Dassl.ProGrad.pytorch's train loader drops an epoch's last incomplete batch "
                "when the support set holds at least 128 images (drop_last); here every "
                "epoch ends with that partial batch. " + DASSL_RECIPE_NOTE
            ),
        ),
    )

    @dataclass(frozen=True)
    class Config(CoopAdapter.Config):
        """ProGrad options."""

        prograd_lambda: float = hparam(
            1.0, "Strength of the projection (1 removes the conflict).", min=0, max=1
        )
        temperature: float = hparam(1.0, "Temperature T of the KL to zero-shot CLIP.", above=0)

    def session(
        self, backbone: Backbone, support: SupportSet, class_names: Sequence[str], config: Any
    ) -> ProgradSession:
        """Build the ProGrad session."""
        return ProgradSession(
            backbone,
            support,
            class_names,
            config.n_ctx,
            config.ctx_init,
            self.name,
            strength=config.prograd_lambda,
            temperature=config.temperature,
            template=config.template,
        )
