"""Batched HPE: the configurations of an episode train together, one vmapped step at a time.

An adapter describes one configuration's training as a
:class:`~fewtrans_board.blocks.lockstep.plan.TrainingPlan` (what trains with which
learning rate, the loss of a support batch, the predictor afterwards). Subclassing
:class:`PlannedAdapter` and implementing ``plan`` gives ``fit`` (the plain loop) and a
``fit_many`` that trains the whole HPE grid in lockstep through :func:`fit_plans`:
``torch.func.functional_call`` swaps each configuration's tensors into one template, ``vmap``
runs every configuration's loss in one pass, and a stacked Adam applies each
configuration's learning rates, cosine schedule and step count. Results equal the loop's
up to rounding (tests: float64 to 1e-8); where a plan cannot batch, the loop runs.
Whether to batch, and the memory budget, come in ``fit_many(..., options=FitOptions(...))``.

Importing this package does not import torch.
"""

from fewtrans_board.blocks.lockstep.adapter import PlannedAdapter
from fewtrans_board.blocks.lockstep.memory import MemoryBudget, parse_memory
from fewtrans_board.blocks.lockstep.plan import TrainingPlan, run_plan
from fewtrans_board.blocks.lockstep.settings import (
    BATCHING_MODES,
    FitOptions,
    GroupReport,
    LockstepSettings,
    settings_for,
)
from fewtrans_board.blocks.lockstep.trainer import fit_plans

__all__ = [
    "BATCHING_MODES",
    "FitOptions",
    "GroupReport",
    "LockstepSettings",
    "MemoryBudget",
    "PlannedAdapter",
    "TrainingPlan",
    "fit_plans",
    "parse_memory",
    "run_plan",
    "settings_for",
]
