"""``PlannedAdapter``: implement :meth:`~PlannedAdapter.plan`, get ``fit`` and a batched ``fit_many``."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from fewtrans_board.api.adapter import Adapter, Predictor
from fewtrans_board.blocks.lockstep.plan import TrainingPlan, check_plan, run_plan
from fewtrans_board.blocks.lockstep.trainer import fit_plans

if TYPE_CHECKING:
    from fewtrans_board.api.backbone import Backbone
    from fewtrans_board.api.episode_data import SupportSet
    from fewtrans_board.api.fit_options import FitOptions


class PlannedAdapter(Adapter):
    """Base class of adapters trained with the FewTrans recipe.

    Subclasses implement :meth:`plan` (copy what trains, create new parameters, define the
    loss and the predictor) and inherit ``fit`` (one plan, the plain loop) and ``fit_many``
    (every configuration of the HPE grid in lockstep, equal to the loop up to rounding; see
    :mod:`fewtrans_board.blocks.lockstep`).
    """

    @abstractmethod
    def plan(
        self, backbone: Backbone, support: SupportSet, class_names: Sequence[str], config: Any
    ) -> TrainingPlan:
        """Set up one configuration's training (all random draws from torch's generator).

        Args:
            backbone: the caller's backbone (never modified: deep-copy what trains).
            support: the labeled support set.
            class_names: the episode's class names, in label order.
            config: an instance of ``Config``.

        Returns:
            The untrained plan.
        """

    def checked_plan(
        self, backbone: Backbone, support: SupportSet, class_names: Sequence[str], config: Any
    ) -> TrainingPlan:
        """:meth:`plan`, rejecting plans the recipe cannot run (``FewtransError``)."""
        plan = self.plan(backbone, support, class_names, config)
        check_plan(plan, self.name)
        return plan

    def fit(
        self, backbone: Backbone, support: SupportSet, class_names: Sequence[str], config: Any
    ) -> Predictor:
        """Train one configuration's plan and return its predictor."""
        return run_plan(self.checked_plan(backbone, support, class_names, config))

    def fit_many(
        self,
        backbone: Backbone,
        support: SupportSet,
        class_names: Sequence[str],
        configs: Sequence[Any],
        seeds: Sequence[int],
        *,
        options: FitOptions | None = None,
    ) -> list[Predictor]:
        """Train every configuration, in lockstep where possible (equal to the loop).

        ``options.lockstep`` says whether to batch and within which memory; group reports
        go to ``options.reports`` (see :func:`~fewtrans_board.blocks.lockstep.fit_plans`).
        """

        def build(config: Any) -> TrainingPlan:
            return self.checked_plan(backbone, support, class_names, config)

        return fit_plans(build, configs, seeds, method=self.name, options=options)
