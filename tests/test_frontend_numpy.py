"""irc.jit on plain numpy functions: every traced numpy function gives what numpy gives eagerly
(values to rounding, shapes and dtypes exactly).  Many functions share one jitted function so
that the file compiles a handful of modules, not one per function."""

from __future__ import annotations

import numpy as np
import pytest

import irc
import irc.numpy as inp

RNG = np.random.default_rng(0)


def check_same(got, want, rtol=1e-6, atol=1e-7):
    """Same pytree, same shapes and dtypes, values to tolerance (numpy is the reference)."""
    got_leaves, got_tree = irc.pytree.flatten(got)
    want_leaves, want_tree = irc.pytree.flatten(want)
    assert got_tree == want_tree
    for path, g, w in zip(irc.pytree.leaf_paths(want_tree), got_leaves, want_leaves):
        w = np.asarray(w)
        assert np.shape(g) == w.shape, path
        assert np.asarray(g).dtype == w.dtype, (path, np.asarray(g).dtype, w.dtype)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=path)


def elementwise(x, y, z):
    return {
        "add": x + y, "sub": x - y, "mul": x * y, "div": x / (np.abs(y) + 1.0), "neg": -x, "pos": +x,
        "pow": np.power(np.abs(x) + 0.5, y), "pow2": x ** 2, "rpow": 2.0 ** x,
        "exp": np.exp(x), "log": np.log(np.abs(x) + 1e-3), "log1p": np.log1p(np.abs(x)), "expm1": np.expm1(x),
        "tanh": np.tanh(x), "sqrt": np.sqrt(np.abs(x)), "sin": np.sin(x), "cos": np.cos(x), "abs": np.abs(x),
        "max": np.maximum(x, y), "min": np.minimum(x, y), "where": np.where(x > y, x, z[:, None]),
        "cmp": (x < y, x <= y, x > y, x >= y, x == y, x != y),
        "clip": np.clip(x, -0.5, 0.5), "square": np.square(x), "rscalar": 1.0 - x * 3.0,
        "broadcast": x + z[:, None] * np.float64(2.0) + np.ones(4),
        "zeros_like": np.zeros_like(x), "ones_like": np.ones_like(y, dtype=np.float32),
        "full_like": np.full_like(x, 7.0), "astype": x.astype(np.float32), "to_int": (x * 10).astype(np.int64),
        "to_bool": x.astype(bool), "bool_arith": (x > 0).astype(np.float64) * y,
        "int_div": np.arange(3) / 2 + x[0, :3],
    }


def reductions(x, y, z):
    return {
        "sum": np.sum(x), "sum0": np.sum(x, axis=0), "sum_keep": x.sum(axis=1, keepdims=True),
        "mean": np.mean(x, axis=(0, 1)), "mean_neg": x.mean(axis=-1), "max": np.max(x, axis=1),
        "min": x.min(), "amax": np.amax(y, axis=0, keepdims=True), "prod": np.prod(x + 2.0, axis=0),
        "int_sum": np.sum((x > 0).astype(np.int32)),
    }


def shapes(x, y, z):
    return {
        "matmul": x @ y.T, "np_matmul": np.matmul(x.T, y), "vecmat": z @ x, "dot": np.dot(x, y.T),
        "reshape": x.reshape(4, 3), "reshape_neg": np.reshape(x, (-1,)), "reshape_tuple": y.reshape((2, 6)),
        "transpose": np.transpose(x), "T": x.T, "perm": np.transpose(x[None], (2, 0, 1)),
        "slice": x[1:, ::2], "step": y[::2, 1::3], "int": x[1], "int2": x[-1, 2], "newaxis": z[None, :, None],
        "ellipsis": x[..., 1], "concat": np.concatenate([x, y], axis=0), "concat1": np.concatenate((x, y), 1),
        "stack": np.stack([x, y]), "stack1": np.stack([x, y], axis=-1),
        "pad": np.pad(x, ((1, 0), (2, 1))), "pad_value": np.pad(z, 2, constant_values=1.5),
        "eye": x[:, :3] @ np.eye(3), "expand": np.expand_dims(z, 0), "squeeze": np.squeeze(x[None]),
        "ravel": x.ravel(), "batched": np.stack([x, x]) @ np.stack([y.T, y.T]),
        "shape": np.zeros(x.shape) + x,
        "len": x * len(x), "iter": sum(row for row in x),
    }


@pytest.mark.parametrize("group", [elementwise, reductions, shapes])
def test_traced_numpy_matches_eager_numpy(group):
    x = RNG.standard_normal((3, 4))
    y = RNG.standard_normal((3, 4))
    z = RNG.standard_normal(3)
    want = group(x, y, z)
    got = irc.jit(group)(x, y, z)
    check_same(got, want)


def test_shapes_group_needs_vectors_of_four():
    x = RNG.standard_normal((3, 4))
    y = RNG.standard_normal((3, 4))
    z = RNG.standard_normal(4)

    def f(x, y, z):
        return {"matvec": x @ z, "vecvec": z @ z, "vecmat": x[:, 0] @ x, "bt": np.broadcast_to(z, (3, 4)) * y}

    check_same(irc.jit(f)(x, y, z), f(x, y, z))


def test_float32_stays_float32_and_python_numbers_are_weak():
    x = RNG.standard_normal((2, 5)).astype(np.float32)

    def f(x, scale):
        return np.tanh(x * scale + 1.0) / 3, np.mean(x, axis=0), x.astype(np.float64) * 2, x * np.float64(2)

    got = irc.jit(f)(x, 0.5)
    check_same(got, f(x, 0.5), rtol=2e-6, atol=1e-6)
    assert got[0].dtype == np.float32 and got[2].dtype == np.float64 and got[3].dtype == np.float64


def test_irc_numpy_creates_from_shapes_traced_and_eagerly():
    def f(x):
        return inp.zeros((2, 3)) + x, inp.ones(3, np.float32), inp.full((2,), 2.5), inp.eye(3), inp.arange(4)

    x = RNG.standard_normal((2, 3))
    check_same(irc.jit(f)(x), f(x))
    assert isinstance(f(x)[0], np.ndarray)  # eager: numpy arrays


def test_integer_functions():
    a = RNG.integers(-50, 50, (3, 4)).astype(np.int64)
    b = RNG.integers(1, 50, (3, 4)).astype(np.int64)

    def f(a, b):
        return (a + b * 3, a - b, np.maximum(a, b), np.abs(a), a / b, np.sum(a, axis=1), a.max(), -a,
                a & b, a | 5, a ^ b, ~a, (a > 0) & (b > 9), ~(a > b), (a > 0) | (b < 3))

    check_same(irc.jit(f)(a, b), f(a, b))


def test_transpose_checks_axes_of_a_vector():
    """np.transpose(a, (1, 0)) of a 1-D array is a ValueError in numpy: one when traced too."""
    x = np.arange(3, dtype=np.float32)
    with pytest.raises(ValueError):
        np.transpose(x, (1, 0))
    with pytest.raises(ValueError, match="axis 1 is out of bounds"):
        irc.jit(lambda a: np.transpose(a, (1, 0)))(x)
    np.testing.assert_array_equal(irc.jit(lambda a: np.transpose(a, (0,)))(x), np.transpose(x, (0,)))
