"""``irc.cond`` / ``fori_loop`` / ``while_loop`` over arrays under ``irc.jit``: one scf op each
(not both branches, not an unrolled body), compiled, and equal to the same function run
eagerly on numpy arrays (where they are plain Python control flow)."""

from __future__ import annotations

import numpy as np
import pytest

import irc

RNG = np.random.default_rng(11)


def _count(module, name: str) -> int:
    return sum(1 for op in module.walk() if op.name == name)


def test_cond_on_arrays_builds_one_scf_if_and_runs_one_branch():
    def f(x, w, s):
        y = irc.cond(s > 0, lambda a: np.tanh(a @ w) * 2.0, lambda a: np.exp(a) - 1.0, x)
        return y.sum(axis=1) + y[:, 0]

    x, w = RNG.standard_normal((3, 4)), RNG.standard_normal((4, 4))
    jf = irc.jit(f)
    for s in (1.5, -0.5):
        np.testing.assert_allclose(jf(x, w, s), f(x, w, s), rtol=1e-12)
    module = jf.lower(x, w, 1.0)
    assert _count(module, "scf.if") == 1 and _count(module, "arith.select") == 0


def test_cond_with_several_results_and_a_0d_result_against_a_number():
    def f(x, s):
        return irc.cond(s > 0, lambda a: (a * 2.0, np.sum(a)), lambda a: (a, 0.0), x)

    x = RNG.standard_normal(5)
    jf = irc.jit(f)
    for s in (1.0, -1.0):
        got, want = jf(x, s), f(x, s)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
        np.testing.assert_allclose(got[1], want[1], rtol=1e-12)


def _rnn(h, w, x, n):
    return irc.fori_loop(0, n, lambda i, h: np.tanh(h @ w + x), h)


@pytest.mark.parametrize("n", [0, 1, 10])
def test_fori_loop_over_arrays_is_one_scf_for_with_python_or_traced_bounds(n):
    h = RNG.standard_normal((4, 8)).astype(np.float32)
    w = (RNG.standard_normal((8, 8)) / 3).astype(np.float32)
    x = RNG.standard_normal((4, 8)).astype(np.float32)
    python_bounds = irc.jit(lambda h, w, x: _rnn(h, w, x, n))
    traced_bounds = irc.jit(_rnn)
    want = _rnn(h, w, x, n)
    np.testing.assert_allclose(python_bounds(h, w, x), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(traced_bounds(h, w, x, n), want, rtol=1e-5, atol=1e-6)
    for module in (python_bounds.lower(h, w, x), traced_bounds.lower(h, w, x, n)):
        assert _count(module, "scf.for") == 1 and _count(module, "graph.matmul") == 1  # not unrolled


def test_fori_loop_carrying_a_dict_of_arrays_a_scalar_and_using_the_index():
    def f(x, n):
        def body(i, c):
            return {"a": c["b"], "b": c["a"] * 0.5 + i, "k": c["k"] + np.sum(c["a"])}
        return irc.fori_loop(1, n, body, {"a": x, "b": -x, "k": 0.0})

    x = RNG.standard_normal((2, 3))
    jf = irc.jit(f)
    for n in (1, 2, 7):
        got, want = jf(x, n), f(x, n)
        for key in ("a", "b", "k"):
            np.testing.assert_allclose(got[key], want[key], rtol=1e-12)


def test_while_loop_over_arrays_until_the_norm_is_small():
    def f(x, eps):
        def body(c):
            h, k = c
            return np.sin(h) * 0.5, k + 1
        return irc.while_loop(lambda c: np.sum(c[0] * c[0]) >= eps, body, (x, 0))

    x = RNG.standard_normal((3, 3))
    jf = irc.jit(f)
    for eps in (1e-2, 1e-8, 1e9):
        (h, k), (want_h, want_k) = jf(x, eps), f(x, eps)
        np.testing.assert_allclose(h, want_h, rtol=1e-12)
        assert int(k) == want_k
    assert _count(jf.lower(x, 1e-3), "scf.while") == 1


def test_cond_inside_a_fori_loop_and_a_loop_inside_cond():
    def f(x, n, s):
        def step(i, h):
            return irc.cond(i < 2, lambda a: np.tanh(a), lambda a: a * 0.9 + x, h)

        return irc.cond(s > 0, lambda h: irc.fori_loop(0, n, step, h), lambda h: h - 1.0, x)

    x = RNG.standard_normal(6)
    jf = irc.jit(f)
    for n, s in ((5, 1.0), (0, 1.0), (5, -1.0)):
        np.testing.assert_allclose(jf(x, n, s), f(x, n, s), rtol=1e-12)
    module = jf.lower(x, 5, 1.0)
    assert _count(module, "scf.if") == 2 and _count(module, "scf.for") == 1


def test_a_carried_array_that_changes_shape_is_named_at_the_line():
    def f(x):
        return irc.fori_loop(0, 3, lambda i, h: h[1:], x)

    with pytest.raises(TypeError, match="carried value changed type") as e:
        irc.jit(f)(np.ones(4))
    assert "test_frontend_control_flow.py:" in str(e.value) and "h[1:]" in str(e.value)


def test_grad_through_array_control_flow_keeps_the_differentiable_forms():
    """Under irc.grad a cond over arrays still selects and a fori_loop unrolls (the autodiff
    passes take those); the forward value is the same."""
    def loss(w, x):
        h = irc.fori_loop(0, 3, lambda i, h: np.tanh(h @ w), x)
        return np.sum(irc.cond(np.sum(h) > 0, lambda a: a * a, lambda a: -a, h))

    w, x = RNG.standard_normal((3, 3)) / 2, RNG.standard_normal((2, 3))
    g = irc.grad(loss)(w, x)
    eps, num = 1e-6, np.zeros_like(w)
    for idx in np.ndindex(w.shape):
        d = np.zeros_like(w)
        d[idx] = eps
        num[idx] = (loss(w + d, x) - loss(w - d, x)) / (2 * eps)
    np.testing.assert_allclose(g, num, rtol=1e-5, atol=1e-8)
    np.testing.assert_allclose(irc.jit(loss)(w, x), loss(w, x), rtol=1e-12)


def test_a_training_loop_in_fori_loop_updates_the_carried_parameters_in_place():
    """grad inside a compiled loop body (the loop itself is not differentiated): the SGD step
    ``w - lr * dw`` is the GEMM's epilogue, written over the carried ``w`` (no copy per step)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((32, 8)).astype(np.float32)
    y = rng.standard_normal((32, 4)).astype(np.float32)
    params = {"w1": (rng.standard_normal((8, 16)) / 3).astype(np.float32),
              "w2": (rng.standard_normal((16, 4)) / 4).astype(np.float32)}

    def loss(p, x, y):
        return np.mean((np.tanh(x @ p["w1"]) @ p["w2"] - y) ** 2)

    def train(p, x, y, steps):
        def step(i, p):
            g = irc.grad(loss)(p, x, y)
            return {k: p[k] - np.float32(0.1) * g[k] for k in p}
        return irc.fori_loop(0, steps, step, p)

    jt = irc.jit(train)
    got, want = jt(params, x, y, 20), train(params, x, y, 20)
    for k in params:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-4, atol=1e-6)
    assert loss(got, x, y) < loss(params, x, y)
    exe = irc.compile(jt.lower(params, x, y, 20))
    _, func = exe.train.lower(((8, 16), (16, 4), (32, 8), (32, 4), None))
    (loop,) = [op for op in func.body.entry.ops if op.name == "scf.for" and "parallel" not in op.attributes]
    assert not [op for op in loop.body.ops if op.name == "memref.copy"]


@pytest.mark.parametrize("bound", [0.5, True, np.float32(1)])
def test_fori_loop_bounds_must_be_integers(bound):
    """A float bound would be truncated: an error at the user's line, traced or not."""
    x = np.arange(3, dtype=np.float32)
    with pytest.raises(TypeError, match="irc.fori_loop: lower must be an integer") as info:
        irc.jit(lambda a: irc.fori_loop(bound, 3, lambda i, v: v * 2, a))(x)
    assert __file__ in str(info.value)
    with pytest.raises(TypeError, match="irc.fori_loop: upper must be an integer"):
        irc.fori_loop(0, bound, lambda i, v: v + i, 0)
    with pytest.raises(TypeError, match="upper must be an integer, got float64"):
        irc.jit(lambda a, n: irc.fori_loop(0, n, lambda i, v: v * 2, a))(x, 2.0)
    np.testing.assert_array_equal(irc.jit(lambda a, n: irc.fori_loop(0, n, lambda i, v: v * 2, a))(x, np.int32(2)),
                                  x * 4)
