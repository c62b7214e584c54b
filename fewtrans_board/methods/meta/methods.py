"""The meta-learning methods of BSCD-FSL Table 1: heads, losses and what each learns.

Each method defines the head parameters it learns besides the encoder and the loss of one
training episode. The defaults follow the papers and their reference code (CloserLookFewShot,
MetaOptNet); the simplified variants this package shipped first are kept under their own
names and say so in their ``title``:

============================  ==================================================================
``protonet``                  prototypes, negative squared Euclidean distance
``matchingnet``               full-context embeddings (bi-LSTM ``g``, attention-LSTM ``f``), NLL
``matchingnet-nofce``         simplification: cosine attention on raw features, no FCE
``relationnet``               conv relation module on feature maps (2 conv blocks + 2 FC), MSE
``relationnet-mlp``           simplification: MLP relation module on pooled features
``metaopt``                   differentiable Crammer-Singer SVM (C = 0.1), learnable scale
``metaopt-ridge``             simplification: closed-form ridge regression (lambda 50)
``maml``                      first-order MAML, meta-learned linear head (CloserLook)
``proto-maml``                first-order Proto-MAML (Triantafillou et al.): prototype-init head
============================  ==================================================================

MAML's inner loop is in :mod:`.maml` (it needs per-task copies).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

CLOSERLOOK = "https://github.com/wyharveychen/CloserLookFewShot"
METAOPTNET = "https://github.com/kjunelee/MetaOptNet"
METHODS_REVISION = 2
"""Checkpoints record it; revision-1 checkpoints (no record) name the simplified variants by
their old names, see :data:`LEGACY_NAMES`."""
LEGACY_NAMES = {
    "matchingnet": "matchingnet-nofce",
    "relationnet": "relationnet-mlp",
    "metaopt": "metaopt-ridge",
    "maml": "proto-maml",
}
"""What a revision-1 checkpoint's method name means today."""


@dataclass(frozen=True)
class MetaMethod:
    """One meta-learner.

    Attributes:
        name: the method (and its test-time adapter) name.
        title: the row name in BSCD-FSL Table 1 (with the variant for simplified ones).
        paper: the method's paper, and which variant this is.
        code: the reference implementation the variant follows.
        fwt: whether BSCD-FSL reports a "+FWT" variant (meta-train accepts ``--fwt``).
        maps: the head compares feature maps ``[N, C, H, W]``, not pooled features.
        inner_loop: MAML-style: adapts a copy of the encoder per task (no closed-form head).
        learned: the head has modules that only meta-training fits (without a checkpoint
            of the method they run freshly initialised, and the adapters record so).
    """

    name: str
    title: str
    paper: str
    code: str
    fwt: bool
    maps: bool = False
    inner_loop: bool = False
    learned: bool = False

    def init_head(
        self, dim: int, n_way: int = 5, map_shape: tuple[int, int, int] | None = None
    ) -> dict[str, torch.Tensor]:
        """The learned head tensors at the start of meta-training (torch's global RNG).

        Args:
            dim: pooled feature size.
            n_way: classes per training episode (MAML's linear head has one row each).
            map_shape: ``(C, H, W)`` of the feature maps (``relationnet``).
        """
        import torch

        from fewtrans_board.methods.meta import heads

        if self.name == "relationnet":
            if map_shape is None:
                raise ValueError("relationnet needs the feature-map shape")
            return heads.relation_conv_init(map_shape)
        if self.name == "relationnet-mlp":
            module = heads.make_relation_module(dim)
            return {k: v.detach().clone() for k, v in module.state_dict().items()}
        if self.name == "matchingnet":
            return heads.fce_init(dim)
        if self.name in ("metaopt", "metaopt-ridge"):
            return {"scale": torch.ones(1)}
        if self.name == "maml":  # CloserLook: Linear(D, n_way) with PyTorch's init, bias 0
            linear = torch.nn.Linear(dim, n_way)
            return {"weight": linear.weight.detach().clone(), "bias": torch.zeros(n_way)}
        return {}

    def logits(
        self,
        head: dict[str, torch.Tensor],
        support: torch.Tensor,
        labels: torch.Tensor,
        query: torch.Tensor,
        n_way: int,
        training: bool = False,
    ) -> torch.Tensor:
        """Query scores from support features (higher is more likely); not for MAML.

        ``training``: meta-training's forward (RelationNet's BatchNorm uses batch statistics).
        """
        from fewtrans_board.methods.meta import heads
        from fewtrans_board.methods.meta.svm import svm_logits

        if self.name == "protonet":
            return heads.protonet_logits(support, labels, query, n_way)
        if self.name == "matchingnet":
            return heads.matching_fce_logits(head, support, labels, query, n_way)
        if self.name == "matchingnet-nofce":
            return heads.matching_logits(support, labels, query, n_way)
        if self.name == "relationnet":
            return heads.relation_conv_scores(head, support, labels, query, n_way, training)
        if self.name == "relationnet-mlp":
            return heads.relation_scores(head, support, labels, query, n_way)
        if self.name == "metaopt":
            return svm_logits(support, labels, query, n_way, head["scale"])
        if self.name == "metaopt-ridge":
            return heads.ridge_logits(support, labels, query, n_way, head["scale"])
        raise ValueError(f"{self.name} has no closed-form episode head")

    def loss(
        self,
        head: dict[str, torch.Tensor],
        support: torch.Tensor,
        labels: torch.Tensor,
        query: torch.Tensor,
        query_labels: torch.Tensor,
        n_way: int,
    ) -> torch.Tensor:
        """The episode loss: cross-entropy, NLL (MatchingNet) or MSE to one-hot (RelationNet)."""
        import torch.nn.functional as F

        from fewtrans_board.methods.meta.heads import one_hot

        scores = self.logits(head, support, labels, query, n_way, training=True)
        if self.name.startswith("relationnet"):
            return F.mse_loss(scores, one_hot(query_labels, n_way, scores))
        if self.name.startswith("matchingnet"):
            return F.nll_loss(scores, query_labels)
        return F.cross_entropy(scores, query_labels)


PROTONET_PAPER = "Snell et al., Prototypical Networks for Few-shot Learning, NeurIPS 2017"
MATCHING_PAPER = "Vinyals et al., Matching Networks for One Shot Learning, NeurIPS 2016"
RELATION_PAPER = (
    "Sung et al., Learning to Compare: Relation Network for Few-Shot Learning, CVPR 2018"
)
METAOPT_PAPER = "Lee et al., Meta-Learning with Differentiable Convex Optimization, CVPR 2019"
MAML_PAPER = "Finn et al., Model-Agnostic Meta-Learning, ICML 2017"

METHODS: dict[str, MetaMethod] = {
    m.name: m
    for m in (
        MetaMethod(
            "protonet",
            "ProtoNet",
            PROTONET_PAPER,
            "https://github.com/IBM/cdfsl-benchmark/blob/master/methods/protonet.py",
            fwt=True,
        ),
        MetaMethod(
            "matchingnet",
            "MatchingNet",
            MATCHING_PAPER + " (full-context embeddings, as CloserLook)",
            CLOSERLOOK,
            fwt=True,
            learned=True,
        ),
        MetaMethod(
            "matchingnet-nofce",
            "MatchingNet (no FCE)",
            MATCHING_PAPER + " (simplified: no full-context embeddings)",
            CLOSERLOOK,
            fwt=True,
        ),
        MetaMethod(
            "relationnet",
            "RelationNet",
            RELATION_PAPER + " (conv relation module on feature maps, as CloserLook)",
            CLOSERLOOK,
            fwt=True,
            maps=True,
            learned=True,
        ),
        MetaMethod(
            "relationnet-mlp",
            "RelationNet (MLP on pooled features)",
            RELATION_PAPER + " (simplified: MLP relation module on pooled features)",
            CLOSERLOOK,
            fwt=True,
            learned=True,
        ),
        MetaMethod(
            "metaopt",
            "MetaOpt",
            METAOPT_PAPER + " (Crammer-Singer SVM head, C 0.1)",
            METAOPTNET,
            fwt=False,
        ),
        MetaMethod(
            "metaopt-ridge",
            "MetaOpt (ridge head)",
            METAOPT_PAPER + " (simplified: closed-form ridge head)",
            METAOPTNET,
            fwt=False,
        ),
        MetaMethod(
            "maml",
            "MAML",
            MAML_PAPER + " (first-order, meta-learned linear head, as CloserLook)",
            CLOSERLOOK,
            fwt=False,
            inner_loop=True,
        ),
        MetaMethod(
            "proto-maml",
            "Proto-MAML",
            "Triantafillou et al., Meta-Dataset, ICLR 2020 (first-order Proto-MAML: "
            + MAML_PAPER
            + " with a prototype-initialised head)",
            CLOSERLOOK,
            fwt=False,
            inner_loop=True,
        ),
    )
}
