"""irc.grad, value_and_grad, jvp, vjp on plain numpy functions, checked against central finite
differences in f64 (and torch.autograd where installed); composition with irc.jit and with each
other; irc.cond / fori_loop / while_loop against Python, and their derivatives."""

from __future__ import annotations

import numpy as np
import pytest

import irc
from irc import pytree

RNG = np.random.default_rng(2)


def numeric_grad(f, args, argnum, eps=1e-6):
    """Central differences of the scalar f with respect to every element of args[argnum] (a pytree)."""
    leaves, tree = pytree.flatten(args[argnum])
    grads = []
    for k, leaf in enumerate(leaves):
        leaf = np.asarray(leaf, np.float64)
        g = np.zeros_like(leaf)
        for i in np.ndindex(leaf.shape):
            def at(delta, k=k, leaf=leaf, i=i):
                moved = [np.array(v, np.float64) for v in leaves]
                moved[k] = leaf.copy()
                moved[k][i] += delta
                new = list(args)
                new[argnum] = tree.unflatten(moved)
                return float(f(*new))
            g[i] = (at(eps) - at(-eps)) / (2 * eps)
        grads.append(g)
    return tree.unflatten(grads)


def assert_tree_close(got, want, rtol=1e-6, atol=1e-8):
    gl, gt = pytree.flatten(got)
    wl, wt = pytree.flatten(want)
    assert gt == wt
    for g, w in zip(gl, wl):
        assert np.shape(g) == np.shape(w)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


def mlp_loss(params, x, y):
    h = np.tanh(x @ params["w1"] + params["b1"])
    logits = h @ params["w2"]
    shifted = logits - logits.max(axis=1, keepdims=True)
    logp = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    return -np.mean(np.sum(logp * y, axis=1)) + 0.01 * np.sum(params["w1"] ** 2)


def make_mlp():
    params = {"w1": RNG.standard_normal((4, 5)) * 0.5, "b1": RNG.standard_normal(5) * 0.1,
              "w2": RNG.standard_normal((5, 3)) * 0.5}
    x = RNG.standard_normal((6, 4))
    y = np.eye(3)[RNG.integers(0, 3, 6)]
    return params, x, y


def test_grad_of_dict_params_is_a_dict_matching_finite_differences():
    params, x, y = make_mlp()
    g = irc.grad(mlp_loss)(params, x, y)
    assert isinstance(g, dict) and set(g) == set(params)
    assert_tree_close(g, numeric_grad(mlp_loss, (params, x, y), 0), rtol=1e-6, atol=1e-8)


def test_value_and_grad_with_several_argnums():
    params, x, y = make_mlp()
    value, (gp, gx) = irc.value_and_grad(mlp_loss, argnums=(0, 1))(params, x, y)
    np.testing.assert_allclose(value, mlp_loss(params, x, y), rtol=1e-12)
    assert_tree_close(gx, numeric_grad(mlp_loss, (params, x, y), 1), rtol=1e-6, atol=1e-8)
    assert_tree_close(gp, irc.grad(mlp_loss)(params, x, y), rtol=1e-12)


def test_grad_matches_torch_autograd():
    torch = pytest.importorskip("torch")
    params, x, y = make_mlp()
    tp = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    h = torch.tanh(torch.tensor(x) @ tp["w1"] + tp["b1"])
    logp = torch.log_softmax(h @ tp["w2"], dim=1)
    loss = -(logp * torch.tensor(y)).sum(dim=1).mean() + 0.01 * (tp["w1"] ** 2).sum()
    loss.backward()
    assert_tree_close(irc.grad(mlp_loss)(params, x, y), {k: v.grad.numpy() for k, v in tp.items()})


def test_jit_of_grad_and_grad_inside_jit():
    params, x, y = make_mlp()
    want = irc.grad(mlp_loss)(params, x, y)
    assert_tree_close(irc.jit(irc.grad(mlp_loss))(params, x, y), want, rtol=1e-12)

    def step(params, x, y):
        g = irc.grad(lambda p: mlp_loss(p, x, y))(params)  # closes over the traced x and y
        return {k: params[k] - 0.1 * g[k] for k in params}

    new = irc.jit(step)(params, x, y)
    assert_tree_close(new, {k: params[k] - 0.1 * want[k] for k in params}, rtol=1e-12)
    module = irc.jit(step).lower(params, x, y)
    assert any(op.name == "func.call" for op in module.walk())


def test_grad_of_grad_matches_finite_differences_of_the_gradient():
    def f(x):
        return np.sum(np.sin(x) * x ** 2 + np.exp(0.3 * x))

    x = RNG.standard_normal(3)
    second = irc.grad(lambda x: np.sum(irc.grad(f)(x) * np.array([1.0, 2.0, 3.0])))(x)
    want = numeric_grad(lambda x: np.sum(irc.grad(f)(x) * np.array([1.0, 2.0, 3.0])), (x,), 0)
    np.testing.assert_allclose(second, want, rtol=1e-6, atol=1e-8)
    h = irc.grad(irc.grad(lambda s: np.sin(s) * s * s))(1.3)
    np.testing.assert_allclose(h, 2 * np.sin(1.3) + 4 * 1.3 * np.cos(1.3) - 1.3 ** 2 * np.sin(1.3), rtol=1e-12)


def test_jvp_and_vjp_match_finite_differences():
    def f(a, b):
        return {"u": np.tanh(a @ b), "v": np.sum(a * a, axis=0)}

    a, b = RNG.standard_normal((3, 4)), RNG.standard_normal((4, 2))
    ta, tb = RNG.standard_normal((3, 4)), RNG.standard_normal((4, 2))
    out, tangent = irc.jvp(f, (a, b), (ta, tb))
    eps = 1e-6
    plus, minus = f(a + eps * ta, b + eps * tb), f(a - eps * ta, b - eps * tb)
    assert_tree_close(out, f(a, b), rtol=1e-12)
    assert_tree_close(tangent, {k: (plus[k] - minus[k]) / (2 * eps) for k in plus}, rtol=1e-6, atol=1e-8)

    out, vjp_fn = irc.vjp(f, a, b)
    cu, cv = RNG.standard_normal((3, 2)), RNG.standard_normal(4)
    ga, gb = vjp_fn({"u": cu, "v": cv})
    def scalar(a, b):
        return np.sum(f(a, b)["u"] * cu) + np.sum(f(a, b)["v"] * cv)
    np.testing.assert_allclose(ga, numeric_grad(scalar, (a, b), 0), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(gb, numeric_grad(scalar, (a, b), 1), rtol=1e-6, atol=1e-8)


def test_vjp_and_jvp_inside_jit():
    def f(a):
        return np.sin(a) * a

    def both(a, t):
        out, vjp_fn = irc.vjp(f, a)
        _, tangent = irc.jvp(f, (a,), (t,))
        return out, vjp_fn(t)[0], tangent

    a, t = RNG.standard_normal(5), RNG.standard_normal(5)
    out, cot, tangent = irc.jit(both)(a, t)
    deriv = np.cos(a) * a + np.sin(a)
    np.testing.assert_allclose(out, f(a), rtol=1e-12)
    np.testing.assert_allclose(cot, deriv * t, rtol=1e-12)
    np.testing.assert_allclose(tangent, deriv * t, rtol=1e-12)


def test_grad_errors_name_the_argument_and_line():
    with pytest.raises(TypeError, match=r"argument 1 has dtype int64"):
        irc.grad(lambda x, n: np.sum(x) * n, argnums=1)(np.ones(3), np.arange(3))
    with pytest.raises(TypeError, match=r"must return one float scalar, got tensor<3xf64>") as e:
        irc.grad(lambda x: x * 2)(np.ones(3))
    assert "test_frontend_grad.py:" in str(e.value)
    with pytest.raises(ValueError, match="tangents"):
        irc.jvp(lambda a, b: a * b, (np.ones(2), np.ones(2)), (np.ones(2),))


# -- control flow -------------------------------------------------------------------------------------------


def test_cond_on_traced_scalars_builds_scf_if_and_matches_python():
    def f(x, s):
        return irc.cond(s > 0, lambda a: a * a + 1.0, lambda a: -a, s) * np.sum(x)

    jf = irc.jit(f)
    x = RNG.standard_normal(3)
    for s in (0.7, -0.7):
        np.testing.assert_allclose(jf(x, s), f(x, s), rtol=1e-12)
    assert any(op.name == "scf.if" for op in jf.lower(x, 0.5).walk())


def test_cond_on_tensors_matches_python_compiled_and_differentiated():
    """Compiled: scf.if; under grad: both branches and a select (control.py)."""
    def f(x, s):
        return irc.cond(s > 0, lambda a: np.tanh(a) * 2.0, lambda a: a - 1.0, x)

    x = RNG.standard_normal(4)
    for s in (1.0, -1.0):
        np.testing.assert_allclose(irc.jit(f)(x, s), f(x, s), rtol=1e-12)
    g = irc.grad(lambda x, s: np.sum(f(x, s)))
    np.testing.assert_allclose(g(x, 1.0), 2 / np.cosh(x) ** 2, rtol=1e-12)
    np.testing.assert_allclose(g(x, -1.0), np.ones(4), rtol=1e-12)


def test_mismatched_pytrees_are_named_at_the_line():
    with pytest.raises(ValueError, match="false_fn") as e:
        irc.jit(lambda s: irc.cond(s > 0, lambda: (s, s), lambda: s))(1.0)
    assert "test_frontend_grad.py:" in str(e.value)
    with pytest.raises(ValueError, match=r"body_fun's result"):
        irc.jit(lambda s: irc.fori_loop(0, 2, lambda i, c: (c[0], c[1], c[0]), (s, s)))(1.0)
    _, vjp_fn = irc.vjp(lambda a: {"u": a * 2.0}, np.ones(2))
    with pytest.raises(ValueError, match=r"the cotangent") as e:
        vjp_fn({"v": np.ones(2)})
    assert "test_frontend_grad.py:" in str(e.value)


def test_fori_loop_scalars_builds_scf_for_and_is_differentiable():
    def power_series(s):
        return irc.fori_loop(0, 6, lambda i, c: c * s + i, 1.0)

    def reference(s):
        c = 1.0
        for i in range(6):
            c = c * s + i
        return c

    jf = irc.jit(power_series)
    assert any(op.name == "scf.for" for op in jf.lower(0.5).walk())
    np.testing.assert_allclose(jf(0.5), reference(0.5), rtol=1e-12)
    np.testing.assert_allclose(irc.grad(power_series)(0.5),
                               numeric_grad(reference, (0.5,), 0), rtol=1e-6)


def test_fori_loop_over_tensors_compiles_and_differentiates_unrolled():
    """Compiled: one scf.for; under grad: unrolled (control.py)."""
    def f(x, w):
        return irc.fori_loop(0, 3, lambda i, h: np.tanh(h @ w) + i, x)

    x, w = RNG.standard_normal((2, 3)), RNG.standard_normal((3, 3))
    np.testing.assert_allclose(irc.jit(f)(x, w), f(x, w), rtol=1e-12)
    g = irc.grad(lambda w: np.sum(f(x, w)))(w)
    np.testing.assert_allclose(g, numeric_grad(lambda w: np.sum(f(x, w)), (w,), 0), rtol=1e-6, atol=1e-8)


def test_while_loop_matches_python_and_has_a_derivative():
    def halvings(x):
        return irc.while_loop(lambda c: c[0] > 1.0, lambda c: (c[0] * 0.5, c[1] + 1), (x, 0))

    jf = irc.jit(halvings)
    for x in (0.5, 3.0, 100.0):
        value, count = jf(x)
        want = halvings(x)
        np.testing.assert_allclose(value, want[0], rtol=1e-12)
        assert int(count) == want[1]
    assert any(op.name == "scf.while" for op in jf.lower(3.0).walk())
    np.testing.assert_allclose(irc.grad(lambda x: halvings(x)[0] * x)(3.0), 2 * 3.0 / 4, rtol=1e-12)


def test_while_loop_and_fori_loop_over_tensors_differentiate_as_loops():
    """Under grad, a while_loop and a fori_loop over arrays stay one scf.while / scf.for (not
    unrolled, not refused): the gradient, compiled, matches central differences in f64."""
    def f(x, w):
        grown = irc.while_loop(lambda c: np.sum(c * c) < 50.0, lambda c: c * 1.5 + 0.1, x)
        return np.sum(irc.fori_loop(0, 6, lambda i, h: np.tanh(h @ w + grown), grown))

    x = np.array([0.3, -0.2, 0.5])
    w = RNG.standard_normal((3, 3)) * 0.5
    np.testing.assert_allclose(irc.jit(f)(x, w), f(x, w), rtol=1e-12)
    grad = irc.jit(irc.grad(f, argnums=(0, 1)))
    names = {op.name for op in grad.lower(x, w).walk()}
    assert {"scf.while", "scf.for"} <= names
    gx, gw = grad(x, w)
    np.testing.assert_allclose(gx, numeric_grad(f, (x, w), 0), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(gw, numeric_grad(f, (x, w), 1), rtol=1e-5, atol=1e-7)


def test_eager_grad_in_a_loop_traces_once():
    traces = []

    def f(x):
        traces.append(1)
        return np.sum(x * x)

    for k in range(3):
        np.testing.assert_allclose(irc.grad(f)(np.full(2, float(k))), 2 * k * np.ones(2))
    assert len(traces) == 1


def test_vjp_checks_the_cotangent_and_takes_a_number_for_a_scalar():
    x = np.arange(3, dtype=np.float32)
    out, pullback = irc.vjp(lambda a: {"s": np.sum(a * a), "v": a * 3}, x)
    with pytest.raises(TypeError, match=r"the cotangent of result v must be float32\[3\], got float32\[2\]"):
        pullback({"s": np.float32(1), "v": np.ones(2, np.float32)})
    with pytest.raises(TypeError, match=r"the cotangent of result v must be float32\[3\], got float64\[3\]"):
        pullback({"s": np.float32(1), "v": np.ones(3)})
    (g,) = pullback({"s": 1.0, "v": np.ones(3, np.float32)})  # a Python number for the scalar
    np.testing.assert_allclose(g, 2 * x + 3)
    (g,) = irc.jit(lambda a: irc.vjp(lambda b: np.sum(b * 3), a)[1](2))(x)
    np.testing.assert_array_equal(g, np.full(3, 6, np.float32))
