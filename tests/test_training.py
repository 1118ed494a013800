"""A training step in IR: examples/mlp_train.ir's @step (which calls the generated @loss_grad and
applies SGD) trains an MLP classifier on a synthetic data set to the loss that a numpy
implementation of the same step reaches."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import irc

EXAMPLE = Path(__file__).parent.parent / "examples" / "mlp_train.ir"
LR = 0.5


def data(seed: int = 0):
    """Four Gaussian clusters in 20 dimensions, labels one-hot; and the initial parameters."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(0, 1.5, (4, 20))
    labels = rng.integers(0, 4, 256)
    x = (centers[labels] + rng.normal(0, 1.0, (256, 20))).astype(np.float32)
    y = np.eye(4, dtype=np.float32)[labels]
    params = [rng.normal(0, 0.3, (20, 32)), np.zeros(32), rng.normal(0, 0.3, (32, 4)), np.zeros(4)]
    return [p.astype(np.float32) for p in params], x, y


def numpy_step(params, x, y):
    """The same step in numpy (float64): forward, hand-written backward, SGD."""
    w1, b1, w2, b2 = [p.astype(np.float64) for p in params]
    x, y = x.astype(np.float64), y.astype(np.float64)
    a1 = x @ w1 + b1
    h = np.maximum(a1, 0)
    logits = h @ w2 + b2
    shifted = logits - logits.max(axis=1, keepdims=True)
    logp = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    loss = -(logp * y).sum() / len(x)
    d_logits = (np.exp(logp) * y.sum(axis=1, keepdims=True) - y) / len(x)
    g2, gb2 = h.T @ d_logits, d_logits.sum(axis=0)
    d_a1 = (d_logits @ w2.T) * (a1 > 0)
    g1, gb1 = x.T @ d_a1, d_a1.sum(axis=0)
    new = [w1 - LR * g1, b1 - LR * gb1, w2 - LR * g2, b2 - LR * gb2]
    return loss, [p.astype(np.float32) for p in new]


@pytest.fixture(scope="module")
def module():
    m = irc.parse_file(str(EXAMPLE))
    irc.passes.run(m, "grad{func=loss wrt=0,1,2,3}")
    return m


def test_one_step_matches_numpy_on_both_engines(module):
    params, x, y = data()
    loss, expected = numpy_step(params, x, y)
    interp = irc.interpret(module, "step", *params, x, y)
    compiled = irc.compile(module).step(*params, x, y)
    for got in (interp, compiled):
        assert float(got[0]) == pytest.approx(loss, rel=1e-5)
        for new, ref in zip(got[1:], expected):
            np.testing.assert_allclose(new, ref, rtol=1e-4, atol=1e-5)


def test_training_reaches_numpys_loss(module):
    params, x, y = data(1)
    exe = irc.compile(module)
    ours, theirs = list(params), list(params)
    for _ in range(60):
        out = exe.step(*ours, x, y)
        loss_irc, ours = float(out[0]), list(out[1:])
        loss_np, theirs = numpy_step(theirs, x, y)
    first, _ = numpy_step(params, x, y)
    assert loss_np < 0.25 * first  # the reference itself learned
    assert loss_irc == pytest.approx(loss_np, rel=2e-3, abs=1e-4)
