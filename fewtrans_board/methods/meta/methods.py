"""The meta-learning methods of BSCD-FSL Table 1: heads, losses and what each learns.

Each method defines the head parameters it learns besides the encoder and the loss of one
training episode. MAML's inner loop is in :mod:`.train` (it needs per-task copies).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

CLOSERLOOK = "https://github.com/wyharveychen/CloserLookFewShot"


@dataclass(frozen=True)
class MetaMethod:
    """One meta-learner.

    Attributes:
        name: the method (and its test-time adapter) name.
        title: the row name in BSCD-FSL Table 1.
        paper: the method's paper.
        code: the reference implementation BSCD-FSL follows.
        fwt: whether BSCD-FSL reports a "+FWT" variant (meta-train accepts ``--fwt``).
    """

    name: str
    title: str
    paper: str
    code: str
    fwt: bool

    def init_head(self, dim: int) -> dict[str, torch.Tensor]:
        """The learned head parameters at the start of meta-training (torch's global RNG)."""
        import torch

        from fewtrans_board.methods.meta.heads import make_relation_module

        if self.name == "relationnet":
            module = make_relation_module(dim)
            return {
                k: torch.nn.Parameter(v.detach().clone()) for k, v in module.state_dict().items()
            }
        if self.name == "metaopt":
            return {"scale": torch.nn.Parameter(torch.ones(1))}
        return {}

    def logits(
        self,
        head: dict[str, torch.Tensor],
        support: torch.Tensor,
        labels: torch.Tensor,
        query: torch.Tensor,
        n_way: int,
    ) -> torch.Tensor:
        """Query scores from support features (higher is more likely); not for MAML."""
        from fewtrans_board.methods.meta import heads

        if self.name == "protonet":
            return heads.protonet_logits(support, labels, query, n_way)
        if self.name == "matchingnet":
            return heads.matching_logits(support, labels, query, n_way)
        if self.name == "relationnet":
            return heads.relation_scores(head, support, labels, query, n_way)
        if self.name == "metaopt":
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

        scores = self.logits(head, support, labels, query, n_way)
        if self.name == "relationnet":
            return F.mse_loss(scores, one_hot(query_labels, n_way))
        if self.name == "matchingnet":
            return F.nll_loss(scores, query_labels)
        return F.cross_entropy(scores, query_labels)


METHODS: dict[str, MetaMethod] = {
    m.name: m
    for m in (
        MetaMethod(
            "protonet",
            "ProtoNet",
            "Snell et al., Prototypical Networks for Few-shot Learning, NeurIPS 2017",
            "https://github.com/IBM/cdfsl-benchmark/blob/master/methods/protonet.py",
            fwt=True,
        ),
        MetaMethod(
            "matchingnet",
            "MatchingNet",
            "Vinyals et al., Matching Networks for One Shot Learning, NeurIPS 2016",
            CLOSERLOOK,
            fwt=True,
        ),
        MetaMethod(
            "relationnet",
            "RelationNet",
            "Sung et al., Learning to Compare: Relation Network for Few-Shot Learning, CVPR 2018",
            CLOSERLOOK,
            fwt=True,
        ),
        MetaMethod(
            "metaopt",
            "MetaOpt",
            "Lee et al., Meta-Learning with Differentiable Convex Optimization, CVPR 2019 (ridge head)",
            "https://github.com/kjunelee/MetaOptNet",
            fwt=False,
        ),
        MetaMethod(
            "maml",
            "MAML",
            "Finn et al., Model-Agnostic Meta-Learning, ICML 2017 (first-order, prototype-initialised head)",
            CLOSERLOOK,
            fwt=False,
        ),
    )
}
