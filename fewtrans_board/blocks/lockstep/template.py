"""One plan as a template for many: stacked trainable tensors swapped into its modules.

The first plan of a group is the template. Every trainable tensor gets an address in it:
the names under which a module of the plan holds it as a parameter, and the attributes of
the plan's owners that hold it. The other plans must have the same structure and equal
frozen tensors; their frozen parameters are replaced by the template's (one copy in
memory), and their trainable tensors become rows of stacked ``[M, ...]`` tensors. The
loss of row ``r`` is the template's loss with row ``r`` swapped in at every address
(``torch.func.functional_call`` for module parameters, ``setattr`` for owners), so
``torch.vmap`` evaluates all rows in one pass.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING, Any

from fewtrans_board.blocks.lockstep.plan import TrainingPlan
from fewtrans_board.core.errors import FewtransError

if TYPE_CHECKING:
    import numpy as np
    import torch
    from torch import nn


class NotBatchable(FewtransError):
    """The plans cannot train in lockstep; the message says why (the loop runs instead)."""


def _modules_of(plan: TrainingPlan) -> list[nn.Module]:
    """The plan's modules plus modules held by its owners, each once."""
    from torch import nn

    found: dict[int, nn.Module] = {}
    for module in plan.modules:
        found.setdefault(id(module), module)
    for owner in plan.owners:
        for value in vars(owner).values():
            if isinstance(value, nn.Module):
                found.setdefault(id(value), value)
    return list(found.values())


def _tensor_attributes(owner: Any) -> dict[str, torch.Tensor]:
    import torch

    return {k: v for k, v in vars(owner).items() if isinstance(v, torch.Tensor)}


def _loss_module(modules: Sequence[nn.Module], loss: Callable[[Any], Any]) -> nn.Module:
    """A module whose children are ``modules`` and whose forward is ``loss(batch)``."""
    from torch import nn

    class LossModule(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.parts = nn.ModuleList(modules)

        def forward(self, batch: Any) -> Any:
            return loss(batch)

    return LossModule()


class Template:
    """The template plan of a group and the addresses of its trainable tensors.

    Args:
        plan: the first plan of the group.

    Raises:
        NotBatchable: a trainable tensor has no address.
    """

    def __init__(self, plan: TrainingPlan) -> None:
        self.plan = plan
        self.modules = _modules_of(plan)
        self.root = _loss_module(self.modules, plan.lockstep_loss)
        self.trainable = plan.trainable
        self.module_names, self.owner_attrs = self._addresses(plan, self.root)
        self.plans: list[TrainingPlan] = [plan]

    @staticmethod
    def _addresses(
        plan: TrainingPlan, root: nn.Module
    ) -> tuple[list[list[str]], list[list[tuple[int, str]]]]:
        by_id: dict[int, list[str]] = {}
        for name, param in root.named_parameters(remove_duplicate=False):
            by_id.setdefault(id(param), []).append(name)
        names, attrs = [], []
        for j, tensor in enumerate(plan.trainable):
            held = [
                (k, attr)
                for k, owner in enumerate(plan.owners)
                for attr, value in _tensor_attributes(owner).items()
                if value is tensor
            ]
            module_names = by_id.get(id(tensor), [])
            if not module_names and not held:
                raise NotBatchable(
                    f"trainable tensor {j} (shape {tuple(tensor.shape)}) is neither a parameter "
                    "of the plan's modules nor an attribute of its owners"
                )
            names.append(module_names)
            attrs.append(held)
        return names, attrs

    # --- adopting the other plans of the group ---------------------------------------

    def adopt(self, plan: TrainingPlan) -> None:
        """Check ``plan`` against the template and share the template's frozen parameters.

        Raises:
            NotBatchable: different structure or different frozen tensors.
        """
        if (plan.n_items, plan.batch_size) != (self.plan.n_items, self.plan.batch_size):
            raise NotBatchable("configurations differ in support size or batch size")
        trainable = plan.trainable
        if [(t.shape, t.dtype, t.device) for t in trainable] != [
            (t.shape, t.dtype, t.device) for t in self.trainable
        ]:
            raise NotBatchable("configurations train tensors of different shapes")
        modules = _modules_of(plan)
        if [type(m) for m in modules] != [type(m) for m in self.modules] or len(plan.owners) != len(
            self.plan.owners
        ):
            raise NotBatchable("configurations build different modules")
        names, attrs = self._addresses(plan, _loss_module(modules, plan.lockstep_loss))
        if names != self.module_names or attrs != self.owner_attrs:
            raise NotBatchable("configurations hold their trainable tensors in different places")
        trainable_ids = {id(t) for t in trainable}
        for mine, theirs in zip(self.modules, modules, strict=True):
            _share_frozen(mine, theirs, trainable_ids)
        for mine_owner, their_owner in zip(self.plan.owners, plan.owners, strict=True):
            _share_owner_tensors(mine_owner, their_owner, trainable_ids)
        self.plans.append(plan)

    # --- stacked rows and the batched loss --------------------------------------------

    def stack(self, order: Sequence[int]) -> list[torch.Tensor]:
        """Stack the plans' trainable tensors (rows in ``order``) and alias each plan to its row.

        After this, plan ``order[r]``'s trainable tensors are views of row ``r``: updating
        the stack trains every plan in place.
        """
        import torch

        stacked = []
        for j in range(len(self.trainable)):
            rows = torch.stack([self.plans[i].trainable[j].detach() for i in order])
            for r, i in enumerate(order):
                self.plans[i].trainable[j].data = rows[r]
            stacked.append(rows)
        return stacked

    @contextmanager
    def _owners_swapped(self, row: Sequence[torch.Tensor]) -> Iterator[None]:
        saved = []
        try:
            for j, held in enumerate(self.owner_attrs):
                for k, attr in held:
                    owner = self.plan.owners[k]
                    saved.append((owner, attr, getattr(owner, attr)))
                    setattr(owner, attr, row[j])
            yield
        finally:
            for owner, attr, value in reversed(saved):
                setattr(owner, attr, value)

    def row_loss(self, batch: np.ndarray) -> Callable[..., torch.Tensor]:
        """The template's loss of ``batch`` as a function of one row of every tensor."""
        from torch.func import functional_call

        def loss(*row: torch.Tensor) -> torch.Tensor:
            params = {name: row[j] for j, names in enumerate(self.module_names) for name in names}
            with self._owners_swapped(row):
                value: torch.Tensor = functional_call(
                    self.root, params, (batch,), strict=False, tie_weights=True
                )
            if value.dim() != 0:
                raise NotBatchable(f"the loss has shape {tuple(value.shape)}, expected a scalar")
            return value

        return loss

    def losses(self, batch: np.ndarray, rows: Sequence[torch.Tensor]) -> torch.Tensor:
        """Losses ``[R]`` of the stacked ``rows`` (each ``[R, ...]``) on ``batch``."""
        import torch

        with _vmap_friendly(rows[0].device.type if rows else "cpu"):
            losses: torch.Tensor = torch.vmap(self.row_loss(batch), randomness="error")(*rows)
            return losses


@contextmanager
def _vmap_friendly(device_type: str) -> Iterator[None]:
    """Route attention through ops vmap batches; quiet vmap's performance warnings.

    Inside ``vmap`` parameters look as if they needed no gradient, so the
    ``nn.MultiheadAttention`` fast path (which has no backward) would be taken. On CPU,
    scaled-dot-product attention uses its math kernel: the CPU flash kernel has no batching
    rule and would run row by row (CUDA's flash, memory-efficient and cuDNN kernels have
    one).
    """
    import warnings

    import torch

    enabled = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        with warnings.catch_warnings(), _sdpa_backends(device_type):
            warnings.filterwarnings("ignore", message="There is a performance drop")
            yield
    finally:
        torch.backends.mha.set_fastpath_enabled(enabled)


def _sdpa_backends(device_type: str) -> AbstractContextManager[object]:
    """The math SDPA kernel on CPU; every kernel elsewhere."""
    if device_type != "cpu":
        return nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel([SDPBackend.MATH])


def _share_frozen(mine: nn.Module, theirs: nn.Module, trainable_ids: set[int]) -> None:
    """Check ``theirs``'s frozen tensors equal ``mine``'s; point its frozen parameters at mine.

    Buffers are compared but not shared (predictors may update them, e.g. transductive
    batch norm). A differing frozen tensor (e.g. drawn from the seed) raises NotBatchable.
    """
    my_params = dict(mine.named_parameters(remove_duplicate=False))
    my_buffers = dict(mine.named_buffers(remove_duplicate=False))
    their_params = list(theirs.named_parameters(remove_duplicate=False))
    their_buffers = list(theirs.named_buffers(remove_duplicate=False))
    if [n for n, _ in their_params] != list(my_params) or [n for n, _ in their_buffers] != list(
        my_buffers
    ):
        raise NotBatchable(f"configurations build different {type(mine).__name__} modules")
    for kind, theirs_list, my_dict in (
        ("parameter", their_params, my_params),
        ("buffer", their_buffers, my_buffers),
    ):
        for name, tensor in theirs_list:
            if id(tensor) in trainable_ids:
                continue
            reference = my_dict[name]
            if tensor is reference:
                continue
            if not _equal(tensor, reference):
                raise NotBatchable(
                    f"frozen {kind} {name!r} differs between configurations (e.g. drawn from "
                    "the seed); lockstep training needs every frozen tensor equal"
                )
            if kind == "parameter" and not tensor.requires_grad:
                owner_name, _, leaf = name.rpartition(".")
                owner = theirs.get_submodule(owner_name) if owner_name else theirs
                owner._parameters[leaf] = reference  # type: ignore[assignment]


def _share_owner_tensors(mine: Any, theirs: Any, trainable_ids: set[int]) -> None:
    """Check frozen tensor attributes of two owners are equal (else NotBatchable); share mine."""
    my_tensors = _tensor_attributes(mine)
    for attr, tensor in _tensor_attributes(theirs).items():
        if id(tensor) in trainable_ids or tensor is my_tensors.get(attr):
            continue
        reference = my_tensors.get(attr)
        if reference is None or not _equal(reference, tensor):
            raise NotBatchable(f"frozen tensor attribute {attr!r} differs between configurations")
        if not tensor.requires_grad:
            setattr(theirs, attr, reference)


def _equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same shape, dtype, device and values."""
    import torch

    same_kind = a.shape == b.shape and a.dtype == b.dtype and a.device == b.device
    return same_kind and bool(torch.equal(a, b))
