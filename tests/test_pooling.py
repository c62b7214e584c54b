"""The fast 2x2 max pooling against PyTorch's ``max_pool2d`` (the oracle), values and gradients."""

from __future__ import annotations

import pytest
import torch
from torch.nn import functional as F

from fewtrans_board.blocks.pooling import max_pool_2x2, max_pool_2x2_module


def _maps() -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    relu = torch.relu(torch.randn(4, 8, 16, 12, generator=generator))  # many all-zero windows
    rounded = torch.randint(-2, 3, (2, 3, 8, 8), generator=generator).float()  # ties of all kinds
    special = torch.randn(2, 2, 4, 4, generator=generator)
    special[0, 0, 0, 1] = float("nan")
    special[0, 1, :2, :2] = float("-inf")
    special[1, 0, 2, 3] = float("inf")
    unbatched = torch.randn(3, 6, 10, generator=generator)
    return [relu, rounded, special, unbatched]


@pytest.mark.parametrize("index", range(4))
def test_values_equal_max_pool2d_bit_for_bit_without_autograd(index: int) -> None:
    x = _maps()[index]
    expected = F.max_pool2d(x, 2)
    with torch.no_grad():
        fast = max_pool_2x2(x)
    with torch.inference_mode():
        inference = max_pool_2x2(x)
    for got in (fast, inference):
        assert got.shape == expected.shape
        assert torch.equal(got.isnan(), expected.isnan())
        assert torch.equal(got.nan_to_num(0.0), expected.nan_to_num(0.0))


def test_odd_sizes_are_pooled_as_max_pool2d_floors_them() -> None:
    x = torch.randn(2, 3, 7, 9)
    with torch.no_grad():
        assert torch.equal(max_pool_2x2(x), F.max_pool2d(x, 2))


def test_with_autograd_a_tie_sends_its_whole_gradient_to_the_first_input_as_max_pool2d() -> None:
    # An all-zero window (after a ReLU) is a four-way tie: max_pool2d's gradient goes to one
    # element, a maximum of views would split it (0.25 each) and change training.
    x = torch.zeros(1, 1, 4, 4, requires_grad=True)
    reference = x.detach().clone().requires_grad_(True)
    max_pool_2x2(x).sum().backward()
    F.max_pool2d(reference, 2).sum().backward()
    assert x.grad is not None and reference.grad is not None
    assert torch.equal(x.grad, reference.grad)
    assert sorted(x.grad.flatten().tolist())[-4:] == [1.0] * 4


def test_the_module_is_a_max_pool2d_of_kernel_2_that_uses_the_fast_path() -> None:
    module = max_pool_2x2_module()
    assert isinstance(module, torch.nn.MaxPool2d) and module.kernel_size == 2
    assert module.state_dict() == {}
    x = torch.relu(torch.randn(2, 4, 6, 6))
    with torch.no_grad():
        assert torch.equal(module(x), F.max_pool2d(x, 2))
