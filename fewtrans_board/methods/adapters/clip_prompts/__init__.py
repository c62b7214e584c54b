"""CLIP prompt learners, from CoOp to SEPRES.

CoOp, CoCoOp, KgCoOp, ProGrad, VPT-CLIP, IVLP, MaPLe, PromptSRC, TCP, CoPrompt, SEP and
SEPRES.

Every adapter keeps CLIP's encoders and logit scale frozen, scores
``logit_scale * cos(image, text)`` and returns a predictor that also scores arbitrary class
names (``predict_names``, for base-to-novel evaluation). Importing this package does not
import torch; modules that need it import it inside functions.
"""

from fewtrans_board.methods.adapters.clip_prompts.cocoop import CocoopAdapter
from fewtrans_board.methods.adapters.clip_prompts.coop import CoopAdapter
from fewtrans_board.methods.adapters.clip_prompts.coprompt import CopromptAdapter
from fewtrans_board.methods.adapters.clip_prompts.ivlp import IvlpAdapter
from fewtrans_board.methods.adapters.clip_prompts.kgcoop import KgcoopAdapter
from fewtrans_board.methods.adapters.clip_prompts.maple import MapleAdapter
from fewtrans_board.methods.adapters.clip_prompts.prograd import (
    ProgradAdapter,
    project_conflicting_gradient,
)
from fewtrans_board.methods.adapters.clip_prompts.promptsrc import PromptSrcAdapter
from fewtrans_board.methods.adapters.clip_prompts.sep import SepAdapter, SepresAdapter
from fewtrans_board.methods.adapters.clip_prompts.tcp import TcpAdapter
from fewtrans_board.methods.adapters.clip_prompts.vpt_clip import VptClipAdapter

ADAPTERS = (
    CoopAdapter,
    CocoopAdapter,
    KgcoopAdapter,
    ProgradAdapter,
    VptClipAdapter,
    IvlpAdapter,
    MapleAdapter,
)
"""The CoOp-family and multimodal prompt learners, in registration order."""

INDUCTIVE_PAPER_ADAPTERS = (
    PromptSrcAdapter,
    TcpAdapter,
    CopromptAdapter,
    SepAdapter,
    SepresAdapter,
)
"""The further methods of the inductive-CLIP benchmark, registered after :data:`ADAPTERS`."""

__all__ = [
    "ADAPTERS",
    "INDUCTIVE_PAPER_ADAPTERS",
    "CocoopAdapter",
    "CoopAdapter",
    "CopromptAdapter",
    "IvlpAdapter",
    "KgcoopAdapter",
    "MapleAdapter",
    "ProgradAdapter",
    "PromptSrcAdapter",
    "SepAdapter",
    "SepresAdapter",
    "TcpAdapter",
    "VptClipAdapter",
    "project_conflicting_gradient",
]
