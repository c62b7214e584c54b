"""``FitOptions``: the run-wide inputs of ``Adapter.fit_many`` besides the episode, torch-free.

The runner builds one from a run's ``--batching`` and ``--max-memory`` and hands it to every
``fit_many`` that declares an ``options`` keyword (CONTRIBUTING.md, "Batched HPE for your
adapter"). Nothing reaches an adapter through hidden context: what a fit depends on is in
its arguments.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

DEFAULT_FRACTION = 0.8
"""Share of the free device memory the lockstep state may take by default."""


@dataclass(frozen=True)
class MemoryBudget:
    """An absolute size in bytes, or a fraction of free device memory.

    Attributes:
        bytes: the budget in bytes; ``None`` uses ``fraction``.
        fraction: share of the free memory when ``bytes`` is ``None``.
    """

    bytes: int | None = None
    fraction: float = DEFAULT_FRACTION

    def describe(self) -> str:
        """Human-readable form (as accepted by ``parse_memory``)."""
        if self.bytes is not None:
            return f"{self.bytes / 2**30:.3g}GiB"
        return f"{100 * self.fraction:g}% of free memory"


@dataclass(frozen=True)
class LockstepSettings:
    """How configurations of one episode are trained together.

    Attributes:
        enabled: train the plans of ``PlannedAdapter`` adapters in lockstep where possible;
            ``False`` runs the plain per-configuration loop (the reference the batched path
            equals).
        heads: train the frozen-feature heads (linear probe, cosine classifier) as one stack.
        memory: memory the configurations trained together may use; the default is a
            fraction of the device's free memory.
    """

    enabled: bool = True
    heads: bool = True
    memory: MemoryBudget = field(default_factory=MemoryBudget)


@dataclass
class GroupReport:
    """What happened to one group of configurations that differ only in lr/epochs.

    Attributes:
        method: adapter name.
        configs: number of configurations in the group.
        chunks: sizes of the lockstep chunks, in training order (empty when the loop ran).
        per_config_bytes: estimated memory of one configuration's training state.
        budget_bytes: the memory budget the chunks were sized for (``None``: unlimited).
        fallback: why the plain loop ran instead, or ``None`` when batched.
    """

    method: str
    configs: int
    chunks: list[int] = field(default_factory=list)
    per_config_bytes: int = 0
    budget_bytes: int | None = None
    fallback: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return dict(self.__dict__)


@dataclass(frozen=True)
class FitOptions:
    """Run-wide inputs of ``Adapter.fit_many`` (the keyword ``options``).

    Attributes:
        lockstep: how the configurations of an episode train together.
        reports: where batched fits append a :class:`GroupReport` per group of
            configurations; ``None`` records nothing. The list is the caller's: the
            options stay frozen, the list they point to fills.
    """

    lockstep: LockstepSettings = field(default_factory=LockstepSettings)
    reports: list[GroupReport] | None = field(default=None, compare=False)

    def record(self, report: GroupReport) -> None:
        """Add ``report`` to :attr:`reports`, if these options record."""
        if self.reports is not None:
            self.reports.append(report)
