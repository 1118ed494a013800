"""Numerically stable gradients in f32 (issue 12, item 6).

The gradients of log1p, expm1, tanh, softplus (written ``log1p(exp(x))`` or ``log(1 + exp(x))``,
as users write it), sigmoid (``1 / (1 + exp(-x))``) and log-sigmoid stay finite and accurate for
large |x|.  log1p, expm1 and tanh are stable by their rules alone; the formulas need ``stabilize``,
which works before ``grad`` (it rewrites the forward, whose rewritten form has a stable gradient)
and after it (it also rewrites the chain rule's ``exp(z) * (g / (1 + exp(z)))``).  References are
numpy f64 formulas written so that they cannot overflow, rounded to f32; a result whose reference
overflows f32 must be an infinity of the right sign.  The interpreter and compiled code must agree
bit for bit.
"""

from __future__ import annotations

import functools

import irc.passes
import numpy as np
import pytest

import irc
from irc.builder import Builder
from irc.types import f32

POINTS = [0.5, 20.0, 50.0, 100.0, 1000.0]
XS = sorted({s * p for p in POINTS for s in (1.0, -1.0)} | {0.0})


def _sigmoid(x):
    x = np.asarray(x, np.float64)
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def _softplus(x):
    x = np.asarray(x, np.float64)
    return np.maximum(x, 0.0) + np.log1p(np.exp(-np.abs(x)))


def _sech2(x):
    w = np.exp(-2.0 * np.abs(np.asarray(x, np.float64)))
    return 4.0 * w / (1.0 + w) ** 2


def softplus_log1p(b, x):
    return x.exp().log1p()


def softplus_log(b, x):
    return (1.0 + x.exp()).log()


def softplus_neg(b, x):
    return (1.0 + (-x).exp()).log()


def sigmoid(b, x):
    return 1.0 / (1.0 + (-x).exp())


def sigmoid_exp_ratio(b, x):
    e = x.exp()
    return e / (1.0 + e)


def log_sigmoid(b, x):
    return (1.0 / (1.0 + (-x).exp())).log()


def tanh(b, x):
    return x.tanh()


def log1p(b, x):
    return x.log1p()


def expm1(b, x):
    return x.expm1()


# (function, f64 reference value, f64 reference derivative, the points where it is defined)
CASES = {
    "softplus_log1p": (softplus_log1p, _softplus, _sigmoid, XS),
    "softplus_log": (softplus_log, _softplus, _sigmoid, XS),
    "softplus_neg": (softplus_neg, lambda x: _softplus(-x), lambda x: -_sigmoid(-x), XS),
    "sigmoid": (sigmoid, _sigmoid, lambda x: _sigmoid(x) * _sigmoid(-x), XS),
    "sigmoid_exp_ratio": (sigmoid_exp_ratio, _sigmoid, lambda x: _sigmoid(x) * _sigmoid(-x), XS),
    "log_sigmoid": (log_sigmoid, lambda x: -_softplus(-x), lambda x: _sigmoid(-x), XS),
    "tanh": (tanh, np.tanh, _sech2, XS),
    "log1p": (log1p, np.log1p, lambda x: 1.0 / (1.0 + x), [x for x in XS if x > -1] + [-0.999, -0.5]),
    "expm1": (expm1, np.expm1, np.exp, XS),
}
# The pipelines: stabilize before grad rewrites the forward; after grad it must repair the chain
# rule's products too, which it does for softplus and sigmoid; not for these two:
STABILIZE_FIRST_ONLY = {
    "log_sigmoid": "its gradient divides by the sigmoid, which underflows to 0 (1/0 = inf, inf * 0 = NaN)",
    "sigmoid_exp_ratio": "the quotient rule's 1/(1+e) - (e/(1+e))/(1+e) cancels to 0 for large x",
}
PIPELINES = {"stabilize-first": "stabilize,grad{func=f}", "grad-first": "grad{func=f},stabilize",
             "grad-first-canonical": "grad{func=f},canonicalize,stabilize,cse"}


@functools.cache
def compiled(case: str, pipeline: str):
    fn = CASES[case][0]
    b = Builder()
    m = b.module()
    with b.function(m, "f", [f32]) as (x,):
        b.ret(fn(b, x))
    irc.passes.run(m, PIPELINES[pipeline])
    irc.verify(m)
    return m, irc.compile(m, cache=False, math_approx=False)


def assert_f32_accurate(got, reference, what: str, ulps: float = 4) -> None:
    """``got`` (f32) within ``ulps`` of the f64 reference rounded to f32 (plus a few of the smallest
    subnormal, where the true value is below f32's normal range); an infinity where it overflows."""
    want = np.float32(reference)
    got = np.float32(got)
    if not np.isfinite(want):
        assert got == want, f"{what}: {got}, expected {want} (the true value overflows f32)"
        return
    assert np.isfinite(got), f"{what}: {got}, expected {reference!r}"
    tolerance = ulps * float(np.spacing(np.abs(want))) + 8 * 2.0 ** -149
    assert abs(float(got) - float(reference)) <= tolerance, f"{what}: {got!r}, expected {reference!r}"


@pytest.mark.parametrize("pipeline", PIPELINES)
@pytest.mark.parametrize("case", CASES)
def test_gradient_finite_and_accurate_for_large_arguments(case, pipeline):
    if case in STABILIZE_FIRST_ONLY and pipeline != "stabilize-first":
        pytest.skip(STABILIZE_FIRST_ONLY[case])
    _, value_of, derivative_of, xs = CASES[case]
    m, exe = compiled(case, pipeline)
    with np.errstate(over="ignore"):
        for x in xs:
            x32 = np.float32(x)
            interpreted = irc.interpret(m, "f_grad", x32)
            ran = exe.f_grad(x32)
            for a, c in zip(interpreted, ran):
                assert np.float32(a).tobytes() == np.float32(c).tobytes(), (x, interpreted, ran)
            value, grad = interpreted
            x64 = np.float64(x32)  # the point the f32 program sees
            assert_f32_accurate(value, float(value_of(x64)), f"{case}({x})")
            assert_f32_accurate(grad, float(derivative_of(x64)), f"{case}'({x})")


def test_naive_sigmoid_gradient_is_what_stabilize_repairs():
    """Without stabilize the chain rule through 1 / (1 + exp(-x)) is inf * 0 for x = -1000: the
    case the pattern exists for (if this ever passes, the rule set changed and the docs must too)."""
    b = Builder()
    m = b.module()
    with b.function(m, "f", [f32]) as (x,):
        b.ret(sigmoid(b, x))
    irc.passes.run(m, "grad{func=f}")
    with np.errstate(all="ignore"):
        assert np.isnan(irc.interpret(m, "f_grad", np.float32(-1000.0))[1])
