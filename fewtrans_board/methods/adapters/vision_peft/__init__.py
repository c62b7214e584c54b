"""Vision parameter-efficient transfer methods for ViT encoders (FewTrans vision track).

Each adapter is a :class:`~fewtrans_board.blocks.finetune.FinetuneAdapter` whose
``trainable`` injects its modules into the deep-copied encoder (timm ViT or open_clip visual
tower) and returns exactly the parameters that train; TSA also replaces the linear head by
a nearest-centroid head. Importing this package does not import torch.
"""

from fewtrans_board.methods.adapters.vision_peft.adapter import SequentialBottleneckAdapter
from fewtrans_board.methods.adapters.vision_peft.adaptformer import AdaptFormerAdapter
from fewtrans_board.methods.adapters.vision_peft.bitfit import BitFitAdapter
from fewtrans_board.methods.adapters.vision_peft.lora import LoraAdapter
from fewtrans_board.methods.adapters.vision_peft.ssf import SsfAdapter
from fewtrans_board.methods.adapters.vision_peft.tsa import TsaAdapter
from fewtrans_board.methods.adapters.vision_peft.vpt import VptAdapter

ADAPTERS = (
    LoraAdapter,
    BitFitAdapter,
    SsfAdapter,
    SequentialBottleneckAdapter,
    AdaptFormerAdapter,
    VptAdapter,
    TsaAdapter,
)

__all__ = [
    "ADAPTERS",
    "AdaptFormerAdapter",
    "BitFitAdapter",
    "LoraAdapter",
    "SequentialBottleneckAdapter",
    "SsfAdapter",
    "TsaAdapter",
    "VptAdapter",
]
