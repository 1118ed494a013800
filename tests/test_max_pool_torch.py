"""The torch backend's max pooling (irc/torch/convert.py _max_pool) against torch eager:
values and indices for kernel/stride/padding/ceil_mode combinations, ties, -inf, +inf and NaN."""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")

from test_torch_backend import fresh  # noqa: E402, F401 - the same reset around each test

from irc.torch.runtime import COUNTS  # noqa: E402

nn = torch.nn


class Pool(nn.Module):
    def __init__(self, kernel, stride, padding, ceil_mode):
        super().__init__()
        self.args = kernel, stride, padding, 1, ceil_mode

    def forward(self, x):
        return nn.functional.max_pool2d(x, *self.args, return_indices=True)


def _both(model, x):
    compiled = torch.compile(model, backend="irc")
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return model(x), compiled(x)


CASES = [((2, 2), 2, 0, False), ((3, 3), 2, 1, False), ((3, 3), 1, 1, False), ((2, 3), (1, 2), (1, 0), False),
         ((3, 2), (2, 1), (0, 1), True), ((1, 1), 1, 0, False), ((3, 3), 2, 1, True), ((2, 2), 1, 1, False)]


def _specials(shape, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.round(torch.randn(shape, generator=g))
    pick = torch.rand(shape, generator=g)
    x[pick < 0.15] = -torch.inf
    x[(pick > 0.9) & (pick < 0.95)] = torch.inf
    return x


@pytest.mark.parametrize("kernel, stride, padding, ceil_mode", CASES)
def test_values_and_indices_equal_torchs_with_ties_and_infinities(kernel, stride, padding, ceil_mode):
    x = _specials((2, 2, 7, 9), 1)
    x[1, 1] = -torch.inf  # whole planes of -inf: every window, borders included
    want, got = _both(Pool(kernel, stride, padding, ceil_mode), x)
    assert torch.equal(got[0], want[0])
    assert torch.equal(got[1], want[1])
    assert COUNTS.get("irc") and not COUNTS.get("torch")  # irc's pooling, not a fallback


@pytest.mark.parametrize("kernel, stride, padding, ceil_mode", CASES)
def test_a_nan_anywhere_in_a_window_is_its_maximum_as_in_torch(kernel, stride, padding, ceil_mode):
    """torch's max_pool2d propagates a NaN and indexes the window's last NaN (irc once dropped a
    NaN after the window's first tap: v > best is false for NaN)."""
    x = _specials((1, 2, 6, 6), 2)
    x[0, 0, 3, 3] = torch.nan
    x[0, 1, 1, 1] = torch.nan
    want, got = _both(Pool(kernel, stride, padding, ceil_mode), x)
    assert torch.equal(torch.isnan(got[0]), torch.isnan(want[0]))
    assert torch.equal(got[1], want[1])


@pytest.mark.parametrize("kernel, stride, padding, ceil_mode", CASES[:4])
def test_gradients_with_ties_and_infinities_equal_torchs(kernel, stride, padding, ceil_mode):
    """The backward pass routes each output's gradient to its index: ties and -inf windows must
    pick torch's tap, overlapping windows add."""
    x = _specials((2, 2, 7, 9), 3)
    x[x == torch.inf] = 5.0  # +inf: inf - inf in the check below
    weight = torch.randn(2, 2, 1, 1)

    def loss_of(fn, leaf):
        out, _ = fn(leaf)
        return (out * weight).sum()

    model = Pool(kernel, stride, padding, ceil_mode)
    compiled = torch.compile(model, backend="irc")
    grads = []
    for fn in (model, compiled):
        leaf = x.clone().requires_grad_(True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            loss_of(fn, leaf).backward()
        grads.append(leaf.grad)
    assert torch.equal(grads[1], grads[0])
    assert COUNTS.get("irc") and not COUNTS.get("torch")
