"""Fine-tuning baselines: full fine-tune, last-k fine-tune and transductive fine-tune."""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from fewtrans_board.api.adapter import AdapterConfig, hparam
from fewtrans_board.api.recipe import Recipe
from fewtrans_board.blocks.lockstep import PlannedAdapter, TrainingPlan
from fewtrans_board.blocks.training import BSCD_HEAD, EncoderTrainingConfig
from fewtrans_board.core.errors import FewtransError

if TYPE_CHECKING:
    import torch
    from torch import nn

    from fewtrans_board.api.backbone import Backbone
    from fewtrans_board.api.episode_data import ImageSet, SupportSet

# Modules that come after the block stack in timm / open_clip / the demo CNN.
POST_BLOCK_MODULES = ("norm", "fc_norm", "ln_post", "proj", "attn_pool", "head", "head_drop")


def block_list(module: nn.Module) -> list[nn.Module]:
    """The residual blocks / stages of a backbone, in forward order.

    Recognises timm ViTs (``blocks``), stage-based nets (``stages``), torchvision/timm
    ResNets (``layer1``..``layer4``) and open_clip towers (``transformer.resblocks``).

    Raises:
        FewtransError: no known block structure.
    """
    for path in ("blocks", "stages", "transformer.resblocks"):
        found: Any = module
        for part in path.split("."):
            found = getattr(found, part, None)
        if found is not None:
            return list(found)
    layers = [getattr(module, f"layer{i}") for i in range(1, 5) if hasattr(module, f"layer{i}")]
    if layers:
        return layers
    raise FewtransError(
        f"cannot find the blocks of {type(module).__name__} for last-k fine-tuning "
        "(expected .blocks, .stages, .layer1-4 or .transformer.resblocks)"
    )


def last_k_parameters(module: nn.Module, k: int) -> list[torch.Tensor]:
    """Parameters of the last ``k`` blocks plus the modules after the block stack."""
    params: list[torch.Tensor] = [
        p for block in block_list(module)[-k:] for p in block.parameters()
    ]
    for name in POST_BLOCK_MODULES:
        child = getattr(module, name, None)
        if child is None:
            continue
        if hasattr(child, "parameters"):
            params.extend(child.parameters())
        elif getattr(child, "requires_grad", False):
            params.append(child)
    return params


@dataclass(eq=False)
class FinetunePredictor:
    """Runs query pixels through the fine-tuned encoder (eval mode) and head."""

    encoder: nn.Module
    head: nn.Module
    device: str
    transductive: bool
    normalize: bool = True

    def predict(self, query: ImageSet) -> torch.Tensor:
        """Logits of the query images (query BN statistics when transductive)."""
        import torch

        from fewtrans_board.blocks.training import autocast, normalized, upcast

        self.encoder.eval()
        if self.transductive:
            for m in self.encoder.modules():
                if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
                    m.train()  # normalise with the statistics of the whole query batch
        with torch.no_grad(), autocast(self.device):
            features = self.encoder(query.pixels.to(self.device))
        features = normalized(features) if self.normalize else upcast(features)
        return self.head(features)  # type: ignore[no-any-return]


BSCD_SOURCE = (
    "IBM/cdfsl-benchmark finetune.py (Classifier = nn.Linear(final_feat_dim, n_way) on the raw "
    "features; classifier_opt = SGD(lr 0.01, momentum 0.9, dampening 0.9, weight_decay "
    "0.001); delta_opt = SGD(backbone, lr 0.01); total_epoch 100; batch_size 4; "
    "np.random.permutation per epoch; pretrained_model.train() while fitting, eval() for "
    "the queries); Guo et al., BSCD-FSL, ECCV 2020, §5.2.1 and §6 (SGD with momentum, lr "
    "0.01, momentum 0.9, 100 epochs)"
)
"""Where every value of the ``bscd`` recipes of the fine-tuning baselines comes from."""

BSCD_FINETUNE = {
    **BSCD_HEAD,
    "lr_backbone": 0.01,
    "backbone_optimizer": "sgd",
    "backbone_train_mode": True,
}
"""BSCD-FSL's fine-tuning: the classifier's SGD plus ``delta_opt`` (plain SGD, lr 0.01) on the
backbone in train mode."""

BSCD_NOTES = (
    "Support batches follow the toolkit's RandomState(11) permutation per epoch (finetune.py "
    "draws them from the global NumPy stream seeded once with 10), chunked as finetune.py "
    "does (the last batch of an epoch is smaller when 4 does not divide the support size). "
    "finetune.py trains a ResNet-10 pretrained on miniImageNet at 224 px; the recipe runs on "
    "whatever backbone the submission names. In train mode BatchNorm needs more than one "
    "value per channel: a last batch of one image fails where the final feature map is 1x1."
)


@dataclass(frozen=True)
class _FinetuneFields(AdapterConfig):
    """Fine-tuning hyperparameters; defaults are FewTrans's CLIP ViT-B/16 centre."""

    lr_backbone: float = hparam(1e-5, "Learning rate of the backbone.", hpe="lr")
    lr_head: float = hparam(2e-3, "Learning rate of the linear head.", hpe="lr")
    epochs: int = hparam(70, "Passes over the support set.", hpe="epochs")
    batch_size: int = hparam(64, "Optimiser batch size.", min=1)


@dataclass(frozen=True)
class _LastKFields(_FinetuneFields):
    """Last-k fine-tuning hyperparameters."""

    k: int = hparam(1, "Number of final blocks (stages) that train.", min=1)


class FinetuneAdapter(PlannedAdapter):
    """FewTrans full fine-tuning: every backbone parameter and the head train."""

    name = "finetune"
    trains = "all backbone parameters + linear head"
    description = (
        "Full fine-tuning, FewTrans recipe (Adam on backbone and head, cosine, eval mode)."
    )
    paper = "Luo et al., FewTrans (arXiv:2603.00478), mode 'finetune'"
    code = "https://github.com/Frankluox/FewTrans"
    transductive = False

    recipes: ClassVar[tuple[Recipe, ...]] = (
        Recipe(
            name="bscd",
            source=BSCD_SOURCE + "; Table 2 'Ft All'",
            values=BSCD_FINETUNE,
            notes=BSCD_NOTES,
        ),
    )

    @dataclass(frozen=True)
    class Config(EncoderTrainingConfig, _FinetuneFields):
        """Fine-tuning hyperparameters; defaults are FewTrans's CLIP ViT-B/16 centre and recipe."""

    def trainable(self, encoder: nn.Module, config: Any) -> list[torch.Tensor]:
        """Backbone parameters that receive gradients (all of them here)."""
        return list(encoder.parameters())

    def copy_encoder(self, backbone: Backbone, config: Any) -> tuple[nn.Module, list[torch.Tensor]]:
        """Deep-copy the image encoder (eval mode) and freeze all but :meth:`trainable`.

        The copy is the adapter's own: training it (BatchNorm running statistics included,
        when ``backbone_train_mode`` is on) never touches the caller's backbone.

        Args:
            backbone: the caller's backbone (never modified).
            config: an instance of ``Config``.

        Returns:
            The copy and its trainable parameters.
        """
        from fewtrans_board.blocks.training import train_only

        encoder = copy.deepcopy(backbone.image_encoder).to(backbone.device).eval()
        return encoder, train_only(encoder.parameters(), self.trainable(encoder, config))

    def plan(
        self, backbone: Backbone, support: SupportSet, class_names: Sequence[str], config: Any
    ) -> TrainingPlan:
        """Fine-tune a deep copy of the image encoder with a new head."""
        import torch.nn.functional as F

        from fewtrans_board.blocks.training import make_head

        encoder, trainable = self.copy_encoder(backbone, config)
        init = getattr(config, "head_init", "fewtrans")
        head = make_head(backbone.feature_dim, support.n_way, backbone.device, init)

        def head_loss(features: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
            return F.cross_entropy(head(features), labels)

        device, transductive = backbone.device, self.transductive
        normalize = bool(getattr(config, "normalize_features", True))
        return encoder_plan(
            encoder,
            trainable,
            head,
            head_loss,
            support,
            config,
            device,
            lambda: FinetunePredictor(encoder, head, device, transductive, normalize),
        )


def encoder_plan(
    encoder: nn.Module,
    trainable: Sequence[torch.Tensor],
    head: nn.Module,
    head_loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    support: SupportSet,
    config: Any,
    device: str,
    finish: Callable[[], Any],
) -> TrainingPlan:
    """The plan of training an encoder copy and its head on the support set.

    The FewTrans recipe by default: bf16 autocast on CUDA, L2-normalised features, one Adam
    for the encoder's ``trainable`` (``config.lr_backbone``) and one for the head's
    parameters (``config.lr_head``), per-step cosine decay, ``RandomState(11)`` support
    order, the encoder in eval mode. The fields of
    :class:`~fewtrans_board.blocks.training.EncoderTrainingConfig`, where the config has
    them, change this: the optimiser and schedule (``optimizer``, ``momentum``,
    ``dampening``, ``weight_decay``, ``schedule``...), the backbone's own optimiser
    (``backbone_optimizer``), raw features (``normalize_features``) and train mode for the
    encoder while it fits (``backbone_train_mode``: BatchNorm statistics move with each
    configuration's batches, so such plans train one configuration at a time).

    Args:
        encoder: the adapter's copy of the image encoder, in eval mode.
        trainable: the encoder parameters that train (the others are already frozen).
        head: the classifier whose parameters train alongside.
        head_loss: ``(features, labels) -> loss`` through ``head``.
        support: the labeled support set.
        config: a config with ``lr_backbone``, ``lr_head``, ``epochs`` and ``batch_size``.
        device: torch device.
        finish: builds the predictor once trained.
    """
    from fewtrans_board.blocks.training import backbone_optimiser_of, optimiser_of, schedule_of

    _check_head_init(head, config)
    loss_of, n_items = _support_loss(encoder, head_loss, support, config, device)
    optimiser, backbone_optimiser = optimiser_of(config), backbone_optimiser_of(config)
    train_mode = bool(getattr(config, "backbone_train_mode", False))
    return TrainingPlan(
        groups=[(list(trainable), config.lr_backbone), (list(head.parameters()), config.lr_head)],
        loss=loss_of,
        finish=finish,
        n_items=n_items,
        batch_size=config.batch_size,
        epochs=config.epochs,
        modules=[encoder, head],
        train_modules=[encoder] if train_mode else [],
        batchable=not train_mode,
        reason=(
            "the backbone fits in train mode: BatchNorm statistics move with each "
            "configuration's batches"
            if train_mode
            else ""
        ),
        optimiser=optimiser,
        schedule=schedule_of(config),
        group_optimisers=(
            None if backbone_optimiser == optimiser else [backbone_optimiser, optimiser]
        ),
    )


def _check_head_init(head: nn.Module, config: Any) -> None:
    """A ``head_init`` other than FewTrans's initialises a linear head only."""
    import torch

    if getattr(config, "head_init", "fewtrans") != "fewtrans" and not isinstance(
        head, torch.nn.Linear
    ):
        raise FewtransError(
            f"head_init={config.head_init!r} initialises a linear head; this method trains a "
            f"{type(head).__name__}"
        )


def _support_loss(
    encoder: nn.Module,
    head_loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    support: SupportSet,
    config: Any,
    device: str,
) -> tuple[Callable[[Any], torch.Tensor], int]:
    """The loss of a batch of support indices, and the number of support items.

    The support set moves to ``device`` once, here; each batch indexes it there.
    """
    import torch

    from fewtrans_board.blocks.training import autocast, head_features

    pixels = support.images.pixels.to(device)
    labels = support.labels.to(device)

    def loss_of(batch: Any) -> torch.Tensor:
        index = torch.as_tensor(batch, device=device)
        with autocast(device):
            features = encoder(pixels[index])
        return head_loss(head_features(features, config), labels[index])

    return loss_of, len(labels)


class FinetuneLastKAdapter(FinetuneAdapter):
    """Fine-tune only the last k blocks/stages (plus the final norm/projection) and the head."""

    name = "finetune-last-k"
    trains = "last k blocks + final norm/projection + head"
    description = "Fine-tune the last k blocks and the head; earlier blocks stay frozen (BSCD-FSL)."
    paper = "Guo et al., BSCD-FSL, ECCV 2020 (fine-tune last-k)"
    code = "https://github.com/IBM/cdfsl-benchmark"

    recipes = tuple(
        Recipe(
            name="bscd" if k == 1 else f"bscd-last-{k}",
            source=BSCD_SOURCE + f"; Table 2 'Ft Last-{k}' (§5.2.1: last-1, last-2 and last-3)",
            values={**BSCD_FINETUNE, "k": k},
            notes=(
                f"k = {k}. "
                + (
                    "BSCD-FSL reports k = 1, 2 and 3 (Table 2; last-1 has the highest average, "
                    "67.41%); bscd-last-2 and bscd-last-3 run the others. "
                    if k == 1
                    else ""
                )
                + "The released code has no last-k switch: the rest of the backbone is "
                "frozen but, as the whole model is in train mode in finetune.py, its "
                "BatchNorm layers also normalise with (and update) the batch statistics. "
                + BSCD_NOTES
            ),
        )
        for k in (1, 2, 3)
    )

    @dataclass(frozen=True)
    class Config(EncoderTrainingConfig, _LastKFields):
        """Last-k fine-tuning hyperparameters."""

    def trainable(self, encoder: nn.Module, config: Any) -> list[torch.Tensor]:
        """Parameters of the last k blocks and the post-block modules."""
        return last_k_parameters(encoder, config.k)


class TransductiveFinetuneAdapter(FinetuneAdapter):
    """Full fine-tuning; at inference BatchNorm uses the statistics of the query batch."""

    name = "finetune-transductive"
    trains = "all backbone parameters + head; query-batch BN statistics"
    description = (
        "Full fine-tuning with query-batch BatchNorm statistics at inference "
        "(no effect on LayerNorm ViTs)."
    )
    paper = (
        "Dhillon et al., A Baseline for Few-Shot Image Classification, ICLR 2020 (transductive BN)"
    )
    code = "https://github.com/IBM/cdfsl-benchmark"
    transductive = True
    recipes: ClassVar[tuple[Recipe, ...]] = (
        Recipe(
            name="bscd",
            source=BSCD_SOURCE + "; Table 2 'Transductive Ft' (§5.2.1: query statistics "
            "through batch normalization, after Dhillon et al. [10])",
            values=BSCD_FINETUNE,
            notes=(
                "The released code has no transductive script: training is finetune.py's; "
                "at inference BatchNorm normalises with the query batch's statistics (§5.2.1). "
                + BSCD_NOTES
            ),
        ),
    )
