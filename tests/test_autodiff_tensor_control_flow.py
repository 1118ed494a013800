"""Derivatives of scf.for / scf.while / scf.if carrying tensors (passes/autodiff_scf.py).

Each case builds ``@f`` with the public builder and writes the same function once more in
Python, generic over numpy and torch (``xp``).  On the interpreter, in f64:
- the vjp (reverse mode) against central finite differences of <u, f(x)> for a random
  cotangent u, element by element, and against torch.autograd of the Python version;
- the jvp (forward mode) against central differences along a random direction v, and
  against the vjp by the dot-product identity <u, J v> == <J^T u, v>;
- the derivative functions verify, stay structured (no cf ops, no tape), and give the same
  numbers after ``canonicalize,cse``.
Trip counts include 0 and 1 and come from an ``index`` argument (dynamic) or constants.
"""

from __future__ import annotations

import irc.passes
import numpy as np
import pytest
from irc.dialects.tensor import ExtractOp

import irc
from irc.builder import Builder
from irc.types import TensorType, f64, i64, index

try:
    import torch
except ImportError:  # the torch comparisons skip; everything else runs
    torch = None

EPS = 1e-6


def T(*shape):
    return TensorType(list(shape), f64)


def scalar(b, v):
    """A rank-0 tensor as an f64 scalar."""
    return b.built(ExtractOp.build(v.value, []))


def as_float(b, i):
    """An index value as f64."""
    return b.cast("arith.sitofp", b.op("arith.index_cast", i, result=i64), f64)


# ---- the functions, in IR and in Python ------------------------------------------------------------


def rnn(b, h0, w, x, n):
    with b.for_(0, n, 1, inits=[h0]) as loop:
        (h,) = loop.args
        loop.yield_((h @ w + x).tanh())
    return [loop.results[0]]


def rnn_ref(xp, h, w, x, n):
    for _ in range(n):
        h = xp.tanh(h @ w + x)
    return [h]


def rnn_const(b, h0, w, x):
    return rnn(b, h0, w, x, 6)


def rnn_const_ref(xp, h, w, x):
    return rnn_ref(xp, h, w, x, 6)


def strided(b, h0, w, n):
    """i64 bounds from 2 to n by 3, the induction variable read as a float."""
    with b.for_(b.const(2, i64), n, b.const(3, i64), inits=[h0]) as loop:
        (h,) = loop.args
        i = b.cast("arith.sitofp", loop.iv, f64)
        loop.yield_((h @ w * (i * 0.1)).sin() + h)
    return [loop.results[0]]


def strided_ref(xp, h, w, n):
    for i in range(2, n, 3):
        h = xp.sin(h @ w * (i * 0.1)) + h
    return [h]


def dynamic(b, h0, w):
    """A carry of type tensor<?x3xf64>, and a constant trip count of 4."""
    with b.for_(0, 4, 1, inits=[h0]) as loop:
        (h,) = loop.args
        loop.yield_((h @ w).tanh() * 0.9 + h * 0.2)
    return [loop.results[0]]


def dynamic_ref(xp, h, w):
    for _ in range(4):
        h = xp.tanh(h @ w) * 0.9 + h * 0.2
    return [h]


def gather(b, x, s0, n):
    """A scalar carry that reads element i of a tensor from outside: x's cotangent gathers
    one element per step."""
    with b.for_(0, n, 1, inits=[s0]) as loop:
        (s,) = loop.args
        xi = b.built(ExtractOp.build(x.value, [loop.iv.value]))
        loop.yield_((xi * s).sin() + xi)
    return [loop.results[0]]


def gather_ref(xp, x, s, n):
    for i in range(n):
        s = xp.sin(x[i] * s) + x[i]
    return [s]


def mixed(b, a0, c0, s0, x, n):
    """Two tensor carries, a float scalar carry and an index carry read as a float."""
    with b.for_(0, n, 1, inits=[a0, c0, s0, b.index(0)]) as loop:
        a, c, s, k = loop.args
        kf = as_float(b, k)
        a1 = a * c.cos() + x * s
        c1 = c + (a * 0.5).sin() * (kf * 0.1 + 1.0)
        s1 = s * 0.9 + scalar(b, a.sum()) * 0.1
        loop.yield_(a1, c1, s1, k + 1)
    a, c, s, _ = loop.results
    return [a, c, s]


def mixed_ref(xp, a, c, s, x, n):
    for k in range(n):
        a, c, s = a * xp.cos(c) + x * s, c + xp.sin(a * 0.5) * (k * 0.1 + 1.0), s * 0.9 + a.sum() * 0.1
    return [a, c, s]


def nested(b, h0, w, x, n):
    """A triangular nest: the inner loop runs i + 1 times in outer iteration i."""
    with b.for_(0, n, 1, inits=[h0]) as outer:
        (h,) = outer.args
        with b.for_(0, outer.iv + 1, 1, inits=[h]) as inner:
            (g,) = inner.args
            inner.yield_((g @ w).tanh() + x * 0.5)
        outer.yield_(inner.results[0] * 0.8 + x)
    return [outer.results[0]]


def nested_ref(xp, h, w, x, n):
    for i in range(n):
        g = h
        for _ in range(i + 1):
            g = xp.tanh(g @ w) + x * 0.5
        h = g * 0.8 + x
    return [h]


def if_in_loop(b, h0, w, x, n):
    with b.for_(0, n, 1, inits=[h0]) as loop:
        (h,) = loop.args
        positive = scalar(b, h.sum()) > 0.0
        with b.if_(positive, [h.type]) as branch:
            with branch.then_():
                branch.yield_((h @ w).tanh())
            with branch.else_():
                branch.yield_(h * x + 0.3)
        loop.yield_(branch.results[0])
    return [loop.results[0]]


def if_in_loop_ref(xp, h, w, x, n):
    for _ in range(n):
        h = xp.tanh(h @ w) if h.sum() > 0 else h * x + 0.3
    return [h]


def loop_in_if(b, p, h0, w, n):
    with b.if_(p > 0.0, [h0.type]) as branch:
        with branch.then_():
            with b.for_(0, n, 1, inits=[h0]) as loop:
                (h,) = loop.args
                loop.yield_((h @ w) * p + h.sin())
            branch.yield_(loop.results[0])
        with branch.else_():
            branch.yield_(h0 * p)
    return [branch.results[0]]


def loop_in_if_ref(xp, p, h, w, n):
    if p > 0:
        for _ in range(n):
            h = (h @ w) * p + xp.sin(h)
        return [h]
    return [h * p]


def while_norm(b, h0, x):
    """Grow h until its squared norm passes 10; the forwarded value is computed in 'before'
    (reading x from outside), and a sum starting at a constant is carried beside it."""
    with b.while_([h0, b.zeros_like(h0)]) as w:
        with w.before() as (h, acc):
            g = h * 1.1 + x * 0.05
            w.condition(scalar(b, (g * g).sum()) < 10.0, g, acc)
        with w.after() as (g, acc):
            w.yield_(g * (x * x * 0.5 + 1.0) + g.sin() * 0.05, acc + g * 0.1)
    return list(w.results)


def while_norm_ref(xp, h, x):
    acc = h * 0.0
    while True:
        g = h * 1.1 + x * 0.05
        if not (g * g).sum() < 10.0:
            return [g, acc]
        h, acc = g * (x * x * 0.5 + 1.0) + xp.sin(g) * 0.05, acc + g * 0.1


def while_two(b, a0, s0, x):
    """A tensor and a scalar carry; the trip count depends on the scalar."""
    with b.while_([a0, s0]) as w:
        with w.before() as (a, s):
            w.condition(s < 3.0, a, s)
        with w.after() as (a, s):
            w.yield_((a + x).tanh() * s, s + scalar(b, (a * a).mean()) + 0.5)
    return list(w.results)


def while_two_ref(xp, a, s, x):
    while s < 3.0:
        a, s = xp.tanh(a + x) * s, s + (a * a).mean() + 0.5
    return [a, s]


def loop_of_while(b, h0, x, n):
    with b.for_(0, n, 1, inits=[h0]) as loop:
        (h,) = loop.args
        res, acc = while_norm(b, h, x)
        loop.yield_(res * 0.3 + acc)
    return [loop.results[0]]


def loop_of_while_ref(xp, h, x, n):
    for _ in range(n):
        res, acc = while_norm_ref(xp, h, x)
        h = res * 0.3 + acc
    return [h]


def accumulate(b, x, n):
    """Carries that start as constants: only the body gives them a derivative (c through a)."""
    zero = b.zeros_like(x)
    with b.for_(0, n, 1, inits=[zero, zero]) as loop:
        a, c = loop.args
        i = as_float(b, loop.iv)
        loop.yield_(a + (x * i).tanh(), c + a * a)
    return [loop.results[1]]


def accumulate_ref(xp, x, n):
    a = c = x * 0.0
    for i in range(n):
        a, c = a + xp.tanh(x * i), c + a * a
    return [c]


def while_reshape(b, h0, s0, x):
    """The state (a tensor, a scalar) and the forwarded values (one tensor) differ."""
    with b.while_([h0, s0], after_types=[h0.type]) as w:
        with w.before() as (h, s):
            g = h * s
            w.condition(scalar(b, (g * g).sum()) < 5.0, g)
        with w.after() as (g,):
            w.yield_(g + x, scalar(b, g.sum()) * 0.0 + 1.5)
    return [w.results[0]]


def while_reshape_ref(xp, h, s, x):
    while True:
        g = h * s
        if not (g * g).sum() < 5.0:
            return [g]
        h, s = g + x, g.sum() * 0.0 + 1.5


def taped_mixed(b, a0, c0, s0, x):
    """Constant trips (a tape of every carry): two tensor carries, a float scalar carry, and
    the induction variable read as a float."""
    with b.for_(0, 5, 1, inits=[a0, c0, s0]) as loop:
        a, c, s = loop.args
        kf = as_float(b, loop.iv)
        a1 = a * c.cos() + x * s
        c1 = c + (a * 0.5).sin() * (kf * 0.1 + 1.0)
        s1 = s * 0.9 + scalar(b, a.sum()) * 0.1
        loop.yield_(a1, c1, s1)
    return list(loop.results)


def taped_mixed_ref(xp, a, c, s, x):
    for k in range(5):
        a, c, s = a * xp.cos(c) + x * s, c + xp.sin(a * 0.5) * (k * 0.1 + 1.0), s * 0.9 + a.sum() * 0.1
    return [a, c, s]


def taped_nested(b, h0, w, x):
    """Constant trips outside and inside: the outer loop's adjoint reads its tape, and each
    step's adjoint tapes the inner loop."""
    with b.for_(0, 3, 1, inits=[h0]) as outer:
        (h,) = outer.args
        with b.for_(0, 2, 1, inits=[h]) as inner:
            (g,) = inner.args
            inner.yield_((g @ w).tanh() + x * 0.5)
        outer.yield_(inner.results[0] * 0.8 + x)
    return [outer.results[0]]


def taped_nested_ref(xp, h, w, x):
    for _ in range(3):
        for _ in range(2):
            h = xp.tanh(h @ w) + x * 0.5
        h = h * 0.8 + x
    return [h]


def window(b, a, u, i):
    """graph.dynamic_update_slice then graph.dynamic_slice at an index argument."""
    from irc.dialects.graph_dynamic import DynamicSliceOp, DynamicUpdateSliceOp

    zero = b.index(0)
    t = b.built(DynamicUpdateSliceOp.build(a.sin().value, (u * u).value, [i.value, zero.value]))
    w = b.built(DynamicSliceOp.build(t.value, [i.value, zero.value], [2, 3]))
    return [w * a.sum(axes=[0], keepdims=True).broadcast_to(T(2, 3)), t]


def window_ref(xp, a, u, i):
    t = xp.sin(a) * 1.0
    t[i:i + 1] = u * u
    return [t[i:i + 2] * a.sum(0, keepdims=True), t]


RNG = np.random.default_rng(5)


def normal(*shape, scale=0.5):
    return RNG.standard_normal(shape) * scale


# name, body, reference, parameter types, argument sets (the index arguments last)
CASES = [
    ("rnn", rnn, rnn_ref, [T(2, 3), T(3, 3), T(2, 3), index],
     [[normal(2, 3), normal(3, 3), normal(2, 3), n] for n in (0, 1, 2, 5, 10)]),
    ("rnn_const", rnn_const, rnn_const_ref, [T(2, 3), T(3, 3), T(2, 3)],
     [[normal(2, 3), normal(3, 3), normal(2, 3)]]),
    ("strided", strided, strided_ref, [T(2, 2), T(2, 2), i64],
     [[normal(2, 2), normal(2, 2), n] for n in (2, 3, 5, 6, 12)]),
    ("dynamic", dynamic, dynamic_ref, [TensorType([None, 3], f64), T(3, 3)],
     [[normal(2, 3), normal(3, 3)], [normal(1, 3), normal(3, 3)]]),
    ("gather", gather, gather_ref, [T(5), f64, index], [[normal(5), 0.3, n] for n in (0, 1, 5)]),
    ("mixed", mixed, mixed_ref, [T(3), T(3), f64, T(3), index],
     [[normal(3), normal(3), 0.4, normal(3), n] for n in (0, 1, 4)]),
    ("nested", nested, nested_ref, [T(2, 2), T(2, 2), T(2, 2), index],
     [[normal(2, 2), normal(2, 2), normal(2, 2), n] for n in (0, 1, 3)]),
    ("if_in_loop", if_in_loop, if_in_loop_ref, [T(2, 3), T(3, 3), T(2, 3), index],
     [[normal(2, 3) + 0.2, normal(3, 3), normal(2, 3), n] for n in (1, 4, 6)]),
    ("loop_in_if", loop_in_if, loop_in_if_ref, [f64, T(2, 2), T(2, 2), index],
     [[0.7, normal(2, 2), normal(2, 2), 3], [-0.5, normal(2, 2), normal(2, 2), 3], [0.3, normal(2, 2), normal(2, 2), 0]]),
    ("while_norm", while_norm, while_norm_ref, [T(3), T(3)],
     [[normal(3), normal(3)], [np.array([2.0, 2.0, 1.0]), normal(3)], [np.array([0.3, -0.2, 0.4]), normal(3, scale=0.1)]]),
    ("while_two", while_two, while_two_ref, [T(2, 2), f64, T(2, 2)],
     [[normal(2, 2), 0.1, normal(2, 2)], [normal(2, 2), 3.5, normal(2, 2)]]),
    ("accumulate", accumulate, accumulate_ref, [T(4), index], [[normal(4), n] for n in (0, 1, 3)]),
    ("while_reshape", while_reshape, while_reshape_ref, [T(3), f64, T(3)],
     [[normal(3), 0.8, normal(3)], [normal(3) * 3, 1.1, normal(3)]]),
    ("loop_of_while", loop_of_while, loop_of_while_ref, [T(3), T(3), index],
     [[normal(3), normal(3), n] for n in (0, 2)]),
    ("taped_mixed", taped_mixed, taped_mixed_ref, [T(3), T(3), f64, T(3)],
     [[normal(3), normal(3), 0.4, normal(3)]]),
    ("taped_nested", taped_nested, taped_nested_ref, [T(2, 2), T(2, 2), T(2, 2)],
     [[normal(2, 2), normal(2, 2), normal(2, 2)]]),
    ("window", window, window_ref, [T(5, 3), T(1, 3), index],
     [[normal(5, 3), normal(1, 3), i] for i in (0, 2, 3)]),
]

IDS = [c[0] for c in CASES]


def build(body, types):
    b = Builder()
    m = b.module()
    with b.function(m, "f", types) as args:
        b.ret(*body(b, *args))
    return m


def run(m, name, *args) -> list:
    """``@name`` on the interpreter; its results as a list (one result comes back bare)."""
    out = irc.interpret(m, name, *args)
    return list(out) if isinstance(out, tuple) else [out]


def is_index(t):
    return t is index or t is i64


def floats(types):
    return [i for i, t in enumerate(types) if not is_index(t)]


def perturbed(args, i, pos, h):
    out = [np.array(a, dtype=np.float64, copy=True) if k == i else a for k, a in enumerate(args)]
    if np.ndim(out[i]) == 0:
        out[i] = float(out[i]) + h
    else:
        out[i][pos] += h
    return out


def moved(args, types, direction, h):
    """``args`` with each float one moved by h times its entry of ``direction``."""
    out = list(args)
    for i, v in zip(floats(types), direction):
        out[i] = np.asarray(args[i], dtype=np.float64) + h * np.asarray(v)
        if np.ndim(args[i]) == 0:
            out[i] = float(out[i])
    return out


def dot(us, vs):
    return sum(float(np.sum(np.asarray(u) * np.asarray(v))) for u, v in zip(us, vs))


def cotangents(results):
    return [normal(*np.shape(r)) if np.ndim(r) else float(normal()) for r in results]


@pytest.fixture(scope="module", params=CASES, ids=IDS)
def case(request):
    name, body, ref, types, points = request.param
    m = build(body, types)
    irc.passes.run(m, "vjp{func=f},jvp{func=f}")
    irc.verify(m)
    return m, body, ref, types, points


def test_derivatives_are_structured(case):
    m, *_ = case
    for name in ("f_vjp", "f_jvp"):
        fn = m.lookup(name)
        assert "taped" not in fn.attributes
        assert fn.body.first_block is fn.body.last_block
        assert not any(op.name.startswith("cf.") or op.name.startswith("memref.") for op in fn.walk())


def test_vjp_matches_differences(case):
    m, _, _, types, points = case
    for args in points:
        results = run(m, "f", *args)
        us = cotangents(results)
        out = run(m, "f_vjp", *args, *us)
        n = len(results)
        for r, expect in zip(out[:n], results):
            np.testing.assert_array_equal(r, expect)
        for i, g in zip(floats(types), out[n:]):
            fd = np.zeros(np.shape(args[i]))
            for pos in np.ndindex(fd.shape):
                hi = dot(us, run(m, "f", *perturbed(args, i, pos, EPS)))
                lo = dot(us, run(m, "f", *perturbed(args, i, pos, -EPS)))
                fd[pos] = (hi - lo) / (2 * EPS)
            np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-7)


@pytest.mark.skipif(torch is None, reason="torch is not installed")
def test_vjp_matches_torch(case):
    m, _, ref, types, points = case
    for args in points:
        results = run(m, "f", *args)
        us = cotangents(results)
        out = run(m, "f_vjp", *args, *us)
        leaves = [torch.tensor(np.asarray(a, dtype=np.float64), requires_grad=True) if not is_index(t) else a
                  for a, t in zip(args, types)]
        expected = ref(torch, *leaves)
        for r, e in zip(out[:len(results)], expected):
            np.testing.assert_allclose(r, e.detach().numpy(), rtol=1e-12, atol=1e-12)
        total = sum((e * torch.tensor(np.asarray(u, dtype=np.float64))).sum() for e, u in zip(expected, us))
        wrt = [leaves[i] for i in floats(types)]
        grads = torch.autograd.grad(total, wrt, allow_unused=True)
        for g, tg, leaf in zip(out[len(results):], grads, wrt):
            tg = torch.zeros_like(leaf) if tg is None else tg
            np.testing.assert_allclose(g, tg.numpy(), rtol=1e-10, atol=1e-12)


def test_jvp_matches_differences_and_vjp(case):
    m, _, _, types, points = case
    for args in points:
        results = run(m, "f", *args)
        n = len(results)
        direction = [normal(*np.shape(args[i])) if np.ndim(args[i]) else float(normal()) for i in floats(types)]
        out = run(m, "f_jvp", *args, *direction)
        for r, expect in zip(out[:n], results):
            np.testing.assert_array_equal(r, expect)
        tangents = out[n:]
        above = run(m, "f", *moved(args, types, direction, EPS))
        below = run(m, "f", *moved(args, types, direction, -EPS))
        for t, hi, lo in zip(tangents, above, below):
            np.testing.assert_allclose(t, (np.asarray(hi) - np.asarray(lo)) / (2 * EPS), rtol=1e-6, atol=1e-7)
        us = cotangents(results)
        grads = run(m, "f_vjp", *args, *us)[n:]
        assert dot(us, tangents) == pytest.approx(dot(grads, direction), rel=1e-10, abs=1e-12)


def test_canonicalize_cse_keep_the_numbers(case):
    m, _, _, types, points = case
    optimised = irc.parse(str(m))
    irc.passes.run(optimised, "canonicalize,cse")
    irc.verify(optimised)
    for args in points:
        us = cotangents(run(m, "f", *args))
        for name, extra in (("f_vjp", us), ("f_jvp", [np.ones(np.shape(args[i])) if np.ndim(args[i]) else 1.0
                                                      for i in floats(types)])):
            before = run(m, name, *args, *extra)
            after = run(optimised, name, *args, *extra)
            for x, y in zip(before, after):
                np.testing.assert_allclose(x, y, rtol=1e-13, atol=1e-14)


# ---- grad, second order, a long loop -------------------------------------------------------------


def rnn_loss(b, h0, w, x, n):
    (h,) = rnn(b, h0, w, x, n)
    return [(h * h).sum()]


def test_grad_of_rnn_loss():
    m = build(rnn_loss, [T(2, 3), T(3, 3), T(2, 3), index])
    irc.passes.run(m, "grad{func=f}")
    irc.verify(m)
    args = [normal(2, 3), normal(3, 3), normal(2, 3), 7]
    value, *grads = run(m, "f_grad", *args)
    assert float(value) == pytest.approx(float((rnn_ref(np, *args)[0] ** 2).sum()), rel=1e-13)
    for i, g in enumerate(grads):
        fd = np.zeros(np.shape(args[i]))
        for pos in np.ndindex(fd.shape):
            fd[pos] = (float(run(m, "f", *perturbed(args, i, pos, EPS))[0])
                       - float(run(m, "f", *perturbed(args, i, pos, -EPS))[0])) / (2 * EPS)
        np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8)


def decay(b, a, x, n):
    with b.for_(0, n, 1, inits=[x]) as loop:
        (h,) = loop.args
        loop.yield_((h * a).sin() + x)
    return [scalar(b, loop.results[0].sum())]


def test_second_order_through_a_loop():
    """grad of grad: d2f/da2 of a loop over a tensor, against differences of the first derivative."""
    m = build(decay, [f64, T(3), index])
    irc.passes.run(m, "grad{func=f},grad{func=f_grad result=1 name=f_hess}")
    irc.verify(m)
    assert "taped" not in m.lookup("f_grad").attributes
    x = normal(3)
    for a, n in ((0.7, 3), (-0.4, 1), (0.9, 0)):
        _, da, _ = run(m, "f_grad", a, x, n)
        out = run(m, "f_hess", a, x, n)
        d2a = out[-2]
        hi = run(m, "f_grad", a + EPS, x, n)[1]
        lo = run(m, "f_grad", a - EPS, x, n)[1]
        assert float(out[1]) == pytest.approx(float(da), rel=1e-13)
        assert float(d2a) == pytest.approx((hi - lo) / (2 * EPS), rel=1e-6, abs=1e-8)


def test_hessian_vector_product_through_a_loop():
    """jvp of a gradient with loops (forward over reverse) against differences of the gradient."""
    m = build(rnn_loss, [T(2, 3), T(3, 3), T(2, 3), index])
    irc.passes.run(m, "grad{func=f},jvp{func=f_grad}")
    irc.verify(m)
    args = [normal(2, 3), normal(3, 3), normal(2, 3), 4]
    v = [normal(2, 3), normal(3, 3), normal(2, 3)]
    out = run(m, "f_grad_jvp", *args, *v)
    hvp = out[-3:]
    hi = run(m, "f_grad", *[a + EPS * d for a, d in zip(args[:3], v)], 4)[1:]
    lo = run(m, "f_grad", *[a - EPS * d for a, d in zip(args[:3], v)], 4)[1:]
    for t, p, q in zip(hvp, hi, lo):
        np.testing.assert_allclose(t, (p - q) / (2 * EPS), rtol=1e-6, atol=1e-8)


def while_loss(b, h0, x):
    g, acc = while_norm(b, h0, x)
    return [(g * acc).sum()]


def test_hessian_vector_product_through_a_while_loop():
    m = build(while_loss, [T(3), T(3)])
    irc.passes.run(m, "grad{func=f},jvp{func=f_grad}")
    irc.verify(m)
    args = [normal(3), normal(3)]
    v = [normal(3), normal(3)]
    hvp = run(m, "f_grad_jvp", *args, *v)[-2:]
    hi = run(m, "f_grad", *[a + EPS * d for a, d in zip(args, v)])[1:]
    lo = run(m, "f_grad", *[a - EPS * d for a, d in zip(args, v)])[1:]
    for t, p, q in zip(hvp, hi, lo):
        np.testing.assert_allclose(t, (p - q) / (2 * EPS), rtol=1e-6, atol=1e-8)


@pytest.mark.skipif(torch is None, reason="torch is not installed")
def test_long_loop_against_torch():
    """50 steps: the segments (8 of 8 steps, the last shorter) cover every step exactly once."""
    m = build(rnn_loss, [T(2, 3), T(3, 3), T(2, 3), index])
    irc.passes.run(m, "grad{func=f}")
    args = [normal(2, 3), normal(3, 3) * 0.5, normal(2, 3), 50]
    _, *grads = run(m, "f_grad", *args)
    leaves = [torch.tensor(a, requires_grad=True) for a in args[:3]]
    loss = (rnn_ref(torch, *leaves, 50)[0] ** 2).sum()
    for g, t in zip(grads, torch.autograd.grad(loss, leaves)):
        np.testing.assert_allclose(g, t.numpy(), rtol=1e-10, atol=1e-13)


def test_scalar_loops_keep_the_tape():
    """A function of scalars alone is still taped (linear cost); only tensors take the structured path."""
    b = Builder()
    m = b.module()
    with b.function(m, "f", [f64, index]) as (x, n):
        with b.for_(0, n, 1, inits=[x]) as loop:
            loop.yield_(loop.args[0].sin() * x)
        b.ret(loop.results[0])
    irc.passes.run(m, "grad{func=f}")
    assert "taped" in m.lookup("f_grad").attributes


# ---- the front end's transforms --------------------------------------------------------------------


def traced_loop(n, body, init):
    """An scf.for over a traced tensor, built in the current trace (what irc.fori_loop builds
    once the front end emits tensor loops): the transforms need nothing more."""
    from irc.frontend.tracer import Tracer, current, operand

    tr = current()
    with tr.builder.for_(0, n, 1, inits=[operand(tr, init)]) as loop:
        loop.yield_(operand(tr, body(Tracer(tr, loop.args[0]))))
    return Tracer(tr, loop.results[0])


def interpreted(fn):
    """``fn`` traced by irc.jit and run on the interpreter (compiling scf ops over tensors is the
    tensor level's work, not yet done)."""
    def call(*args):
        m = irc.jit(fn).lower(*args)
        return irc.interpret(m, m.functions[0].sym_name, *args)

    return call


def test_front_end_grad_jvp_and_grad_of_grad_of_a_tensor_loop():
    h, w = normal(2, 3), normal(3, 3)

    def f(h, w):
        return np.sum(traced_loop(5, lambda g: np.tanh(g @ w), h) ** 2)

    def f_numpy(h, w):
        for _ in range(5):
            h = np.tanh(h @ w)
        return np.sum(h ** 2)

    dh, dw = interpreted(irc.grad(f, argnums=(0, 1)))(h, w)
    for g, i in ((dh, 0), (dw, 1)):
        fd = np.zeros(g.shape)
        for pos in np.ndindex(g.shape):
            args = [h, w]
            fd[pos] = (f_numpy(*perturbed(args, i, pos, EPS)) - f_numpy(*perturbed(args, i, pos, -EPS))) / (2 * EPS)
        np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8)
    u = normal(2, 3)
    _, tangent = interpreted(lambda h, w: irc.jvp(f, (h, w), (u, np.zeros_like(w))))(h, w)
    assert float(tangent) == pytest.approx(float(np.sum(dh * u)), rel=1e-10)

    def squared_norm_of_dw(w):
        return np.sum(irc.grad(f, argnums=1)(h, w) ** 2)

    second = interpreted(irc.grad(squared_norm_of_dw))(w)
    first = interpreted(irc.grad(f, argnums=1))
    fd = np.zeros(w.shape)
    for pos in np.ndindex(w.shape):
        fd[pos] = (np.sum(first(h, perturbed([w], 0, pos, EPS)[0]) ** 2)
                   - np.sum(first(h, perturbed([w], 0, pos, -EPS)[0]) ** 2)) / (2 * EPS)
    np.testing.assert_allclose(second, fd, rtol=1e-5, atol=1e-7)


# ---- the tape of a loop with a constant trip count ---------------------------------------------


def _ops(m, name):
    return {op.name for op in m.lookup(name).walk()}


def test_constant_trips_tape_the_carries_and_dynamic_ones_recompute():
    """rnn_const's adjoint stores its carries (dynamic_update_slice) and reads them back; rnn's,
    whose trip count is an argument, recomputes them from checkpoints (no tape)."""
    taped = build(rnn_const, [T(2, 3), T(3, 3), T(2, 3)])
    irc.passes.run(taped, "vjp{func=f}")
    assert {"graph.dynamic_update_slice", "graph.dynamic_slice"} <= _ops(taped, "f_vjp")
    recomputed = build(rnn, [T(2, 3), T(3, 3), T(2, 3), index])
    irc.passes.run(recomputed, "vjp{func=f}")
    assert "graph.dynamic_update_slice" not in _ops(recomputed, "f_vjp")


@pytest.mark.parametrize("body,types,args", [
    (rnn_const, [T(2, 3), T(3, 3), T(2, 3)], lambda: [normal(2, 3), normal(3, 3), normal(2, 3)]),
    (taped_mixed, [T(3), T(3), f64, T(3)], lambda: [normal(3), normal(3), 0.4, normal(3)]),
    (taped_nested, [T(2, 2), T(2, 2), T(2, 2)], lambda: [normal(2, 2), normal(2, 2), normal(2, 2)]),
])
def test_tape_and_checkpoints_give_the_same_gradient(monkeypatch, body, types, args):
    """Over TAPE_BYTES the same loop takes the sqrt(N) checkpoints: the same numbers."""
    from irc.passes import autodiff_scf

    taped = build(body, types)
    irc.passes.run(taped, "vjp{func=f}")
    monkeypatch.setattr(autodiff_scf, "TAPE_BYTES", 0)
    recomputed = build(body, types)
    irc.passes.run(recomputed, "vjp{func=f}")
    assert "graph.dynamic_update_slice" in _ops(taped, "f_vjp")
    assert "graph.dynamic_update_slice" not in _ops(recomputed, "f_vjp")
    a = args()
    us = cotangents(run(taped, "f", *a))
    for x, y in zip(run(taped, "f_vjp", *a, *us), run(recomputed, "f_vjp", *a, *us)):
        np.testing.assert_allclose(x, y, rtol=1e-12, atol=1e-14)


def test_tape_rule_counts_bytes():
    from irc.passes.autodiff_scf import TAPE_BYTES, uses_tape

    carry = TensorType([256, 256], f64)  # 512 KiB a trip
    assert uses_tape([carry, f64], TAPE_BYTES // (512 * 1024 + 8))
    assert not uses_tape([carry], TAPE_BYTES // (512 * 1024) + 1)
    assert not uses_tape([carry], None)  # the trip count is not a constant
    assert not uses_tape([carry, index], 10)  # an index carry has no tape
    assert not uses_tape([TensorType([None, 3], f64)], 10)


@pytest.mark.parametrize("body,types", [(rnn_const, [T(2, 3), T(3, 3), T(2, 3)]),
                                        (taped_mixed, [T(3), T(3), f64, T(3)])])
def test_forward_over_reverse_through_the_tape(body, types):
    """jvp of the taped vjp (dynamic_slice and dynamic_update_slice's tangent rules) against
    central differences of the vjp along a random direction."""
    m = build(body, types)
    irc.passes.run(m, "vjp{func=f},jvp{func=f_vjp}")
    irc.verify(m)
    args = [normal(*t.shape) if isinstance(t, TensorType) else 0.3 for t in types]
    points = [*args, *cotangents(run(m, "f", *args))]
    direction = [normal(*np.shape(a)) if np.ndim(a) else 0.7 for a in points]
    n = len(run(m, "f_vjp", *points))
    tangents = run(m, "f_vjp_jvp", *points, *direction)[n:]
    hi = run(m, "f_vjp", *[a + EPS * d for a, d in zip(points, direction)])
    lo = run(m, "f_vjp", *[a - EPS * d for a, d in zip(points, direction)])
    for t, h, lo_ in zip(tangents, hi, lo):
        np.testing.assert_allclose(t, (np.asarray(h) - np.asarray(lo_)) / (2 * EPS), rtol=1e-6, atol=1e-7)
